// What a test's child process runs, prepared in full before fork. A child of a parent with other
// threads (a store server, gloo's, the progress reporter) may not allocate between fork and exec:
// another thread may have held the allocator's lock at the fork, and the child would wait for it
// forever (seen under AddressSanitizer). So the program is found on PATH, and argv and the whole
// environment are built, here; exec() makes only async-signal-safe calls.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ddp::test {

// As a value in a child's env: remove the variable.
inline const std::string kUnset = "<unset>";

class ExecImage {
 public:
  // argv[0] is looked up on PATH unless it holds a '/'; `env` overrides (or, with kUnset,
  // removes) variables of this process's environment.
  ExecImage(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env);
  ExecImage(const ExecImage&) = delete;
  ExecImage& operator=(const ExecImage&) = delete;

  // In the child: execve, or a line on stderr and _exit(127).
  [[noreturn]] void exec() const;

 private:
  std::string path_;
  std::vector<std::string> argv_, envp_;
  std::vector<char*> argv_ptrs_, envp_ptrs_;
  std::string failure_;  // "exec PATH failed: " (the errno's text follows)
};

}  // namespace ddp::test
