// How an attempt of the job ended, as every node's ddprun learns it: the first report wins (it
// is the root cause), and travels through the job's store as text.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "workers/worker_exit.h"

namespace ddp::launcher {

// The rank the evidence points at when the first failure was a consequence (it waited for it).
struct Blame {
  int rank = -1;
  int local_rank = -1;
  int node_rank = 0;
  std::string host;
  long pid = 0;          // 0: not known on the node that decided (another node's worker)
  std::string evidence;  // how ddprun knows, for the summary
};

struct AttemptEnd {
  enum class Kind {
    Succeeded,      // every worker on every node exited 0
    WorkerFailed,   // `worker` exited non-zero or died from a signal
    Interrupted,    // a ddprun received SIGINT/SIGTERM/SIGHUP (`signal`)
    AgentLost,      // a node's ddprun vanished (its connection to the store closed)
    AgentFailed,    // a node's ddprun stopped with an error (it could not join, start its workers, ...)
    StoreLost,      // this node lost the job's store (node 0's ddprun is gone)
    WorkerStopped,  // `worker` stayed stopped (SIGSTOP) after the rest of the job exited, past --stopped_timeout
    NodeWaiting,    // elastic: a node waits to join; the group re-forms (not a failure, no restart used)
  };
  Kind kind = Kind::Succeeded;
  WorkerExit worker;           // WorkerFailed: the first worker that failed; WorkerStopped: the stopped one
  std::optional<Blame> blame;  // WorkerFailed: the root cause, when it is another rank
  int signal = 0;              // Interrupted
  int node_rank = 0;           // the node that reported it
  std::string host;
  long agent_pid = 0;
  std::string what;      // a sentence for the other kinds, e.g. "ddprun on node 1 (host h, pid 7) received SIGINT"
  int lost_agent = -1;   // AgentLost: the agent id of the node that is gone,
  std::string lost_why;  // and what happened to it ("its ddprun vanished (...): ...")
  std::chrono::system_clock::time_point time;  // when it was written

  // A worker failure may be retried with --max_restarts, and so may a lost node in an elastic
  // job (the others go on without it); the other kinds end the job, but NodeWaiting.
  bool restartable(bool elastic = false) const {
    return kind == Kind::WorkerFailed || kind == Kind::WorkerStopped || (elastic && kind == Kind::AgentLost);
  }
  // Whether `worker` is what the record is about.
  bool names_worker() const { return kind == Kind::WorkerFailed || kind == Kind::WorkerStopped; }
};

// Text for the store, and back. decode throws ddp::Error on text that encode did not write.
std::string encode(const AttemptEnd& end);
AttemptEnd decode_attempt_end(const std::string& text);

}  // namespace ddp::launcher
