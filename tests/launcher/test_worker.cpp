// A worker for ddprun's end-to-end tests. Each flag adds one behaviour, in this order:
//   --print-env            print "ENV NAME=VALUE" for every variable
//   --spawn-child          start a child that sleeps forever (its pid in DIR/child_<RANK>)
//   --pid-dir DIR          write DIR/worker_<RANK> with this process's pid
//   --allreduce            init_process_group("gloo"), all_reduce(rank + 1), print "sum=S world=W rank=R attempt=A"
//   --fail-rank R          on rank R: print "rank R failing", then exit --fail-code (default 3)
//   --fail-signal S        ... or raise signal S instead
//   --fail-below-restart N ... only while TORCHELASTIC_RESTART_COUNT < N
//   --fail-delay-ms MS     ... after waiting this long
//   --exit-rank R          on rank R: exit 0 here (before --then)
//   --check-lost R         after --check-delay-ms, print "lost R: yes|no attempt=A" from the job's
//                          store (MASTER_ADDR:MASTER_PORT)
//   --chunks N             print N long lines, each written in small pieces with pauses
//   --tty-report           print "stdout is a terminal" or "stdout is not a terminal"
//   --bar N                draw a progress bar N times in place ("\rstep K/N"), then end its line
//   --train STEPS          init_process_group("gloo", --timeout-ms, default 30000), print
//                          "rank R training", then STEPS all_reduces --step-ms (default 50) apart;
//                          an error is printed to stderr and ends the worker with exit code 1
//   --record-step N        on rank 0, write DDP_CHECKPOINT_RECORD "step=N" (a checkpoint at start)
//   --then exit|sleep|hang after the above: exit 0 (default); sleep until SIGTERM/SIGINT (print
//                          "rank R got SIGTERM" and exit 0); or hang, ignoring SIGTERM and SIGINT
//   --checkpoint-ms MS     with --then sleep: after the signal, "checkpoint" for MS (more signals
//                          only set the flag again), on rank 0 record step N+1 (N: --record-step),
//                          print "rank R checkpointed", then exit 0
//   --then-below-restart N the --then action only while TORCHELASTIC_RESTART_COUNT < N (else exit)
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "ddp/distributed.h"
#include "ddp/tcp_store.h"

extern char** environ;

namespace {

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::atoi(value) : fallback;
}

volatile sig_atomic_t got_signal = 0;
void on_signal(int sig) { got_signal = sig; }

void say(const std::string& line) {
  std::string text = line + "\n";
  [[maybe_unused]] auto n = ::write(STDOUT_FILENO, text.data(), text.size());
}

