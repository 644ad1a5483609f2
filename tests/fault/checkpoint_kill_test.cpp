// A writer killed in the middle of a checkpoint: the previous checkpoint stays loadable and is
// the one used, and the next save cleans up what the dead writer left.
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "ddp/torch/checkpoint.h"
#include "support/multiprocess.h"

namespace ddp::test {
namespace {

namespace fs = std::filesystem;

bool has_temporary(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().find(".ckpt.tmp.") != std::string::npos) return true;
  }
  return false;
}

TEST(CheckpointFaults, AWriterKilledMidWriteLeavesThePreviousCheckpointInUse) {
  // The parent names the directory; the writer (another process) reads it from the environment.
  const fs::path dir = is_rank_process() ? fs::path(std::getenv("CKPT_DIR"))
                                         : fs::temp_directory_path() / ("ddp-ckpt-kill-" + std::to_string(::getpid()));
  if (!is_rank_process()) {
    fs::remove_all(dir);
    Checkpoints c({.directory = dir.string()});
    c.save(1, [](torch::serialize::OutputArchive& a) { a.write("value", torch::full({4}, 1.0)); });
  }
  // The killer: as soon as the writer's temporary file appears, SIGKILL the writer.
  std::thread killer;
  if (!is_rank_process()) {
    killer = std::thread([dir] {
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (std::chrono::steady_clock::now() < end && !has_temporary(dir))
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      int pid = 0;
      std::ifstream(dir / "writer.pid") >> pid;
      if (pid > 0) ::kill(pid, SIGKILL);
    });
  }
  auto results = run_ranks(
      1,
      [&](int, int) {
    std::ofstream(dir / "writer.pid") << ::getpid();
    Checkpoints c({.directory = dir.string()});
    // 512 MB: the write takes long enough to be interrupted.
    c.save(2, [](torch::serialize::OutputArchive& a) { a.write("value", torch::full({128 << 20}, 2.0)); });
      },
      {.env = {{"CKPT_DIR", dir.string()}}, .expect_success = false});
  if (is_rank_process()) return;
  killer.join();
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].signal, SIGKILL) << "the writer finished before it could be killed:\n" << results[0].output;
  EXPECT_TRUE(has_temporary(dir)) << "expected the dead writer's temporary file";
  Checkpoints c({.directory = dir.string()});
  double value = 0;
  auto loaded = c.load_latest([&](torch::serialize::InputArchive& a) {
    at::Tensor t;
    a.read("value", t);
    value = t[0].item<double>();
  });
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->step, 1);
  EXPECT_EQ(value, 1.0);
  EXPECT_TRUE(loaded->skipped.empty()) << "the half-written file must not even look like a checkpoint";
  c.save(3, [](torch::serialize::OutputArchive& a) { a.write("value", torch::full({4}, 3.0)); });
  EXPECT_FALSE(has_temporary(dir)) << "the next save should remove the dead writer's leftovers";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ddp::test
