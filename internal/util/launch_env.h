// What a launcher told this process through its environment: torchrun/ddprun's variables, or
// Open MPI's, or Slurm's. A pure function of a variable lookup, so it is tested without
// touching the real environment.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace ddp::detail {

using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

struct LaunchEnv {
  std::optional<int> rank;
  std::optional<int> world_size;
  std::optional<int> local_rank;
  std::optional<int> local_world_size;
  std::string master_addr;  // empty when unset
  std::optional<std::uint16_t> master_port;
  bool use_agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE=True
  int restart_count = 0;         // TORCHELASTIC_RESTART_COUNT
  std::string source;            // where rank/world came from: "RANK/WORLD_SIZE", "Open MPI", "Slurm", ""
};

// Reads the variables. Throws InvalidArgument naming the variable, its value and the fix when
// one is not a number (or a port out of range), or when only one of RANK and WORLD_SIZE is set.
LaunchEnv read_launch_env(const EnvLookup& lookup);

// The real environment.
EnvLookup process_env();

}  // namespace ddp::detail
