// torch.distributed's process-wide API: the default group and its helpers.
//
//   ddp::init_process_group("gloo");              // reads RANK, WORLD_SIZE, MASTER_ADDR, ... (env://)
//   int rank = ddp::get_rank(), world = ddp::get_world_size();
//   ...
//   ddp::barrier();
//   ddp::destroy_process_group();
//
// These functions are thread-safe. Errors say what is wrong and how to fix it; nothing waits
// longer than the timeout.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/process_group.h"
#include "ddp/store.h"

namespace ddp {

struct InitOptions {
  // "env://" (the default: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE as ddprun and torchrun set
  // them), "tcp://host:port" (rank 0 hosts the store there), or "file:///path" (a FileStore on a
  // file system every process sees).
  std::string init_method = "env://";
  std::optional<int> world_size;                        // overrides WORLD_SIZE
  std::optional<int> rank;                              // overrides RANK
  std::chrono::milliseconds timeout = kDefaultTimeout;  // rendezvous and every collective
  std::shared_ptr<Store> store;                         // rendezvous through this store instead of init_method
  // Variables the default group, and the groups new_group makes from it, read in front of the
  // process's environment (ProcessGroupOptions::variables).
  std::map<std::string, std::string> variables;
};

// Creates the default group ("world"). `backend`: "gloo" (CPU tensors), "nccl" (CUDA tensors),
// one per device type as PyTorch 2.x has them, "cpu:gloo,cuda:nccl" (CPU tensors over gloo, CUDA
// tensors over NCCL, in one group with one order of operations), or "" for that pair when CUDA is
// available and gloo otherwise (PyTorch 2.x's default).
//
// Where rank and world size come from, first found wins: `options`; RANK and WORLD_SIZE (ddprun,
// torchrun); OMPI_COMM_WORLD_RANK/_SIZE (Open MPI); SLURM_PROCID/SLURM_NTASKS (Slurm). With none
// of them the process is a group of one (rank 0 of 1), which needs no store.
// With TORCHELASTIC_USE_AGENT_STORE=True every rank is a client of the launcher's store at
// MASTER_ADDR:MASTER_PORT, in the launcher's protocol: ddp's when DDP_STORE_PROTOCOL=ddp (ddprun
// exports it), PyTorch's TCPStore protocol when the variable is unset (torchrun hosts a PyTorch
// 1.13 TCPStore); see ddp::agent_store_protocol. Otherwise rank 0 hosts a ddp store there.
//
// Throws InvalidArgument (a missing or non-numeric variable, RANK >= WORLD_SIZE, a bad URL, a
// DDP_STORE_PROTOCOL other than ddp or torch), Error (called twice), IOError (the master port is
// in use, the launcher's store does not speak the protocol chosen), TimeoutError (the master is
// unreachable, or ranks never arrived), MismatchError (two processes claim one rank, ranks
// disagree on the world size, the store belongs to another job).
void init_process_group(const std::string& backend = "", InitOptions options = {});

bool is_initialized();

// The default group. Throws Error when init_process_group has not been called.
std::shared_ptr<ProcessGroup> get_default_group();

// Rank and size in `group` (default: the default group).
int get_rank(const std::shared_ptr<ProcessGroup>& group = nullptr);
int get_world_size(const std::shared_ptr<ProcessGroup>& group = nullptr);

// This process's index among the processes of its node (LOCAL_RANK; Open MPI's or Slurm's local
// id), 0 for a group of one, and how many processes the node runs (LOCAL_WORLD_SIZE).
int get_local_rank();
int get_local_world_size();

// The backend of `group` (default: the default group) as named: "gloo", "nccl", "cpu:gloo,cuda:nccl".
std::string get_backend(const std::shared_ptr<ProcessGroup>& group = nullptr);

// Blocks until every rank of `group` (default: the world) has called barrier.
void barrier(const std::shared_ptr<ProcessGroup>& group = nullptr);

// A group of some of the world's ranks. Every rank of the world must call it, with the same
// ranks, in the same order of new_group calls. Returns the group on its members and null on the
// others (PyTorch's NON_GROUP_MEMBER). `backend` empty: the default group's.
std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks,
                                        std::optional<std::chrono::milliseconds> timeout = std::nullopt,
                                        const std::string& backend = "");

// Leaves the default group (after its queued operations) and forgets it; init_process_group
// may then be called again. Groups made by new_group stay usable until released.
void destroy_process_group();

}  // namespace ddp
