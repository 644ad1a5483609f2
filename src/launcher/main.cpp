// ddprun: a torchrun-compatible launcher. See docs/LAUNCHER.md and `ddprun --help`.
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "agent/agent.h"
#include "cli/command.h"
#include "ddp/error.h"
#include "cli/job_config.h"
#include "cli/options.h"
#include "workers/orphan_guard.h"
#include "workers/signals.h"
#include "util/strings.h"
#include "workers/worker_output.h"

namespace {

using namespace ddp::launcher;

constexpr int kExitUsage = 2;

std::string random_run_id() {
  unsigned char bytes[16] = {};
  std::ifstream random("/dev/urandom", std::ios::binary);
  random.read(reinterpret_cast<char*>(bytes), sizeof bytes);
  if (!random) {
    const auto seed = static_cast<unsigned long>(::getpid()) ^ static_cast<unsigned long>(::time(nullptr));
    for (std::size_t i = 0; i < sizeof bytes; ++i) bytes[i] = static_cast<unsigned char>(seed >> ((i % 8) * 8));
  }
  bytes[6] = static_cast<unsigned char>((bytes[6] & 0x0f) | 0x40);  // a version 4 UUID, as torchrun's
  bytes[8] = static_cast<unsigned char>((bytes[8] & 0x3f) | 0x80);
  char text[37];
  std::snprintf(text, sizeof text, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", bytes[0],
                bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9], bytes[10],
                bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything else (and before any thread): signals arrive through a signalfd.
  SignalWatch signals;
  // The workers' own orphaned children come to ddprun, so that it can reap and stop them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  // ddprun's store speaks ddp's protocol to its own clients.
  ::setenv("DDP_STORE_PROTOCOL", "ddp", 1);

  const std::vector<std::string> args(argv + 1, argv + argc);
  Options options;
  JobConfig config;
  Command command;
  try {
    options = parse_command_line(args);
    if (options.help) {
      write_fully(STDOUT_FILENO, help_text());
      return 0;
    }
    if (options.version) {
      write_fully(STDOUT_FILENO, version_text());
      return 0;
    }
    const auto env = process_env();
    config = make_job_config(options, env, probe_machine(env), random_run_id());
    config.command_line = shell_command(std::vector<std::string>(argv, argv + argc));
    command = resolve_command(options, env);
  } catch (const ddp::Error& e) {
    say(ddp::detail::cat("error: ", e.what()));
    say("run 'ddprun --help' for the flags; nothing was started");
    return kExitUsage;
  }
  for (const auto& note : config.notes) say("note: " + note);
  if (config.log_dir.empty() && (config.redirects.any() || config.tee.any())) {
    char folder[] = "/tmp/ddprun-logs-XXXXXX";
    if (::mkdtemp(folder)) {
      config.log_dir = folder;
      say(ddp::detail::cat("note: --redirects/--tee without --log_dir: the workers' logs go to ", folder));
    }
  }

  auto guard = OrphanGuard::start();  // before run_agent starts any thread
  try {
    return run_agent(config, command, signals, guard.get());
  } catch (const ddp::InvalidArgument& e) {
    say(ddp::detail::cat("error: ", e.what()));
    say("nothing was started");
    return kExitUsage;
  } catch (const ddp::Error& e) {
    say(ddp::detail::cat("error: ", e.what()));
    return 1;
  }
}
