// The text of `ddprun --help` and `ddprun --version`.
#include "cli/options.h"

#ifndef DDP_VERSION
#define DDP_VERSION "unknown"
#endif

namespace ddp::launcher {

std::string version_text() { return "ddprun " DDP_VERSION " (ddp; torchrun-compatible launcher)\n"; }

std::string help_text() {
  return R"(Usage: ddprun [flags] PROGRAM [ARGS...]

Starts one worker process per device with the environment torchrun gives (RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...), hosts the job's store, watches the workers, and when
one fails stops all of them and says why. Flags are torchrun's, spelled with _ or - between words
(--nproc_per_node or --nproc-per-node), as --flag=VALUE or --flag VALUE. Everything after PROGRAM
(or after "--") is passed to the program.

Workers per node:
  --nproc_per_node N|auto|cpu|gpu
                      Workers on this node (default 1). auto: one per GPU when there are GPUs,
                      else one per CPU; cpu: one per CPU; gpu: one per GPU (an error without GPUs).

Nodes and rendezvous:
  --nnodes N|MIN:MAX  Nodes in the job (default 1). MIN:MAX needs --rdzv_backend=c10d: the job
                      starts with MAX nodes, or with MIN or more once no new node arrived for
                      last_call_timeout seconds.
  --node_rank R       This node's rank, 0 to nnodes-1 (static rendezvous; default 0). Node 0's
                      ddprun hosts the job's store. With c10d, ranks go by arrival order.
  --master_addr HOST  Where node 0's ddprun hosts the store (static; default 127.0.0.1). Workers
                      get it as MASTER_ADDR.
  --master_port PORT  The store's port (static; default 29500). Workers get it as MASTER_PORT.
  --rdzv_backend static|c10d
                      static (default): --node_rank says which node is which. c10d: node ranks
                      are given in arrival order; the ddprun on the endpoint's host hosts the store.
  --rdzv_endpoint HOST[:PORT]
                      The store's address (c10d: required unless --standalone; default port 29400;
                      static: the same as --master_addr/--master_port).
  --rdzv_id ID        The job's id (default "none"). The store refuses clients of other jobs;
                      workers get it as TORCHELASTIC_RUN_ID.
  --rdzv_conf KEY=VALUE,...
                      join_timeout (seconds to wait for every node, default 600),
                      last_call_timeout (seconds to wait for more nodes once MIN joined, default 30),
                      keep_alive_interval (seconds between a node's heartbeats, default 5) and
                      keep_alive_max_attempt (missed heartbeats before a node is dropped, default 3).
  --standalone        A single-node job on a free port with a random job id (implies c10d,
                      nnodes 1).
  Under Slurm (srun, one ddprun per node), --nnodes, --node_rank and --master_addr default to
  SLURM_NNODES, SLURM_NODEID and the first host of SLURM_JOB_NODELIST.

Failures and restarts:
  --max_restarts K    Restart the whole job up to K times after a failure (default 0). Workers
                      see the attempt in TORCHELASTIC_RESTART_COUNT.
  --monitor_interval S
                      Seconds between checks for failures on other nodes (default 0.1). Local
                      workers are watched continuously.
  --grace_period S    (ddprun) Seconds between SIGTERM and SIGKILL when stopping workers
                      (default 30).
  --stopped_timeout S (ddprun) Seconds a worker may stay stopped (SIGSTOP, state T) once every
                      other worker of the job has exited, before ddprun ends it (SIGCONT and
                      SIGTERM, then SIGKILL) as a failure (default 60; 0: at once).

Output:
  --log_dir DIR       Write each worker's output to DIR/<run id>/attempt_<N>/rank_<R>.log (both
                      streams, in the order they arrived). Console lines are prefixed "[R]:".
  -r, --redirects 0|1|2|3|LOCAL_RANK:N,...
                      Send these streams (1 stdout, 2 stderr, 3 both) to the log file only, not
                      the console. Without --log_dir, a temporary directory is used.
  -t, --tee 0|1|2|3|LOCAL_RANK:N,...
                      Show these streams on the console as well as in the log file (undoes
                      --redirects for them).
  --local_ranks_filter R,...
                      Show only these local ranks' output on the console (log files get all).
  When ddprun's stdout is a terminal, local rank 0's stdout is one too (a progress bar shows).

Accelerate (accelerate launch's flags, for programs using ddp::Accelerator):
  --mixed_precision no|fp16|bf16
                      Workers get ACCELERATE_MIXED_PRECISION.
  --gradient_accumulation_steps N
                      Workers get ACCELERATE_GRADIENT_ACCUMULATION_STEPS (N 1 or more).
  --cpu               Use the CPU even when there is a GPU: workers get ACCELERATE_USE_CPU=true.
  Without these flags, the workers inherit such variables from ddprun's environment.

The program:
  --no_python         Run PROGRAM directly even when it ends in .py.
  -m, --module        PROGRAM is a Python module: run "$DDPRUN_PYTHON -m PROGRAM" (default
                      interpreter: python3).
  --role NAME         The workers' role (ROLE_NAME; default "default").
  --start_method M    Accepted for torchrun compatibility and ignored.
  A PROGRAM ending in .py runs as "$DDPRUN_PYTHON PROGRAM" (default python3) unless --no_python;
  any other PROGRAM runs directly.

  -h, --help          This text.
  --version           ddprun's version.

Exit status: 0 when every worker succeeded; 1 when a worker failed (after the restarts); 2 for
bad input (nothing was started); 128+N when the job was stopped by signal N (SIGINT, SIGTERM):
the workers get --grace_period to checkpoint, and a copy of the signal within 1 s is the same stop.
See docs/LAUNCHER.md for the workers' environment, failure handling and multi-node jobs.
)";
}

}  // namespace ddp::launcher
