// Starting one worker process: fork and exec with its stdout and stderr on pipes, in a process
// group of its own (so a stop reaches the worker's own children too), and with
// PR_SET_PDEATHSIG=SIGKILL (so it dies with ddprun, even when ddprun is killed by SIGKILL).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "net/socket.h"

namespace ddp::launcher {

struct SpawnedWorker {
  pid_t pid = -1;  // also its process group id
  detail::Fd out;  // read ends, non-blocking
  detail::Fd err;
};

// Builds "NAME=VALUE" strings: this process's environment with `overrides` set on top.
std::vector<std::string> merged_environment(const std::map<std::string, std::string>& overrides);

// Starts `path` with `argv` and `envp` ("NAME=VALUE"). stdin is /dev/null. The child unblocks
// every signal and restores default dispositions before exec. Must be called from the thread
// that lives as long as the process (PR_SET_PDEATHSIG fires when the forking thread ends).
// terminal_columns > 0: stdout is a pseudo-terminal that wide (isatty(1) is true in the worker;
// it is not the worker's controlling terminal), passing output on as written; `out` is its
// master side, which reads EIO once every writer closed it. Throws ddp::IOError when fork or
// openpty fails or the program cannot be executed (naming it and errno).
SpawnedWorker spawn_worker(const std::string& path, const std::vector<std::string>& argv,
                           const std::vector<std::string>& envp, int terminal_columns = 0);

}  // namespace ddp::launcher
