// Arrival counters in shared memory and bounded waits on them.
//
// The protocol. Every rank has one step counter (layout.h's Control::step). The collectives are
// sequences of steps, the same sequence on every rank. At step s a rank may write data into its
// buffer s % 2; publishing s says "my data for step s is written, and I have finished reading
// everything of steps before s". Hence:
//   - before reading a peer's data of step s, wait until the peer has published s;
//   - before writing into one's own buffer at step s, wait until every peer has published s - 1
//     (they are done with step s - 2, the last user of the same buffer): ready_to_write(s). The
//     same holds for the op-signature word of step s's parity when step s - 2 wrote one.
//
// Waits spin for Tuning::spin (cheap when the peer is a few microseconds away; with more ranks on
// the host than CPUs, the spin yields the CPU on each turn, as the peer may be waiting for it), then sleep on
// the peer's counter with FUTEX_WAIT (shared, not private: the word is in a shared mapping) in
// slices of at most 20 ms. Between slices they check the deadline (TimeoutError naming the ranks
// that did not arrive), the peers' liveness (PeerLostError naming the rank that exited) and the
// abort word (PeerLostError naming the rank that gave up, or
// rather a peer that has exited, the likelier cause). Publishing wakes sleepers only when
// there are any, so a step costs no system call while both sides are awake.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shm/layout.h"
#include "shm/liveness.h"

namespace ddp::detail::shm {

class Sync {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  // `base` is the mapped segment; `me` this rank's index in it; `names[i]` the group rank of
  // index i (for messages); `watch` the peers' processes.
  Sync(void* base, const Layout& layout, int me, std::vector<int> names, PeerWatch watch,
       std::chrono::microseconds spin, bool yield);

  int me() const { return me_; }
  int size() const { return layout_.ranks; }

  // Starts an op: its first step (the next one) carries `signature` (op_signature.h), and a wait
  // for a peer at that step checks that the peer's first step there is the same op: if not, the
  // group is aborted and MismatchError names both ops. Every op calls it before its first step.
  void begin_op(std::uint64_t signature) {
    op_signature_ = signature;
    op_first_ = step_ + 1;
  }
  // The next step number (not yet published).
  std::uint32_t next_step() { return ++step_; }
  // Publishes `step`. When its parity's signature word still holds an op's first step (step - 2),
  // it first waits until every peer has published step - 1, that is, has checked that word: a rank
  // whose steps need no buffer (a barrier, a broadcast's receivers) could otherwise overwrite it
  // while a slower peer is yet to read it.
  void publish(std::uint32_t step, Deadline deadline, std::string_view what);
  // Waits until `peer` has published `step`.
  void wait_for(int peer, std::uint32_t step, Deadline deadline, std::string_view what);
  // Waits until every peer has published `step`.
  void wait_all(std::uint32_t step, Deadline deadline, std::string_view what);
  // Waits until this rank may write into its buffer for `step`.
  void ready_to_write(std::uint32_t step, Deadline deadline, std::string_view what) {
    if (static_cast<std::int32_t>(known_all_ - (step - 1)) < 0) wait_all(step - 1, deadline, what);
  }

  // Marks the segment aborted by this rank and wakes every sleeper, so that peers stop waiting
  // for it at once. Later waits on any rank throw.
  void abort() noexcept;

  // Throws when the segment has been aborted (by this rank or a peer); returns otherwise.
  void check_abort(std::string_view what) const;

  // Whether `peer` has exited, and "rank N (pid P)" for messages.
  bool exited(int peer) const { return watch_.exited(peer); }
  bool exits_within(int peer, std::chrono::milliseconds within) const { return watch_.exits_within(peer, within); }
  std::string describe(int peer) const;

 private:
  bool reached(int peer, std::uint32_t step) const;
  void wait_until(int peer, std::uint32_t step, Deadline deadline, std::string_view what);
  void check_same_op(int peer, std::uint32_t step, std::string_view what);
  void block_on(int peer, std::uint32_t step, Deadline deadline, std::string_view what);
  void check_peers(std::uint32_t step, Deadline deadline, std::string_view what) const;

  void* base_;
  Layout layout_;
  Header* header_;
  int me_;
  std::vector<int> names_;
  PeerWatch watch_;
  std::chrono::microseconds spin_;
  bool yield_;                   // more ranks than CPUs: spin by yielding, so that a peer waiting for this CPU gets it
  std::uint32_t step_ = 0;       // the last step this rank started
  std::uint32_t known_all_ = 0;  // every peer is known to have published this step
  std::uint64_t op_signature_ = 0;  // the current op's, published with its first step
  std::uint32_t op_first_ = 0;      // the current op's first step
};

}  // namespace ddp::detail::shm
