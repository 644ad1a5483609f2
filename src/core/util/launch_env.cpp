#include "util/launch_env.h"

#include <cstdlib>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

std::optional<int> read_int(const EnvLookup& lookup, const std::string& name, int min_value) {
  auto text = lookup(name);
  if (!text) return std::nullopt;
  auto value = parse_int(*text);
  if (!value || *value < min_value || *value > 1'000'000'000) {
    throw InvalidArgument(cat("environment variable ", name, "=", quote(*text), " is not ",
                              min_value == 0 ? "a non-negative integer" : "a positive integer",
                              ". The launcher (ddprun, torchrun, mpirun, srun) sets it; if you set it by hand, fix "
                              "its value or unset it."));
  }
  return static_cast<int>(*value);
}

}  // namespace

LaunchEnv read_launch_env(const EnvLookup& lookup) {
  LaunchEnv env;
  auto rank = read_int(lookup, "RANK", 0);
  auto world = read_int(lookup, "WORLD_SIZE", 1);
  if (rank.has_value() != world.has_value()) {
    throw InvalidArgument(cat(rank ? "RANK is set but WORLD_SIZE is not" : "WORLD_SIZE is set but RANK is not",
                              ": set both (ddprun and torchrun do), or neither for a single process."));
  }
  if (rank) {
    env.rank = rank;
    env.world_size = world;
    env.local_rank = read_int(lookup, "LOCAL_RANK", 0);
    env.local_world_size = read_int(lookup, "LOCAL_WORLD_SIZE", 1);
    env.source = "RANK/WORLD_SIZE";
  } else if (lookup("OMPI_COMM_WORLD_RANK")) {
    env.rank = read_int(lookup, "OMPI_COMM_WORLD_RANK", 0);
    env.world_size = read_int(lookup, "OMPI_COMM_WORLD_SIZE", 1);
    env.local_rank = read_int(lookup, "OMPI_COMM_WORLD_LOCAL_RANK", 0);
    env.local_world_size = read_int(lookup, "OMPI_COMM_WORLD_LOCAL_SIZE", 1);
    env.source = "Open MPI";
  } else if (lookup("SLURM_PROCID")) {
    env.rank = read_int(lookup, "SLURM_PROCID", 0);
    env.world_size = read_int(lookup, "SLURM_NTASKS", 1);
    env.local_rank = read_int(lookup, "SLURM_LOCALID", 0);
    env.local_world_size = read_int(lookup, "SLURM_NTASKS_PER_NODE", 1);
    env.source = "Slurm";
  }
  if (env.rank && !env.world_size) {
    throw InvalidArgument(cat(env.source, " gives this process a rank but no world size"));
  }
  if (auto addr = lookup("MASTER_ADDR")) env.master_addr = *addr;
  if (auto port = read_int(lookup, "MASTER_PORT", 1)) {
    if (*port > 65535) {
      throw InvalidArgument(cat("environment variable MASTER_PORT=", *port, " is not a TCP port (1 to 65535)"));
    }
    env.master_port = static_cast<std::uint16_t>(*port);
  }
  if (auto agent = lookup("TORCHELASTIC_USE_AGENT_STORE")) {
    env.use_agent_store = *agent == "True" || *agent == "true" || *agent == "1";
  }
  env.restart_count = read_int(lookup, "TORCHELASTIC_RESTART_COUNT", 0).value_or(0);
  return env;
}

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (!value || !*value) return std::nullopt;
    return std::string(value);
  };
}

}  // namespace ddp::detail
