#include "shm/rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "ddp/error.h"
#include "ddp/store.h"
#include "util/strings.h"
#include "util/deadline.h"

namespace ddp::detail::shm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string id_key(int rank) { return cat("shm/id/", rank); }
std::string segment_key(int host) { return cat("shm/segment/", host); }
std::string ok_key(int rank) { return cat("shm/ok/", rank); }

milliseconds left_until(Deadline deadline) { return std::chrono::duration_cast<milliseconds>(deadline - Clock::now()); }

std::vector<std::string> keys_for(int size, std::string (*key)(int)) {
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(key(r));
  return keys;
}

// Waits for `key`, which rank `owner` (index `index` in `watch`) writes; fails early if it exits.
std::string wait_for_key(Store& store, const std::string& key, const PeerWatch& watch, int index, int owner,
                         Deadline deadline) {
  const auto start = Clock::now();
  for (;;) {
    const auto left = left_until(deadline);
    if (left <= milliseconds(0)) {
      throw TimeoutError(cat("shared-memory setup: rank ", owner, " did not publish its segment within ",
                             format_duration(std::chrono::duration_cast<milliseconds>(Clock::now() - start))));
    }
    try {
      store.wait({key}, std::clamp(left, milliseconds(1), milliseconds(200)));
      return store.get(key);
    } catch (const TimeoutError&) {
    }
    if (watch.exited(index)) {
      throw PeerLostError(cat("shared-memory setup: rank ", owner, " (pid ", watch.pid(index),
                              ") exited before publishing its segment"));
    }
  }
}

std::uint64_t random_nonce() {
  std::random_device device;
  return (std::uint64_t{device()} << 32) ^ device() ^ (static_cast<std::uint64_t>(::getpid()) << 16);
}

}  // namespace

std::size_t chunk_for(const Tuning& tuning, int ranks) {
  std::size_t chunk = std::max<std::size_t>(kPage, tuning.chunk_bytes / kPage * kPage);
  while (chunk > kPage && Layout::make(ranks, chunk).total_bytes > tuning.max_segment_bytes) {
    chunk = std::max(kPage, chunk / 2 / kPage * kPage);
  }
  return chunk;
}

std::vector<Identity> exchange_identities(Store& store, int rank, int size, const Identity& mine, Deadline deadline) {
  store.set(id_key(rank), encode(mine));
  const auto keys = keys_for(size, id_key);
  const auto texts = store.multi_get(keys, ms_until(deadline));  // one round trip
  std::vector<Identity> ids;
  for (int r = 0; r < size; ++r) {
    const std::string& text = texts[static_cast<std::size_t>(r)];
    auto id = decode_identity(text);
    if (!id) throw Error(cat("shared-memory setup: rank ", r, " published a malformed identity ", quote(text)));
    ids.push_back(*id);
  }
  return ids;
}

std::unique_ptr<HostCollectives> join_host_segment(Store& store, const Plan& plan, const std::vector<Identity>& ids,
                                                   const Tuning& tuning, Deadline deadline) {
  const auto& members = plan.my_host();
  const int n = static_cast<int>(members.size());
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) pids.push_back(i == plan.local ? -1 : ids[static_cast<std::size_t>(members[i])].pid);
  PeerWatch watch(pids);
  const std::string key = segment_key(plan.host);

  // The leader's chunk and small-message threshold hold for the whole host: they decide how
  // many steps an op takes, which must be the same on every rank.
  Tuning agreed = tuning;
  Segment segment;
  Layout layout;
  if (plan.local == 0) {
    layout = Layout::make(n, chunk_for(tuning, n));
    const std::uint64_t nonce = random_nonce();
    try {
      segment = Segment::create(layout.total_bytes);
    } catch (const std::exception& e) {
      store.set(key, cat("! ", e.what()));  // the others fail at once instead of at the timeout
      throw;
    }
    Header* h = layout.header(segment.data());
    h->magic = kMagic;
    h->nonce = nonce;
    h->ranks = static_cast<std::uint32_t>(n);
    h->chunk_bytes = static_cast<std::uint32_t>(layout.chunk);
    h->total_bytes = layout.total_bytes;
    store.set(key, cat(::getpid(), " ", segment.fd(), " ", layout.total_bytes, " ", nonce, " ", layout.chunk, " ",
                       tuning.small_bytes));
  } else {
    const std::string where = wait_for_key(store, key, watch, 0, members[0], deadline);
    if (!where.empty() && where[0] == '!') {
      throw IOError(cat("shared-memory setup: rank ", members[0], " could not create the segment: ", where.substr(2)));
    }
    long long pid = 0, fd = 0;
    unsigned long long bytes = 0, nonce = 0, chunk = 0, small = 0;
    if (std::sscanf(where.c_str(), "%lld %lld %llu %llu %llu %llu", &pid, &fd, &bytes, &nonce, &chunk, &small) != 6 ||
        chunk == 0 || chunk % kPage != 0 || (layout = Layout::make(n, chunk)).total_bytes != bytes) {
      throw Error(cat("shared-memory setup: rank ", members[0], " published ", quote(where),
                      ", which is not a segment for ", n, " ranks; do all ranks run the same version of ddp?"));
    }
    agreed.small_bytes = static_cast<std::size_t>(small);
    segment = Segment::open(static_cast<pid_t>(pid), static_cast<int>(fd), layout.total_bytes);
    const Header* h = layout.header(segment.data());
    if (h->magic != kMagic || h->nonce != nonce || h->ranks != static_cast<std::uint32_t>(n) ||
        h->chunk_bytes != layout.chunk) {
      throw Error(cat("shared-memory setup: /proc/", pid, "/fd/", fd, " is not the segment rank ", members[0],
                      " published (a different process may have taken its pid)"));
    }
  }
  return std::make_unique<HostCollectives>(std::move(segment), layout, plan.local, members, std::move(watch), agreed);
}

std::vector<std::string> agree_on_setup(Store& store, int rank, int size, const std::string& my_failure,
                                        Deadline deadline) {
  store.set(ok_key(rank), my_failure.empty() ? "ok" : "no " + my_failure);
  const auto keys = keys_for(size, ok_key);
  const auto values = store.multi_get(keys, ms_until(deadline));
  std::vector<std::string> failures;
  for (int r = 0; r < size; ++r) {
    const std::string& value = values[static_cast<std::size_t>(r)];
    if (value != "ok") failures.push_back(cat("rank ", r, ": ", value.size() > 3 ? value.substr(3) : value));
  }
  return failures;
}

}  // namespace ddp::detail::shm
