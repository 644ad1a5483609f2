// What a Slurm allocation says about the job: the node count, this node's index and the first
// host of the node list (where node 0's ddprun runs, under `srun` with one ddprun per node).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/environment.h"

namespace ddp::launcher {

// Expands Slurm's compressed host list: "node[01-04,07],gpu5" -> node01 node02 node03 node04
// node07 gpu5. Zero padding is kept; several brackets in one name multiply
// ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2). Throws InvalidArgument naming the list on a malformed
// one (unbalanced brackets, a range that runs backwards, more than a million hosts).
std::vector<std::string> expand_nodelist(std::string_view list);

struct SlurmInfo {
  std::optional<int> nnodes;              // SLURM_NNODES (or SLURM_JOB_NUM_NODES)
  std::optional<int> node_id;             // SLURM_NODEID
  std::optional<std::string> first_host;  // first of SLURM_JOB_NODELIST (or SLURM_NODELIST)

  bool present() const { return nnodes || node_id || first_host; }
};

// Reads the Slurm variables. Throws InvalidArgument naming a variable whose value is malformed.
SlurmInfo read_slurm(const EnvLookup& env);

}  // namespace ddp::launcher
