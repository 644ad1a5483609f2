#include "group/membership.h"

#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "ddp/error.h"
#include "net/socket.h"
#include "util/error_kind.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

using Clock = std::chrono::steady_clock;

std::string identity() { return cat("pid ", ::getpid(), " on ", local_hostname()); }

// A join error as the store keeps it: "<ErrorKind>:<message>", so that every rank throws the
// same kind (a conflict is a MismatchError; a rank that cannot take part says why, as its kind).
std::string encode(ErrorKind kind, const std::string& message) { return cat(static_cast<int>(kind), ":", message); }

// Before failing, wait (briefly) until every rank that came has seen the error: the rank that
// hosts the store must not take it down while the others are still looking.
// `everyone`: wait for all `size` ranks, not only those that came so far (a rank that cannot take
// part may host the store, and the others may not have connected yet).
void wait_until_seen(Store& store, int everyone = 0) noexcept {
  try {
    store.add("join_error_seen", 1);
    const auto until = Clock::now() + std::chrono::seconds(3);
    const auto target = [&] { return everyone > 0 ? everyone : store.add("claims", 0); };
    while (store.add("join_error_seen", 0) < target() && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (...) {
  }
}

[[noreturn]] void leave_with(Store& store, const std::string& encoded) {
  wait_until_seen(store);
  const auto colon = encoded.find(':');
  const auto kind = parse_int(encoded.substr(0, colon));
  if (colon == std::string::npos || !kind) throw MismatchError(encoded);
  throw_error(static_cast<ErrorKind>(*kind), encoded.substr(colon + 1));
}

// The first conflict found is the one every rank reports.
[[noreturn]] void join_failed(Store& store, const std::string& message) {
  leave_with(store, store.compare_set("join_error", "", encode(ErrorKind::Mismatch, message)));
}

struct Missing {
  std::vector<int> ranks;  // empty: every rank arrived
  std::chrono::milliseconds waited{0};
};

// Waits until `prefix`<r> exists for every rank r; leaves with a join error as soon as one is
// recorded.
Missing wait_for_ranks(Store& store, const std::string& prefix, int size, std::chrono::milliseconds timeout) {
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(cat(prefix, r));
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    try {
      store.wait(keys, std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(500)));
      return {};
    } catch (const TimeoutError&) {
    }
    if (store.check({"join_error"})) leave_with(store, store.get("join_error"));
    if (Clock::now() >= deadline) break;
  }
  Missing missing;
  for (int r = 0; r < size; ++r) {
    if (!store.check({keys[static_cast<std::size_t>(r)]})) missing.ranks.push_back(r);
  }
  missing.waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  return missing;
}

}  // namespace

void await_members(Store& store, const std::string& name, int rank, int size, std::chrono::milliseconds timeout,
                   const std::exception_ptr& unusable) {
  const std::string me = identity();
  if (unusable) {  // the others hear why at once instead of waiting for this rank until their timeout
    const ErrorInfo why = classify(unusable);
    try {
      store.compare_set(
          "join_error", "",
          encode(why.kind, cat("rank ", rank, " (", me, ") cannot take part in group '", name, "': ", why.message)));
    } catch (...) {
    }
    wait_until_seen(store, size);
    std::rethrow_exception(unusable);
  }
  store.add("claims", 1);
  const std::string owner = store.compare_set(cat("rank/", rank, "/owner"), "", me);
  if (owner != me) {
    join_failed(store, cat("two processes claim rank ", rank, " of group '", name, "': ", owner, " and ", me,
                           ". Each process needs its own RANK (check the launcher or the RANK variable)."));
  }
  const std::string claimed = store.compare_set("size", "", cat(size, " (said by rank ", rank, ", ", me, ")"));
  if (parse_int(claimed.substr(0, claimed.find(' '))).value_or(-1) != size) {
    join_failed(
        store, cat("ranks disagree on the size of group '", name, "': rank ", rank, " (", me, ") has world size ", size,
                   ", but the size is ", claimed, ". Start every process with the same WORLD_SIZE."));
  }
  store.set(cat("joined/", rank), me);
  const auto missing = wait_for_ranks(store, "joined/", size, timeout);
  if (missing.ranks.empty()) return;
  throw RanksMissingError(cat("group '", name, "': rank", missing.ranks.size() == 1 ? " " : "s ", join(missing.ranks),
                              " of ", size, " did not join within ", format_duration(missing.waited),
                              ". They may not have been started, may have crashed before joining, or may be using "
                              "another MASTER_ADDR/MASTER_PORT or WORLD_SIZE."),
                          missing.ranks);
}

void all_connected(Store& store, const std::string& name, int rank, int size, std::chrono::milliseconds timeout) {
  store.set(cat("connected/", rank), "1");
  const auto missing = wait_for_ranks(store, "connected/", size, timeout);
  if (missing.ranks.empty()) return;
  throw RanksMissingError(cat("group '", name, "': rank", missing.ranks.size() == 1 ? " " : "s ", join(missing.ranks),
                              " of ", size, " did not finish connecting within ", format_duration(missing.waited),
                              "; their output says why (a backend that failed to set up)"),
                          missing.ranks);
}

}  // namespace ddp::detail
