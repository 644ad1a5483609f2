// ddp's flight recorder: each process keeps its last operations (every group's collectives and
// sends/receives: op, sequence number, sizes, times, state, caller) in memory, and writes them to
// a file when a collective fails (a timeout, a lost peer, a peer's abort, a mismatch), on SIGUSR1,
// or when asked here. `ddp-trace DIR` (and ddprun's summary) compares the ranks' files and names
// the first sequence number at which they part ways and the rank to blame. docs/FLIGHT_RECORDER.md.
//
//   DDP_FLIGHT_RECORDER=N      keep the last N operations (default 2048; 0: off)
//   DDP_FLIGHT_RECORDER_DIR=D  write D/rank_<RANK>.flight (ddprun: its --log_dir's attempt folder;
//                              default ${TMPDIR:-/tmp}/ddp-flight-<uid>/<job>/attempt_<N>)
#pragma once

#include <string>

namespace ddp {

// Writes this process's dump now, with `reason` in it, and returns the file's path. Throws
// InvalidArgument before the first process group exists or when the recorder is off, IOError when
// the file cannot be written (naming it). Thread-safe.
std::string dump_flight_recorder(const std::string& reason = "dump_flight_recorder() was called");

}  // namespace ddp
