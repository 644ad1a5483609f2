// The command every worker runs: PROGRAM ARGS, with a Python interpreter in front for a .py
// PROGRAM (unless --no_python) or for -m. Resolved and checked before anything starts.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/environment.h"
#include "cli/options.h"

namespace ddp::launcher {

struct Command {
  std::string path;               // the executable, as execve takes it
  std::vector<std::string> argv;  // argv[0] included
};

// The rule: with -m, "$DDPRUN_PYTHON -m PROGRAM ARGS"; a PROGRAM ending in ".py" without
// --no_python, "$DDPRUN_PYTHON PROGRAM ARGS"; anything else runs directly. DDPRUN_PYTHON
// defaults to python3. A name without '/' is looked up in PATH.
// Throws InvalidArgument when the program or the interpreter is missing, is a folder, or is not
// executable (a .py script need only be readable), saying what to do.
Command resolve_command(const Options& options, const EnvLookup& env);

// `argv` as one shell command line: each word that needs it in single quotes ('it'\''s').
std::string shell_command(const std::vector<std::string>& argv);

// The path of `name` found in the colon-separated `path_list` as an executable file.
std::optional<std::string> find_in_path(const std::string& name, const std::string& path_list);

}  // namespace ddp::launcher
