// What this ddprun will do, decided from the command line, the environment (Slurm) and the
// machine (CPU and GPU counts) before anything starts. A pure function of its inputs.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "cli/environment.h"
#include "cli/options.h"

namespace ddp::launcher {

struct MachineInfo {
  int cpus = 1;
  int gpus = 0;
};

// This machine: online CPUs, and GPUs as CUDA would see them (CUDA_VISIBLE_DEVICES when set,
// else the /dev/nvidiaN device files).
MachineInfo probe_machine(const EnvLookup& env);

// GPUs CUDA would enumerate: the entries of CUDA_VISIBLE_DEVICES up to the first invalid one
// ("-1", empty), or `device_files` when the variable is unset.
int count_visible_gpus(const std::optional<std::string>& cuda_visible_devices, int device_files);

// --nproc_per_node resolved to a count. Throws InvalidArgument for "gpu" without GPUs.
int resolve_nproc(const NprocSpec& spec, const MachineInfo& machine);

// "host:port", "[v6addr]:port", "host" (default_port). Throws InvalidArgument naming `flag`.
struct Endpoint {
  std::string host;
  int port = 0;
};
Endpoint parse_endpoint(const std::string& text, int default_port, const std::string& flag);

struct JobConfig {
  enum class StoreRole {
    Host,         // this ddprun hosts the job's store
    Client,       // another node's ddprun hosts it
    HostIfLocal,  // c10d: host it when the endpoint is this machine and the port is free
  };

  int nproc = 1;
  int min_nodes = 1;
  int max_nodes = 1;
  RdzvBackend backend = RdzvBackend::Static;
  std::optional<int> node_rank;  // static: this node's rank; c10d: given at the rendezvous
  StoreRole store_role = StoreRole::Host;
  std::string store_host;         // where the agents and workers reach the store
  std::string store_host_source;  // where store_host came from, for messages: "--master_addr", ...
  int store_port = 29500;         // 0 (standalone): a free port, chosen when the store starts
  std::string master_addr;        // MASTER_ADDR for the workers
  std::string run_id;
  int max_restarts = 0;
  std::chrono::milliseconds monitor_interval{100};
  std::chrono::milliseconds grace_period{30000};
  std::chrono::milliseconds stopped_timeout{60000};
  std::chrono::milliseconds join_timeout{600000};
  std::chrono::milliseconds last_call_timeout{30000};
  std::chrono::milliseconds keep_alive_interval{5000};  // each agent's heartbeat period
  int keep_alive_max_attempt = 3;                       // missed beats after which a node is dropped
  std::string log_dir;                                  // empty: no log files (unless --redirects/--tee ask for them)
  StreamSpec redirects;
  StreamSpec tee;
  std::optional<std::vector<int>> local_ranks_filter;
  std::string role = "default";
  AccelerateFlags accelerate;      // passed to the workers as ACCELERATE_* (worker_env.h)
  std::vector<std::string> notes;  // to print before starting (Slurm values used, flags ignored)
  std::string command_line;        // ddprun's own, shell-quoted: what runs the job again (set by main)

  // Elastic: c10d re-forms the group in rounds (nodes that leave and join); static keeps its nodes.
  bool elastic() const { return backend == RdzvBackend::C10d; }
  // How long a node's heartbeat may stand still before it is dropped.
  std::chrono::milliseconds silence_limit() const { return keep_alive_interval * keep_alive_max_attempt; }
};

// Applies defaults, --standalone and Slurm to `options` and checks that they fit together.
// `random_id` becomes the run id of --standalone. Throws InvalidArgument naming the flags.
JobConfig make_job_config(const Options& options, const EnvLookup& env, const MachineInfo& machine,
                          const std::string& random_id);

}  // namespace ddp::launcher
