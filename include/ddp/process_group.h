// ddp::ProcessGroup: a set of ranks that run collectives together (torch's ProcessGroup).
//
// Every operation returns at once with a Work; the group runs its collectives one at a time, in
// issue order, on a background thread, so an async call never blocks its caller (a caller that
// will wait at once says so with Launch::OnWait and the op runs on its own thread instead).
// twin() gives a second group of the same ranks whose operations run beside this one's.
// Arguments are checked on the caller's thread (InvalidArgument, nothing started). Each operation
// is bounded by the group's timeout; on failure the error names the operation, its sequence
// number in the group, this rank, and what the other ranks were doing (read from per-rank
// progress records in the store): which rank was lost, which had not reached the operation,
// which called something else. After a failure the group is unusable and every later operation
// fails with the first error.
//
// Thread-safety: the methods may be called from any thread; operations from several threads are
// ordered by when they were issued, which every rank must agree on (as in PyTorch).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/backend.h"
#include "ddp/store.h"
#include "ddp/types.h"
#include "ddp/work.h"

namespace ddp {

// How an operation starts.
//   Async: handed to the group's worker thread, which runs the group's operations in issue order
//     while the caller goes on (what PyTorch does).
//   OnWait: the caller will wait for it at once. It starts at the first wait() on its Work, on the
//     waiting thread when nothing is queued before it (otherwise the worker runs it in its turn):
//     two thread hand-offs less, most of a small collective's time. wait(timeout) and
//     is_completed() hand it to the worker; an OnWait op nobody waits for runs when a later
//     Async op is issued or the group is destroyed. Ops on CUDA buffers always start Async (the
//     backend keeps its device work on the worker's thread).
enum class Launch { Async, OnWait };

struct ProcessGroupOptions {
  std::chrono::milliseconds timeout = kDefaultTimeout;  // bounds every operation
  std::string name = "world";                           // shown in errors; keys the store
  std::vector<int> global_ranks;                        // global rank of each group rank; empty: the identity
  std::string master_addr;  // the host the job's store runs on (picks the network interface)
  // Environment variables (DDP_*, README's table) this group and what is built on it read as if
  // they were set, in front of the process's environment: a test or a program sets one group's
  // settings here instead of per process. Twins and new_group's groups get the same.
  std::map<std::string, std::string> variables;
};

class ProcessGroup {
 public:
  // Joins the group: every one of `size` processes calls this with its own `rank` and the same
  // `store`, backend and name. Blocks until all have joined or the timeout passes. A group of
  // size 1 needs no peers. Throws InvalidArgument for an unknown backend or bad rank/size,
  // TimeoutError naming the ranks that never arrived, and the backend's setup errors.
  static std::shared_ptr<ProcessGroup> create(const std::string& backend, std::shared_ptr<Store> store, int rank,
                                              int size, ProcessGroupOptions options = {});
  // Waits for queued operations (each bounded by the timeout), then leaves the group cleanly.
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int size() const;
  const std::string& name() const;
  std::string_view backend_name() const;
  // Whether the backend takes buffers on `device` as they are (gloo: the CPU; nccl: this rank's
  // GPU). The LibTorch front stages other devices' tensors through host memory.
  bool accepts(const Device& device) const;
  std::chrono::milliseconds timeout() const;
  // The variables it was made with (ProcessGroupOptions::variables), for the parts built on it
  // that read their own (DistributedDataParallel, Checkpoints).
  const std::map<std::string, std::string>& variables() const;
  // How many hosts its ranks are on, as its backend for host buffers learned when the group was
  // made (the same on every rank): 1 for a group of one; 0 when the backend does not say (nccl).
  // Ranks with DDP_SHM_HOST_ID set count as that host.
  int hosts() const;
  // A second group of the same ranks, backend, timeout and settings, named "<name>~<n>" (the
  // n-th twin of this group), with a queue, connections and sequence numbers of its own: its
  // operations run at the same time as this group's, each group's still in issue order. DDP runs
  // every other bucket on one where no two ranks share a host (docs/DDP.md). Collective: every
  // rank calls it, in the same order as its other twin() calls; throws as create() does.
  std::shared_ptr<ProcessGroup> twin();
  // Applies to operations issued afterwards, in this group and in its twins (twin()), which
  // carry the same work: DDP's buckets go over both.
  void set_timeout(std::chrono::milliseconds timeout);
  // The global rank of group rank `rank`.
  int global_rank(int rank) const;
  // How many collectives this rank has issued in this group (the next one's sequence number).
  std::uint64_t sequence_number() const;

  // In place: every rank ends with the reduction of everyone's `data`.
  std::shared_ptr<Work> all_reduce(Buffer data, ReduceOp op = ReduceOp::SUM, Launch launch = Launch::Async);
  // In place: every rank ends with `root`'s `data`.
  std::shared_ptr<Work> broadcast(Buffer data, int root, Launch launch = Launch::Async);
  // In place on `root`; other ranks' data is left unchanged.
  std::shared_ptr<Work> reduce(Buffer data, int root, ReduceOp op = ReduceOp::SUM, Launch launch = Launch::Async);
  // output: size() * input.count elements, rank r's input at offset r * input.count.
  std::shared_ptr<Work> all_gather(Buffer input, Buffer output, Launch launch = Launch::Async);
  // As all_gather with the output on `root` only; other ranks may pass an empty output.
  std::shared_ptr<Work> gather(Buffer input, Buffer output, int root, Launch launch = Launch::Async);
  // `root`'s input: size() * output.count elements; rank r receives chunk r. Others' input may be empty.
  std::shared_ptr<Work> scatter(Buffer input, Buffer output, int root, Launch launch = Launch::Async);
  // input: size() * output.count elements; rank r gets the reduction of every rank's chunk r.
  std::shared_ptr<Work> reduce_scatter(Buffer input, Buffer output, ReduceOp op = ReduceOp::SUM,
                                       Launch launch = Launch::Async);
  // input and output: equal element counts divisible by size(); chunk j of rank i lands in chunk i of rank j.
  std::shared_ptr<Work> all_to_all(Buffer input, Buffer output, Launch launch = Launch::Async);
  std::shared_ptr<Work> barrier(Launch launch = Launch::Async);
  // Point to point; transfers with the same (peer, tag) match in issue order. They do not wait
  // behind queued collectives.
  std::shared_ptr<Work> send(Buffer data, int dst, std::uint32_t tag = 0);
  std::shared_ptr<Work> recv(Buffer data, int src, std::uint32_t tag = 0);

  // `bytes` (> 0) of zeroed host memory that the other ranks on this host can read where it is:
  // all_reduce and reduce of a large buffer inside it skip the copies through the shared segment
  // (docs/SHM.md; the gain is docs/BENCHMARKS.md's shared-buffers table). Not a collective: each
  // rank allocates on its own, and a buffer in it may meet ordinary buffers on the other ranks.
  // Freed when the last copy of the pointer goes (also after the group is destroyed). Null when the group has no such memory
  // (no other rank on this host, DDP_SHM=0, a backend other than gloo, 256 allocations alive, or
  // peers that could not open it: another user's, or this process not dumpable);
  // throws IOError when the system refuses the memory, InvalidArgument for 0 bytes.
  std::shared_ptr<void> allocate_shared_memory(std::size_t bytes);

  struct State;  // shared with the worker thread

 private:
  explicit ProcessGroup(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace ddp