// The record ddprun reads for its stop report, written as a program should: whole, by rename.
void record_checkpoint(int rank, int step) {
  const char* path = std::getenv("DDP_CHECKPOINT_RECORD");
  if (rank != 0 || !path || step < 0) return;
  const std::string temp = std::string(path) + ".tmp";
  std::ofstream(temp) << "step=" << step << "\npath=/checkpoints/step-" << step << ".ckpt\n";
  std::rename(temp.c_str(), path);
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = env_int("RANK", 0);
  const int attempt = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  std::string pid_dir, then = "exit";
  bool print_env = false, spawn_child = false, allreduce = false;
  int check_lost = -1, fail_rank = -1, fail_code = 3, fail_signal = 0, fail_below = 1 << 30, chunks = 0;
  int fail_delay_ms = 0, check_delay_ms = 0, then_below = 1 << 30, exit_rank = -1;
  int bar = 0, train = 0, timeout_ms = 30000, step_ms = 50, record_step = -1, checkpoint_ms = 0;
  bool tty_report = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "test_worker: %s needs a value\n", arg.c_str());
        std::exit(64);
      }
      return argv[++i];
    };
    if (arg == "--print-env") print_env = true;
    else if (arg == "--pid-dir") pid_dir = next();
    else if (arg == "--spawn-child") spawn_child = true;
    else if (arg == "--allreduce") allreduce = true;
    else if (arg == "--check-lost") check_lost = std::stoi(next());
    else if (arg == "--fail-rank") fail_rank = std::stoi(next());
    else if (arg == "--fail-code") fail_code = std::stoi(next());
    else if (arg == "--fail-signal") fail_signal = std::stoi(next());
    else if (arg == "--fail-below-restart") fail_below = std::stoi(next());
    else if (arg == "--chunks") chunks = std::stoi(next());
    else if (arg == "--then") then = next();
    else if (arg == "--fail-delay-ms") fail_delay_ms = std::stoi(next());
    else if (arg == "--exit-rank") exit_rank = std::stoi(next());
    else if (arg == "--check-delay-ms") check_delay_ms = std::stoi(next());
    else if (arg == "--then-below-restart") then_below = std::stoi(next());
    else if (arg == "--tty-report") tty_report = true;
    else if (arg == "--bar") bar = std::stoi(next());
    else if (arg == "--train") train = std::stoi(next());
    else if (arg == "--timeout-ms") timeout_ms = std::stoi(next());
    else if (arg == "--step-ms") step_ms = std::stoi(next());
    else if (arg == "--record-step") record_step = std::stoi(next());
    else if (arg == "--checkpoint-ms") checkpoint_ms = std::stoi(next());
    else {
      std::fprintf(stderr, "test_worker: unknown argument %s\n", arg.c_str());
      return 64;
    }
  }
  // The child starts before any handler is installed: SIGTERM and SIGINT kill it.
  if (spawn_child) {
    const pid_t child = ::fork();
    if (child == 0) {
      for (;;) ::pause();
    }
    if (!pid_dir.empty()) std::ofstream(pid_dir + "/child_" + std::to_string(rank)) << child << "\n";
  }
  if (attempt >= then_below) then = "exit";
  if (then == "sleep") {
    ::signal(SIGTERM, on_signal);
    ::signal(SIGINT, on_signal);
  } else if (then == "hang") {
    ::signal(SIGTERM, SIG_IGN);
    ::signal(SIGINT, SIG_IGN);
  }
  if (print_env) {
    for (char** e = environ; *e; ++e) say(std::string("ENV ") + *e);
  }
  if (!pid_dir.empty()) std::ofstream(pid_dir + "/worker_" + std::to_string(rank)) << ::getpid() << "\n";
  record_checkpoint(rank, record_step);
  if (tty_report) say(::isatty(STDOUT_FILENO) ? "stdout is a terminal" : "stdout is not a terminal");
  for (int k = 1; k <= bar; ++k) {
    const std::string text = "\rstep " + std::to_string(k) + "/" + std::to_string(bar);
    [[maybe_unused]] auto n = ::write(STDOUT_FILENO, text.data(), text.size());
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  if (bar > 0) say("");
  if (train > 0) {
    try {
      ddp::init_process_group("gloo", {.timeout = std::chrono::milliseconds(timeout_ms)});
      say("rank " + std::to_string(rank) + " training");
      for (int step = 0; step < train; ++step) {
        float value = 1;
        ddp::get_default_group()->all_reduce(ddp::buffer_of(&value, 1))->wait();
        std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
      }
      ddp::destroy_process_group();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      return 1;
    }
  }
  if (allreduce) {
    try {
      ddp::init_process_group("gloo", {.timeout = std::chrono::seconds(30)});
      float value = static_cast<float>(ddp::get_rank() + 1);
      ddp::get_default_group()->all_reduce(ddp::buffer_of(&value, 1))->wait();
      say("sum=" + std::to_string(static_cast<int>(value)) + " world=" + std::to_string(ddp::get_world_size()) +
          " rank=" + std::to_string(ddp::get_rank()) + " local_rank=" + std::to_string(ddp::get_local_rank()) +
          " attempt=" + std::to_string(attempt));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      return 1;
    }
  }
  if (rank == fail_rank && attempt < fail_below) {
    std::this_thread::sleep_for(std::chrono::milliseconds(fail_delay_ms));
    say("rank " + std::to_string(rank) + " failing");
    if (fail_signal) {
      ::signal(fail_signal, SIG_DFL);
      ::raise(fail_signal);
    }
    return fail_code;
  }
  if (rank == exit_rank) {
    say("rank " + std::to_string(rank) + " exiting");
    return 0;
  }
  if (check_lost >= 0) {
    ddp::TCPStoreOptions options;
    options.host = std::getenv("MASTER_ADDR");
    options.port = static_cast<std::uint16_t>(env_int("MASTER_PORT", 0));
    options.timeout = std::chrono::seconds(10);
    std::this_thread::sleep_for(std::chrono::milliseconds(check_delay_ms));
    ddp::TCPStore store(options);
    say("lost " + std::to_string(check_lost) + ": " +
        (store.check({"__ddp/lost/" + std::to_string(check_lost)}) ? "yes" : "no") +
        " attempt=" + std::to_string(attempt));
  }
  for (int line = 0; line < chunks; ++line) {
    const std::string piece(50, static_cast<char>('a' + rank % 26));
    std::fflush(stdout);
    for (int p = 0; p < 40; ++p) {
      [[maybe_unused]] auto n = ::write(STDOUT_FILENO, piece.data(), piece.size());
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    [[maybe_unused]] auto n = ::write(STDOUT_FILENO, "\n", 1);
  }
  if (then == "sleep") {
    say("rank " + std::to_string(rank) + " sleeping");
    while (!got_signal) ::usleep(20000);
    say("rank " + std::to_string(rank) + " got " + (got_signal == SIGINT ? "SIGINT" : "SIGTERM"));
    if (checkpoint_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(checkpoint_ms));
      record_checkpoint(rank, record_step + 1);
      say("rank " + std::to_string(rank) + " checkpointed");
    }
    return 0;
  }
  if (then == "hang") {
    say("rank " + std::to_string(rank) + " hanging");
    for (;;) ::pause();
  }
  if (allreduce && ddp::is_initialized()) ddp::destroy_process_group();
  return 0;
}
