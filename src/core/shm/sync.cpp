#include "shm/sync.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

#include "ddp/error.h"
#include "shm/op_signature.h"
#include "util/strings.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ddp::detail::shm {
namespace {

using Clock = std::chrono::steady_clock;

// The first futex slice, doubled after each until kMaxSlice: liveness and the deadline are checked
// between slices, so a dead peer is noticed within kMaxSlice.
constexpr auto kFirstSlice = std::chrono::microseconds(500);
constexpr auto kMaxSlice = std::chrono::milliseconds(20);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// `value` is at or past `step` (wrap-around safe).
inline bool at_least(std::uint32_t value, std::uint32_t step) { return static_cast<std::int32_t>(value - step) >= 0; }

std::uint32_t* word(std::atomic<std::uint32_t>& a) { return reinterpret_cast<std::uint32_t*>(&a); }

void futex_wait(std::atomic<std::uint32_t>& a, std::uint32_t expected, std::chrono::nanoseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000000000), static_cast<long>(timeout.count() % 1000000000)};
  ::syscall(SYS_futex, word(a), FUTEX_WAIT, expected, &ts, nullptr,
            0);  // EAGAIN, EINTR, ETIMEDOUT: the caller re-checks
}

void futex_wake(std::atomic<std::uint32_t>& a) {
  ::syscall(SYS_futex, word(a), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

Sync::Sync(void* base, const Layout& layout, int me, std::vector<int> names, PeerWatch watch,
           std::chrono::microseconds spin, bool yield)
    : base_(base),
      layout_(layout),
      header_(layout.header(base)),
      me_(me),
      names_(std::move(names)),
      watch_(std::move(watch)),
      spin_(spin),
      yield_(yield) {
  step_ = layout_.control(base_, me_)->step.load(std::memory_order_relaxed);
  known_all_ = step_;
}

bool Sync::reached(int peer, std::uint32_t step) const {
  return at_least(layout_.control(base_, peer)->step.load(std::memory_order_acquire), step);
}

void Sync::publish(std::uint32_t step, Deadline deadline, std::string_view what) {
  Control& c = *layout_.control(base_, me_);
  // Peers read this parity's word after they see `step` (below). Step - 2's word, when it holds a
  // signature, is read by each peer before it publishes step - 1: wait for that.
  if (c.op[step & 1].load(std::memory_order_relaxed) != 0) ready_to_write(step, deadline, what);
  c.op[step & 1].store(step == op_first_ ? op_signature_ : 0, std::memory_order_relaxed);
  // seq_cst on both sides (here and in block_on) so that either the sleeper sees the new value or
  // this sees the sleeper: no lost wake-up.
  c.step.store(step, std::memory_order_seq_cst);
  if (c.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake(c.step);
}

void Sync::wait_for(int peer, std::uint32_t step, Deadline deadline, std::string_view what) {
  wait_until(peer, step, deadline, what);
  if (step == op_first_) check_same_op(peer, step, what);
}

void Sync::check_same_op(int peer, std::uint32_t step, std::string_view what) {
  const std::uint64_t theirs = layout_.control(base_, peer)->op[step & 1].load(std::memory_order_relaxed);
  if (theirs == op_signature_) return;
  abort();
  throw MismatchError(
      cat("shared-memory ", what, ": the ranks called different collectives: this rank (rank ",
          names_[static_cast<std::size_t>(me_)], ") called ", describe_op(op_signature_), " where ", describe(peer),
          " called ", describe_op(theirs),
          ". Every rank of a group must call the same collectives with the same sizes in the same order "
          "(DDP_DEBUG=1 compares them across hosts too, and names the op's sequence number)"));
}

void Sync::wait_until(int peer, std::uint32_t step, Deadline deadline, std::string_view what) {
  if (reached(peer, step)) return;
  if (spin_.count() > 0) {
    const auto until = Clock::now() + spin_;
    for (unsigned i = 1;; ++i) {
      if (yield_) ::sched_yield();
      else cpu_relax();
      if (reached(peer, step)) return;
      if (yield_ || (i & 63) == 0) {
        check_abort(what);
        if (Clock::now() >= until) break;
      }
    }
  }
  block_on(peer, step, deadline, what);
}

void Sync::wait_all(std::uint32_t step, Deadline deadline, std::string_view what) {
  for (int p = 0; p < layout_.ranks; ++p) {
    if (p != me_) wait_for(p, step, deadline, what);
  }
  if (at_least(step, known_all_)) known_all_ = step;
}

void Sync::block_on(int peer, std::uint32_t step, Deadline deadline, std::string_view what) {
  Control& c = *layout_.control(base_, peer);
  std::chrono::nanoseconds slice = kFirstSlice;
  for (;;) {
    check_abort(what);
    const auto now = Clock::now();
    if (now >= deadline) check_peers(step, deadline, what);  // throws: someone has not arrived
    c.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const std::uint32_t seen = c.step.load(std::memory_order_seq_cst);
    if (!at_least(seen, step)) futex_wait(c.step, seen, std::min<std::chrono::nanoseconds>(slice, deadline - now));
    c.sleepers.fetch_sub(1, std::memory_order_relaxed);
    if (reached(peer, step)) return;
    check_abort(what);
    check_peers(step, deadline, what);
    slice = std::min<std::chrono::nanoseconds>(slice * 2, kMaxSlice);
  }
}

void Sync::check_abort(std::string_view what) const {
  const std::uint32_t by = header_->aborted_by.load(std::memory_order_acquire);
  if (by == 0) return;
  const int rank = static_cast<int>(by) - 1;
  if (rank == me_) throw Error(cat("shared-memory ", what, ": this rank's group was aborted after an earlier error"));
  // A peer that gave up most often did so because another one died: name the dead one, the cause.
  for (int p = 0; p < layout_.ranks; ++p) {
    if (p != me_ && p != rank && watch_.exited(p)) {
      throw PeerLostError(cat("shared-memory ", what, ": ", describe(p), " exited during it (", describe(rank),
                              " gave up on the group as well)"));
    }
  }
  throw PeerLostError(cat("shared-memory ", what, ": ", describe(rank),
                          " gave up on the group after an error of its own (its output says which)"));
}

// Throws PeerLostError for a peer that exited before reaching `step`, or TimeoutError naming the
// peers that have not reached it once the deadline has passed; returns otherwise.
void Sync::check_peers(std::uint32_t step, Deadline deadline, std::string_view what) const {
  std::vector<int> missing;
  for (int p = 0; p < layout_.ranks; ++p) {
    if (p == me_ || reached(p, step)) continue;
    if (watch_.exited(p) && !reached(p, step)) {
      throw PeerLostError(cat("shared-memory ", what, ": ", describe(p), " exited while this rank waited for it"));
    }
    missing.push_back(p);
  }
  if (Clock::now() < deadline || missing.empty()) return;
  std::vector<std::string> who;
  for (int p : missing) who.push_back(describe(p));
  throw TimeoutError(cat("shared-memory ", what, ": waited for ", join(who), ", which did not arrive"));
}

std::string Sync::describe(int peer) const {
  return cat("rank ", names_[static_cast<std::size_t>(peer)], " (pid ", watch_.pid(peer), ")");
}

void Sync::abort() noexcept {
  std::uint32_t none = 0;
  header_->aborted_by.compare_exchange_strong(none, static_cast<std::uint32_t>(me_ + 1), std::memory_order_acq_rel);
  for (int p = 0; p < layout_.ranks; ++p) futex_wake(layout_.control(base_, p)->step);
}

}  // namespace ddp::detail::shm
