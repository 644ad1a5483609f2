// Whole lines out of a byte stream, and one worker's output routed to console, log and tail.
#include <gtest/gtest.h>
#include <unistd.h>

#include "support/launch.h"
#include "workers/line_splitter.h"
#include "workers/worker_output.h"

namespace ddp::launcher {
namespace {

std::vector<std::string> split(const std::vector<std::string>& chunks, std::size_t max_line = 1024,
                               bool finish = true) {
  LineSplitter splitter(max_line);
  std::vector<std::string> lines;
  auto emit = [&](std::string_view line) { lines.emplace_back(line); };
  for (const auto& c : chunks) splitter.feed(c, emit);
  if (finish) splitter.finish(emit);
  return lines;
}

using Lines = std::vector<std::string>;

TEST(LineSplitter, WholeLinesOnly) {
  EXPECT_EQ(split({"a\nb\n"}), (Lines{"a", "b"}));
  EXPECT_EQ(split({"he", "llo\nwor", "ld\n"}), (Lines{"hello", "world"}));
  EXPECT_EQ(split({"\n\n"}), (Lines{"", ""}));
  EXPECT_EQ(split({"no newline"}, 1024, false), Lines{});
}

TEST(LineSplitter, TheUnfinishedLastLineComesAtTheEnd) {
  EXPECT_EQ(split({"a\npartial"}), (Lines{"a", "partial"}));
  EXPECT_EQ(split({""}), Lines{});
}

TEST(LineSplitter, ByteByByte) {
  Lines lines;
  LineSplitter splitter;
  auto emit = [&](std::string_view line) { lines.emplace_back(line); };
  for (char c : std::string("one\ntwo\nthree")) splitter.feed(std::string_view(&c, 1), emit);
  EXPECT_EQ(lines, (Lines{"one", "two"}));
  EXPECT_EQ(splitter.pending(), 5u);
  splitter.finish(emit);
  EXPECT_EQ(lines, (Lines{"one", "two", "three"}));
}

TEST(LineSplitter, OverlongLinesComeInPiecesOfTheLimit) {
  EXPECT_EQ(split({"abcdefgh\n"}, 3), (Lines{"abc", "def", "gh"}));
  EXPECT_EQ(split({"ab", "cdef", "gh\n"}, 3), (Lines{"abc", "def", "gh"}));
  // A line of exactly the limit is one line, however it arrives.
  EXPECT_EQ(split({"abc\n"}, 3), (Lines{"abc"}));
  EXPECT_EQ(split({"abc", "\n", "d\n"}, 3), (Lines{"abc", "d"}));
  EXPECT_EQ(split({"ab", "c", "\n"}, 3), (Lines{"abc"}));
}

TEST(LineSplitter, BinaryBytesPassThrough) {
  const std::string bytes("a\0b\r\xff\n", 6);
  EXPECT_EQ(split({bytes}), (Lines{std::string("a\0b\r\xff", 5)}));
}

TEST(LineSplitter, AsATerminalShowsCarriageReturns) {
  LineSplitter splitter(1024, /*carriage_return=*/true);
  Lines lines;
  auto emit = [&](std::string_view line) { lines.emplace_back(line); };
  splitter.feed("\rstep 1/3", emit);
  EXPECT_EQ(splitter.partial(), "step 1/3");
  splitter.feed("\rstep 2/3\r", emit);
  EXPECT_EQ(splitter.partial(), "step 2/3")
      << "a '\\r' at the end may be a \"\\r\\n\": the line stays until the next byte";
  splitter.feed("step 3/3\ndone\r", emit);
  splitter.feed("\nwindows\r\n", emit);  // "\r\n" split across two reads, then whole
  EXPECT_EQ(lines, (Lines{"step 3/3", "done", "windows"}));
  EXPECT_EQ(splitter.pending(), 0u);
  // Without the mode, '\r' is a byte like any other (BinaryBytesPassThrough).
  EXPECT_EQ(split({"\ra\rb\n"}), (Lines{"\ra\rb"}));
}

// Everything written to a pipe's write end `fd[1]` so far, after closing it.
std::string drain(int fd[2]) {
  ::close(fd[1]);
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd[0], buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<std::size_t>(n));
  ::close(fd[0]);
  return text;
}

TEST(WorkerOutput, ATerminalsBarIsALiveLineThatOtherLinesPass) {
  test::TempDir dir;
  int screen[2];
  ASSERT_EQ(::pipe(screen), 0);
  Console console;
  WorkerOutputOptions bar;
  bar.rank = 0;
  bar.live_stdout = true;
  bar.screen = &console;
  bar.console_fd[0] = screen[1];
  bar.log_path = dir.file("rank_0.log");
  WorkerOutputOptions other;
  other.rank = 1;
  other.screen = &console;
  other.console_fd[0] = screen[1];
  {
    WorkerOutput zero(bar), one(other);
    zero.on_data(Stream::Out, "\rstep 1/2");
    zero.on_data(Stream::Out, "\rstep 2/2");
    one.on_data(Stream::Out, "hello\n");
    zero.on_data(Stream::Out, "\n");
    zero.on_data(Stream::Out, "\repoch 2");
    zero.on_eof(Stream::Out);  // ended without its newline: the line is closed
    EXPECT_EQ(zero.tail(), (Lines{"step 2/2", "epoch 2"}));
  }
  const std::string clear = "\r\033[K";
  EXPECT_EQ(drain(screen), clear + "[0]:step 1/2" + clear + "[0]:step 2/2" +  // redrawn in place
                               clear + "[1]:hello\n" + "[0]:step 2/2" +       // taken away, a line, drawn again
                               clear + "[0]:step 2/2\n" +                     // finished
                               clear + "[0]:epoch 2" + clear + "[0]:epoch 2\n");
  EXPECT_EQ(test::read_file(dir.file("rank_0.log")), "step 2/2\nepoch 2\n") << "the log gets each line's last state";
}

TEST(WorkerOutput, KeepsWholeTheLinesItIsAskedToKeep) {
  WorkerOutputOptions options;
  options.console[0] = false;
  options.tail_line_bytes = 10;
  options.kept_lines = 2;
  options.keep = [](std::string_view line) { return line.find("error") != std::string_view::npos; };
  WorkerOutput output(options);
  const std::string long_error = "error: " + std::string(500, 'x');
  output.on_data(Stream::Out, "error one\nfine\n" + long_error + "\nerror three\n");
  EXPECT_EQ(output.kept(), (Lines{long_error, "error three"}));
  EXPECT_EQ(output.tail()[2], "error: xxx... (507 bytes)") << "the tail cuts what kept() keeps whole";
}

TEST(WorkerOutput, PrefixesEachLineAndKeepsAFileAndATail) {
  test::TempDir dir;
  int out[2], err[2];
  ASSERT_EQ(::pipe(out), 0);
  ASSERT_EQ(::pipe(err), 0);
  WorkerOutputOptions options;
  options.rank = 7;
  options.log_path = dir.path() + "/sub/folder/rank_7.log";
  options.console_fd[0] = out[1];
  options.console_fd[1] = err[1];
  options.tail_lines = 2;
  {
    WorkerOutput output(options);
    output.on_data(Stream::Out, "one\ntw");
    output.on_data(Stream::Err, "oops\n");
    output.on_data(Stream::Out, "o\nthree");
    output.on_eof(Stream::Out);
    output.on_eof(Stream::Err);
    EXPECT_EQ(output.tail(), (std::vector<std::string>{"two", "three"}));
  }
  ::close(out[1]);
  ::close(err[1]);
  char buffer[256];
  const auto n_out = ::read(out[0], buffer, sizeof buffer);
  EXPECT_EQ(std::string(buffer, static_cast<std::size_t>(n_out)), "[7]:one\n[7]:two\n[7]:three\n");
  const auto n_err = ::read(err[0], buffer, sizeof buffer);
  EXPECT_EQ(std::string(buffer, static_cast<std::size_t>(n_err)), "[7]:oops\n");
  EXPECT_EQ(test::read_file(options.log_path), "one\noops\ntwo\nthree\n");
  ::close(out[0]);
  ::close(err[0]);
}

TEST(WorkerOutput, HiddenStreamsStillReachTheLog) {
  test::TempDir dir;
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  WorkerOutputOptions options;
  options.log_path = dir.file("r.log");
  options.console[0] = false;
  options.console_fd[0] = out[1];
  {
    WorkerOutput output(options);
    output.on_data(Stream::Out, "quiet\n");
  }
  ::close(out[1]);
  char buffer[16];
  EXPECT_EQ(::read(out[0], buffer, sizeof buffer), 0);  // nothing on the console
  EXPECT_EQ(test::read_file(options.log_path), "quiet\n");
  ::close(out[0]);
}

TEST(WorkerOutput, AnUnwritableLogIsNamed) {
  WorkerOutputOptions options;
  options.log_path = "/proc/no-such-place/rank_0.log";
  try {
    WorkerOutput output(options);
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/no-such-place"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--log_dir"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ddp::launcher
