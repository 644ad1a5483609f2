// Running ddprun (or any program) from a test: its stdout and stderr captured separately, a
// deadline on every wait, and whatever is left killed (with its process group) on destruction.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "support/exec_image.h"    // kUnset
#include "support/multiprocess.h"  // free_port

namespace ddp::test {

using namespace std::chrono_literals;

struct LaunchOptions {
  // stdout is a pseudo-terminal (as in a terminal window), passing output on as written (no
  // "\n" -> "\r\n"); stderr stays a pipe.
  bool stdout_terminal = false;
};

class Launch {
 public:
  // Starts argv[0] (looked up in PATH) with `env` set on top of this process's environment, in a
  // process group of its own.
  Launch(std::vector<std::string> argv, std::map<std::string, std::string> env = {}, LaunchOptions options = {});
  ~Launch();
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  // Collects output until the process ends and its pipes close, or `deadline` passes (then it
  // fails the test, kills the group and returns false).
  bool wait(std::chrono::milliseconds deadline = 60s);
  // Collects output until `text` shows up in stdout or stderr; false at the deadline (no failure).
  bool wait_for(const std::string& text, std::chrono::milliseconds deadline = 30s);
  void signal(int sig) const;

  pid_t pid() const { return pid_; }
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }
  std::string all() const { return "---- stdout ----\n" + out_ + "---- stderr ----\n" + err_; }
  int exit_code() const { return exit_code_; }
  int term_signal() const { return signal_; }
  bool done() const { return done_; }

  // Runs several at once until all end; false (and a test failure) at the deadline.
  static bool wait_all(const std::vector<Launch*>& launches, std::chrono::milliseconds deadline);

 private:
  void pump(int timeout_ms);
  void kill_group();

  std::vector<std::string> argv_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string out_;
  std::string err_;
  int exit_code_ = -1;
  int signal_ = 0;
  bool done_ = false;
};

// True while `pid` exists and is not a zombie.
bool process_alive(pid_t pid);

// A fresh temporary folder, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::string operator/(const std::string& name) const { return file(name); }

 private:
  std::string path_;
};

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& text, bool executable = false);

// Lines of `text` that start with `prefix`.
std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix);
int count(const std::string& text, const std::string& needle);

}  // namespace ddp::test
