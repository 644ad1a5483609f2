#include "cli/command.h"

#include <sys/stat.h>
#include <unistd.h>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::launcher {

using detail::cat;
using detail::quote;

namespace {

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A program given by path or name: the path execve needs.
std::string locate_executable(const std::string& program, const EnvLookup& env, const std::string& what) {
  if (program.find('/') == std::string::npos) {
    auto found = find_in_path(program, env("PATH").value_or("/usr/local/bin:/usr/bin:/bin"));
    if (!found) {
      throw InvalidArgument(cat(what, " ", quote(program), " was not found in PATH. Give its path (e.g. ./", program,
                                "), or add its folder to PATH."));
    }
    return *found;
  }
  struct stat st {};
  if (::stat(program.c_str(), &st) != 0) {
    throw InvalidArgument(cat(what, " ", quote(program), " does not exist. Check the path (relative paths start from ",
                              "the folder ddprun runs in)."));
  }
  if (S_ISDIR(st.st_mode)) throw InvalidArgument(cat(what, " ", quote(program), " is a folder, not a program."));
  if (::access(program.c_str(), X_OK) != 0) {
    throw InvalidArgument(cat(what, " ", quote(program), " is not executable. Make it executable (chmod +x ", program,
                              ")", ends_with(program, ".py") ? ", or drop --no_python to run it with Python" : "",
                              "."));
  }
  return program;
}

}  // namespace

std::optional<std::string> find_in_path(const std::string& name, const std::string& path_list) {
  std::size_t start = 0;
  while (start <= path_list.size()) {
    const std::size_t colon = std::min(path_list.find(':', start), path_list.size());
    // An empty entry is the current folder. Built in one string, not assigned "." over an empty one:
    // GCC 12 warns (-Wrestrict) on that assignment in a Release build.
    std::string candidate = colon == start ? std::string(".") : path_list.substr(start, colon - start);
    candidate += '/';
    candidate += name;
    if (is_executable_file(candidate)) return candidate;
    start = colon + 1;
  }
  return std::nullopt;
}

std::string shell_command(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& word : argv) {
    if (!line.empty()) line += ' ';
    const bool plain = !word.empty() && word.find_first_not_of(
                                            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789_@%+=:,./-") == std::string::npos;
    if (plain) {
      line += word;
      continue;
    }
    line += '\'';
    for (char c : word) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

Command resolve_command(const Options& options, const EnvLookup& env) {
  const bool python = options.module || (!options.no_python && ends_with(options.program, ".py"));
  Command command;
  if (!python) {
    command.path = locate_executable(options.program, env, "the program");
    command.argv.push_back(options.program);
  } else {
    const std::string interpreter = env("DDPRUN_PYTHON").value_or("python3");
    command.path = locate_executable(interpreter, env, "the Python interpreter (DDPRUN_PYTHON)");
    command.argv.push_back(interpreter);
    if (options.module) {
      command.argv.push_back("-m");
    } else {
      struct stat st {};
      if (::stat(options.program.c_str(), &st) != 0) {
        throw InvalidArgument(cat("the script ", quote(options.program), " does not exist. Check the path."));
      }
      if (S_ISDIR(st.st_mode) || ::access(options.program.c_str(), R_OK) != 0) {
        throw InvalidArgument(cat("the script ", quote(options.program), " is not a readable file."));
      }
    }
    command.argv.push_back(options.program);
  }
  command.argv.insert(command.argv.end(), options.program_args.begin(), options.program_args.end());
  return command;
}

}  // namespace ddp::launcher
