// ddp::ProcessGroup: a set of ranks that run collectives together (torch's ProcessGroup).
//
// Every operation returns at once with a Work; the group runs its collectives one at a time, in
// issue order, on a background thread, so an async call never blocks its caller. Arguments are
// checked on the caller's thread (InvalidArgument, nothing started). Each operation is bounded
// by the group's timeout; on failure the error names the operation, its sequence number in the
// group, this rank, and what the other ranks were doing (read from per-rank progress records
// in the store): which rank was lost, which had not reached the operation, which called
// something else. After a failure the group is unusable and every later operation fails with
// the first error.
//
// Thread-safety: the methods may be called from any thread; operations from several threads are
// ordered by when they were issued, which every rank must agree on (as in PyTorch).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/backend.h"
#include "ddp/store.h"
#include "ddp/types.h"
#include "ddp/work.h"

namespace ddp {

struct ProcessGroupOptions {
  std::chrono::milliseconds timeout = kDefaultTimeout;  // bounds every operation
  std::string name = "world";                          // shown in errors; keys the store
  std::vector<int> global_ranks;  // global rank of each group rank; empty: the identity
  std::string master_addr;        // the host the job's store runs on (picks the network interface)
};

class ProcessGroup {
 public:
  // Joins the group: every one of `size` processes calls this with its own `rank` and the same
  // `store`, backend and name. Blocks until all have joined or the timeout passes. A group of
  // size 1 needs no peers. Throws InvalidArgument for an unknown backend or bad rank/size,
  // TimeoutError naming the ranks that never arrived, and the backend's setup errors.
  static std::shared_ptr<ProcessGroup> create(const std::string& backend, std::shared_ptr<Store> store,
                                              int rank, int size, ProcessGroupOptions options = {});
  // Waits for queued operations (each bounded by the timeout), then leaves the group cleanly.
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int size() const;
  const std::string& name() const;
  std::string_view backend_name() const;
  std::chrono::milliseconds timeout() const;
  // Applies to operations issued afterwards.
  void set_timeout(std::chrono::milliseconds timeout);
  // The global rank of group rank `rank`.
  int global_rank(int rank) const;
  // How many collectives this rank has issued in this group (the next one's sequence number).
  std::uint64_t sequence_number() const;

  // In place: every rank ends with the reduction of everyone's `data`.
  std::shared_ptr<Work> all_reduce(Buffer data, ReduceOp op = ReduceOp::SUM);
  // In place: every rank ends with `root`'s `data`.
  std::shared_ptr<Work> broadcast(Buffer data, int root);
  // In place on `root`; other ranks' data is left unchanged.
  std::shared_ptr<Work> reduce(Buffer data, int root, ReduceOp op = ReduceOp::SUM);
  // output: size() * input.count elements, rank r's input at offset r * input.count.
  std::shared_ptr<Work> all_gather(Buffer input, Buffer output);
  // As all_gather with the output on `root` only; other ranks may pass an empty output.
  std::shared_ptr<Work> gather(Buffer input, Buffer output, int root);
  // `root`'s input: size() * output.count elements; rank r receives chunk r. Others' input may be empty.
  std::shared_ptr<Work> scatter(Buffer input, Buffer output, int root);
  // input: size() * output.count elements; rank r gets the reduction of every rank's chunk r.
  std::shared_ptr<Work> reduce_scatter(Buffer input, Buffer output, ReduceOp op = ReduceOp::SUM);
  // input and output: equal element counts divisible by size(); chunk j of rank i lands in chunk i of rank j.
  std::shared_ptr<Work> all_to_all(Buffer input, Buffer output);
  std::shared_ptr<Work> barrier();
  // Point to point; transfers with the same (peer, tag) match in issue order. They do not wait
  // behind queued collectives.
  std::shared_ptr<Work> send(Buffer data, int dst, std::uint32_t tag = 0);
  std::shared_ptr<Work> recv(Buffer data, int src, std::uint32_t tag = 0);

  struct State;  // shared with the worker thread

 private:
  explicit ProcessGroup(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

// Issues one operation and waits for it: issue_and_wait([&] { return group->all_reduce(b); }) is
// group->all_reduce(b)->wait(), faster. The first collective on host buffers that `issue` issues
// is not handed to the group's worker thread: this thread runs it once `issue` returns (when
// nothing is queued before it; otherwise the worker runs it in its turn), which saves the two
// thread hand-offs that are most of a small collective's time. The blocking functions of the
// LibTorch front (ddp::all_reduce, ...) use it. `issue` should return without waiting for that
// operation (as every ProcessGroup method and *_async function does).
void issue_and_wait(const std::function<std::shared_ptr<Work>()>& issue);

}  // namespace ddp
