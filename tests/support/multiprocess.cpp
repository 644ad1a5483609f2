#include "support/multiprocess.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "support/exec_image.h"

namespace ddp::test {
namespace {

constexpr const char* kWorkerVar = "DDP_TEST_RANK_OF";

std::string current_test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "." + info->name();
}

struct Child {
  pid_t pid = -1;
  int out = -1;
  RankResult result;
  bool done = false;
};

Child spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  const ExecImage image(argv, env);
  Child child;
  child.pid = ::fork();
  if (child.pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
    ::setpgid(0, 0);
    ::dup2(pipefd[1], STDOUT_FILENO);
    ::dup2(pipefd[1], STDERR_FILENO);
    image.exec();
  }
  ::close(pipefd[1]);
  child.out = pipefd[0];
  ::fcntl(child.out, F_SETFL, O_NONBLOCK);
  return child;
}

// Drains the children's output and reaps them until all exit or the deadline passes.
bool wait_all(std::vector<Child>& children, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    std::vector<pollfd> fds;
    for (auto& c : children) {
      if (c.out >= 0) fds.push_back({c.out, POLLIN, 0});
    }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 50);
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (auto& c : children) {
      if (c.out < 0) continue;
      char buf[65536];
      for (;;) {
        ssize_t n = ::read(c.out, buf, sizeof buf);
        if (n > 0) {
          c.result.output.append(buf, static_cast<std::size_t>(n));
          continue;
        }
        if (n == 0) {
          ::close(c.out);
          c.out = -1;
        }
        break;
      }
    }
    bool all_done = true;
    for (auto& c : children) {
      if (!c.done) {
        int status = 0;
        if (::waitpid(c.pid, &status, WNOHANG) == c.pid) {
          c.done = true;
          if (WIFEXITED(status)) c.result.exit_code = WEXITSTATUS(status);
          if (WIFSIGNALED(status)) c.result.signal = WTERMSIG(status);
        }
      }
      all_done = all_done && c.done && c.out < 0;
    }
    if (all_done) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
  }
}

void kill_all(std::vector<Child>& children) {
  for (auto& c : children) {
    if (!c.done) ::kill(-c.pid, SIGKILL), ::kill(c.pid, SIGKILL);
  }
  wait_all(children, std::chrono::steady_clock::now() + std::chrono::seconds(10));
}

std::string tail(const std::string& text, std::size_t max = 12000) {
  return text.size() <= max ? text : "...\n" + text.substr(text.size() - max);
}

}  // namespace

bool is_rank_process() { return std::getenv(kWorkerVar) != nullptr; }

void stop_this_rank() {
  const char* file = std::getenv("PID_FILE");
  if (!file) throw std::logic_error("stop_this_rank: the test gave its ranks no PID_FILE");
  std::ofstream(file) << ::getpid();
  ::raise(SIGSTOP);
}

int stopped_rank_pid() {
  const char* file = std::getenv("PID_FILE");
  int pid = 0;
  if (file) std::ifstream(file) >> pid;
  return pid;
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::vector<RankResult> run_ranks(int world, const std::function<void(int, int)>& body, const RunOptions& options) {
  const std::string name = current_test_name();
  // A test may call run_ranks several times: each call is numbered, and a rank process runs the
  // body of its own call only.
  static std::map<std::string, int> calls;
  const int call = calls[name]++;
  if (const char* of = std::getenv(kWorkerVar)) {
    if (name == of && call == std::atoi(std::getenv("DDP_TEST_CALL")))
      body(std::atoi(std::getenv("DDP_TEST_RANK")), world);
    return {};
  }
  const std::string port = std::to_string(free_port());
  std::vector<Child> children;
  for (int rank = 0; rank < world; ++rank) {
    std::map<std::string, std::string> env = options.env;
    env[kWorkerVar] = name;
    env["DDP_TEST_RANK"] = std::to_string(rank);
    env["DDP_TEST_CALL"] = std::to_string(call);
    if (options.set_launch_env) {
      env.emplace("RANK", std::to_string(rank));
      env.emplace("WORLD_SIZE", std::to_string(world));
      env.emplace("LOCAL_RANK", std::to_string(rank));
      env.emplace("LOCAL_WORLD_SIZE", std::to_string(world));
      env.emplace("MASTER_ADDR", "127.0.0.1");
      env.emplace("MASTER_PORT", port);
    }
    if (options.rank_env) {
      for (auto& [key, value] : options.rank_env(rank)) env[key] = value;
    }
    children.push_back(spawn({"/proc/self/exe", "--gtest_filter=" + name, "--gtest_brief=1"}, env));
    children.back().result.rank = rank;
  }
  const bool finished = wait_all(children, std::chrono::steady_clock::now() + options.deadline);
  if (!finished) {
    kill_all(children);
    std::string report;
    for (auto& c : children)
      report += "---- rank " + std::to_string(c.result.rank) + " ----\n" + tail(c.result.output) + "\n";
    ADD_FAILURE() << "ranks did not finish within " << options.deadline.count() << " s; killed them. Output:\n"
                  << report;
  }
  std::vector<RankResult> results;
  for (auto& c : children) results.push_back(c.result);
  if (std::getenv("DDP_TEST_VERBOSE")) {  // show every rank's output, passing or not
    for (const auto& r : results) std::fprintf(stderr, "---- rank %d ----\n%s\n", r.rank, r.output.c_str());
  }
  if (finished && !options.killed.empty()) {
    for (const auto& r : results) {
      if (std::find(options.killed.begin(), options.killed.end(), r.rank) != options.killed.end()) {
        EXPECT_EQ(r.signal, SIGKILL) << "rank " << r.rank << " should have been killed (exit " << r.exit_code
                                     << "). Its output:\n"
                                     << tail(r.output);
      } else {
        EXPECT_TRUE(r.ok()) << "rank " << r.rank << " failed (exit " << r.exit_code << ", signal " << r.signal
                            << "). Its output:\n"
                            << tail(r.output);
      }
    }
  } else if (finished && options.expect_success) {
    for (const auto& r : results) {
      EXPECT_TRUE(r.ok()) << "rank " << r.rank << " failed (exit " << r.exit_code << ", signal " << r.signal
                          << "). Its output:\n"
                          << tail(r.output);
    }
  }
  return results;
}

RankResult run_command(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                       std::chrono::seconds deadline) {
  std::vector<Child> children;
  children.push_back(spawn(argv, env));
  if (!wait_all(children, std::chrono::steady_clock::now() + deadline)) {
    kill_all(children);
    ADD_FAILURE() << "command did not finish within " << deadline.count() << " s: " << argv[0] << "\n"
                  << tail(children[0].result.output);
  }
  return children[0].result;
}

}  // namespace ddp::test
