// When ddprun's own output is a terminal, local rank 0's stdout is a terminal too (a
// pseudo-terminal), so that a progress bar shows as a bar; logs and pipes keep plain lines.
#include <sstream>

#include "e2e.h"

namespace ddp::launcher::test {
namespace {

const std::string kClearLine = "\r\033[K";

TEST(Terminal, WorkerZeroGetsATerminalWhenDdprunHasOne) {
  TempDir logs;
  Launch run(
      ddprun_worker({"--nproc_per_node=2", port_flag(), "--log_dir", logs.path()}, {"--tty-report", "--bar", "5"}), {},
      {.stdout_terminal = true});
  ASSERT_TRUE(run.wait());
  ASSERT_EQ(run.exit_code(), 0) << run.all();
  const std::string& out = run.out();
  expect_contains(out,
                  {"[0]:stdout is a terminal\n", "[1]:stdout is not a terminal\n",
                   kClearLine + "[0]:step 1/5" + kClearLine,  // the bar, redrawn in place
                   kClearLine + "[0]:step 5/5\n"},            // and finished as a line
                  run.all());
  EXPECT_EQ(out.find("[0]:\r"), std::string::npos) << "worker 0's carriage returns reached the terminal raw:\n" << out;
  // What remains on the screen: every line is one worker's.
  std::istringstream screen(out);
  int lines = 0;
  for (std::string line; std::getline(screen, line); ++lines) {
    const auto last_clear = line.rfind(kClearLine);
    const std::string shown = last_clear == std::string::npos ? line : line.substr(last_clear + kClearLine.size());
    EXPECT_TRUE(shown.rfind("[0]:", 0) == 0 || shown.rfind("[1]:", 0) == 0) << "a shared line: " << shown;
  }
  EXPECT_EQ(lines, 4);
  EXPECT_EQ(read_file(logs.file("none/attempt_0/rank_0.log")), "stdout is a terminal\nstep 5/5\n")
      << "the log keeps the plain lines";
}

TEST(Terminal, WithPipesNoWorkerGetsATerminal) {
  Launch run(ddprun_worker({"--nproc_per_node=2", port_flag()}, {"--tty-report", "--bar", "2"}));
  ASSERT_TRUE(run.wait());
  ASSERT_EQ(run.exit_code(), 0) << run.all();
  expect_contains(run.out(),
                  {"[0]:stdout is not a terminal\n", "[1]:stdout is not a terminal\n",
                   "[0]:\rstep 1/2\rstep 2/2\n"},  // passed on as written, as before
                  run.all());
  EXPECT_EQ(run.out().find("\033["), std::string::npos) << "terminal codes in a pipe:\n" << run.out();
}

}  // namespace
}  // namespace ddp::launcher::test
