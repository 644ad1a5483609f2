// ddprun's command line: torchrun's flags, parsed into Options by a pure function.
//
// Flags are spelled as torchrun spells them, with '_' or '-' between words (--nproc_per_node,
// --nproc-per-node), as "--flag=value" or "--flag value". The first argument that is not a flag
// (or everything after "--") is the program; the arguments after it are the program's own.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddp::launcher {

enum class RdzvBackend { Static, C10d };

// --nproc_per_node: a count, or one of auto (GPUs if any, else CPUs), cpu, gpu.
struct NprocSpec {
  enum class Kind { Count, Auto, Cpu, Gpu };
  Kind kind = Kind::Count;
  int count = 1;  // for Kind::Count
};

// --redirects / --tee: which of a worker's streams (1 stdout, 2 stderr, 3 both, 0 none), for
// every local rank ("3") or per local rank ("0:3,1:1").
struct StreamSpec {
  int all = 0;
  std::map<int, int> per_local_rank;  // when given as a map; ranks not named get 0
  bool is_map = false;

  int for_local_rank(int local_rank) const;
  bool any() const;
};

// Hugging Face Accelerate's launch settings (`accelerate launch` flags of the same names), for a
// program using ddp::Accelerator: ddprun passes them to every worker as Accelerate's own
// launcher does, in ACCELERATE_* variables, so the program reads the same settings either way.
// Unset: the worker inherits whatever ddprun's environment has (the variable is not set).
struct AccelerateFlags {
  std::optional<std::string> mixed_precision;      // ACCELERATE_MIXED_PRECISION: no, fp16 or bf16
  std::optional<int> gradient_accumulation_steps;  // ACCELERATE_GRADIENT_ACCUMULATION_STEPS: 1 or more
  bool cpu = false;                                // ACCELERATE_USE_CPU=true: CPU even with a GPU
};

struct Options {
  NprocSpec nproc;
  int min_nodes = 1;
  int max_nodes = 1;
  bool nnodes_given = false;
  std::optional<int> node_rank;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  RdzvBackend rdzv_backend = RdzvBackend::Static;
  bool rdzv_backend_given = false;
  std::string rdzv_endpoint;  // "host[:port]"; empty: none given
  std::string rdzv_id = "none";
  bool rdzv_id_given = false;
  std::map<std::string, std::string> rdzv_conf;  // --rdzv_conf key=value,...
  bool standalone = false;
  int max_restarts = 0;
  double monitor_interval_s = 0.1;
  double grace_period_s = 30;     // ddprun's own flag: SIGTERM, then this long, then SIGKILL
  double stopped_timeout_s = 60;  // ddprun's own flag: how long a worker may stay stopped (SIGSTOP)
                                  // once the rest of the job has exited, before it is ended as a failure
  std::string log_dir;
  StreamSpec redirects;
  StreamSpec tee;
  std::optional<std::vector<int>> local_ranks_filter;
  bool no_python = false;
  bool module = false;  // -m: the program is a Python module
  std::string role = "default";
  AccelerateFlags accelerate;      // --mixed_precision, --gradient_accumulation_steps, --cpu
  std::vector<std::string> notes;  // things worth saying about the command line (ignored flags)

  std::string program;
  std::vector<std::string> program_args;

  bool help = false;
  bool version = false;
};

// Parses ddprun's arguments (without argv[0]). Throws ddp::InvalidArgument with a message that
// names the flag, the bad value and what is expected. --help and --version return at once with
// `help` / `version` set, whatever else is on the line.
Options parse_command_line(const std::vector<std::string>& args);

// The text of --help and --version.
std::string help_text();
std::string version_text();

}  // namespace ddp::launcher
