#include "ddp/torch/checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "support/launch.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

void save_value(Checkpoints& c, std::int64_t step, double value) {
  c.save(step, [&](torch::serialize::OutputArchive& a) {
    a.write("value", torch::full({3}, value));
    a.write("step", c10::IValue(step));
  });
}

double load_value(const Checkpoints& c, std::optional<LoadedCheckpoint>* out = nullptr) {
  double value = -1;
  auto loaded = c.load_latest([&](torch::serialize::InputArchive& a) {
    at::Tensor t;
    a.read("value", t);
    value = t[0].item<double>();
  });
  if (out) *out = loaded;
  return loaded ? value : -1;
}

void corrupt(const std::string& path, bool truncate) {
  auto size = fs::file_size(path);
  if (truncate) {
    fs::resize_file(path, size / 2);
  } else {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 10));
    f.put('\x5a');
  }
}

TEST(Checkpoints, SaveAndLoadTheNewestKeepingTwo) {
  TempDir dir;
  Checkpoints c({.directory = (fs::path(dir.path()) / "nested/dir").string(), .keep = 2});
  EXPECT_EQ(load_value(c), -1);  // nothing yet
  for (int step = 1; step <= 4; ++step) save_value(c, step * 100, step);
  auto files = c.list();
  ASSERT_EQ(files.size(), 2u);
  EXPECT_NE(files[0].find("checkpoint-000000000400.ckpt"), std::string::npos);
  EXPECT_NE(files[1].find("checkpoint-000000000300.ckpt"), std::string::npos);
  std::optional<LoadedCheckpoint> loaded;
  EXPECT_EQ(load_value(c, &loaded), 4);
  EXPECT_EQ(loaded->step, 400);
  EXPECT_TRUE(loaded->skipped.empty());
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Under ddprun, DDP_CHECKPOINT_RECORD names where the launcher reads the last checkpoint for its
// stop report (src/launcher/checkpoint_record.h reads the format written here).
TEST(Checkpoints, RecordsTheLastSaveForTheLauncher) {
  TempDir dir;
  fs::create_directories(dir.path());
  const fs::path record = fs::path(dir.path()) / "record";
  Checkpoints c({.directory = (fs::path(dir.path()) / "ckpt").string()});
  ::setenv("DDP_CHECKPOINT_RECORD", record.c_str(), 1);
  save_value(c, 7, 1);
  const std::string first = (fs::absolute(dir.path()) / "ckpt/checkpoint-000000000007.ckpt").string();
  EXPECT_EQ(read_text(record), "step=7\npath=" + first + "\n");
  save_value(c, 9, 2);
  EXPECT_EQ(read_text(record).substr(0, 7), "step=9\n");
  // A record that cannot be written costs the report its step, not the checkpoint.
  ::setenv("DDP_CHECKPOINT_RECORD", (fs::path(dir.path()) / "missing/record").c_str(), 1);
  EXPECT_NO_THROW(save_value(c, 11, 3));
  EXPECT_EQ(load_value(c), 3);
  ::unsetenv("DDP_CHECKPOINT_RECORD");
  save_value(c, 12, 4);
  EXPECT_EQ(read_text(record).substr(0, 7), "step=9\n") << "no launcher asked: nothing recorded";
}

TEST(Checkpoints, ATruncatedOrDamagedNewestIsNamedAndTheOlderUsed) {
  for (bool truncate : {true, false}) {
    TempDir dir;
    Checkpoints c({.directory = dir.path()});
    save_value(c, 1, 1.0);
    save_value(c, 2, 2.0);
    corrupt(c.list().front(), truncate);
    std::optional<LoadedCheckpoint> loaded;
    EXPECT_EQ(load_value(c, &loaded), 1.0);
    ASSERT_EQ(loaded->skipped.size(), 1u);
    EXPECT_NE(loaded->skipped[0].find("checkpoint-000000000002.ckpt"), std::string::npos) << loaded->skipped[0];
    EXPECT_NE(loaded->skipped[0].find(truncate ? "truncated" : "damaged"), std::string::npos) << loaded->skipped[0];
  }
}

TEST(Checkpoints, NoUsableCheckpointIsAnErrorNamingEveryFile) {
  TempDir dir;
  Checkpoints c({.directory = dir.path()});
  save_value(c, 1, 1.0);
  save_value(c, 2, 2.0);
  for (const auto& f : c.list()) corrupt(f, true);
  std::ofstream(fs::path(dir.path()) / "checkpoint-000000000003.ckpt")
      << "not a checkpoint at all, longer than a header";
  try {
    load_value(c);
    FAIL() << "no error";
  } catch (const IOError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("000000000003.ckpt: not a ddp checkpoint"), std::string::npos) << message;
    EXPECT_NE(message.find("000000000002.ckpt: truncated"), std::string::npos) << message;
    EXPECT_NE(message.find("000000000001.ckpt: truncated"), std::string::npos) << message;
    EXPECT_NE(message.find("Delete the damaged files to start from scratch"), std::string::npos) << message;
    EXPECT_EQ(message.find("intact"), std::string::npos) << message;
  }
}

// A refusal by `read` (here: another size than the caller expects) is the caller's error as it
// is: an older checkpoint would be refused alike, and nothing advises deleting intact files.
TEST(Checkpoints, ARefusalOfAnIntactCheckpointReachesTheCallerAsItself) {
  TempDir dir;
  Checkpoints c({.directory = dir.path()});
  save_value(c, 1, 1.0);
  save_value(c, 2, 2.0);
  int calls = 0;
  try {
    c.load_latest([&](torch::serialize::InputArchive&) {
      ++calls;
      throw InvalidArgument("saved with size 3, this one has 4; resume with size 3");
    });
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "saved with size 3, this one has 4; resume with size 3");
  }
  EXPECT_EQ(calls, 1) << "a refusal must not fall back to the older checkpoint";
}

// Entries `read` asks for that an intact file lacks (LibTorch's reader's error) fall back to the
// older file like damage, but the final error does not call intact files damaged.
TEST(Checkpoints, IntactFilesWithOtherEntriesAreNotCalledDamaged) {
  TempDir dir;
  Checkpoints c({.directory = dir.path()});
  c.save(1, [](torch::serialize::OutputArchive& a) { a.write("other", torch::ones({1})); });
  try {
    load_value(c);
    FAIL() << "no error";
  } catch (const IOError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("000000000001.ckpt: intact, but not what this program reads"), std::string::npos) << message;
    EXPECT_NE(message.find("read them with the program (and version) that wrote them"), std::string::npos) << message;
    EXPECT_EQ(message.find("Delete"), std::string::npos) << message;
  }
  save_value(c, 2, 2.0);
  corrupt(c.list().front(), true);  // one damaged, one intact: deletion is advised for the damaged
  try {
    load_value(c);
    FAIL() << "no error";
  } catch (const IOError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("000000000002.ckpt: truncated"), std::string::npos) << message;
    EXPECT_NE(message.find("Delete the damaged files"), std::string::npos) << message;
    EXPECT_NE(message.find("The intact ones hold other entries"), std::string::npos) << message;
  }
}

TEST(Checkpoints, AWriterKilledMidSaveLeavesThePreviousIntact) {
  TempDir dir;
  Checkpoints c({.directory = dir.path()});
  save_value(c, 1, 1.0);
  // What a killed writer leaves: a temporary file, never renamed.
  std::ofstream(fs::path(dir.path()) / "checkpoint-000000000002.ckpt.tmp.12345") << "half a checkpoint";
  EXPECT_EQ(load_value(c), 1.0);
  save_value(c, 3, 3.0);  // the next save cleans it up
  EXPECT_FALSE(fs::exists(fs::path(dir.path()) / "checkpoint-000000000002.ckpt.tmp.12345"));
}

TEST(Checkpoints, UnwritableDirectoryAndBadOptionsAreClearErrors) {
  TempDir dir;
  fs::create_directories(dir.path());
  std::ofstream(fs::path(dir.path()) / "a-file") << "x";
  Checkpoints c({.directory = (fs::path(dir.path()) / "a-file" / "sub").string()});
  try {
    save_value(c, 1, 1.0);
    FAIL() << "no error";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("a-file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Checkpoints({.directory = ""}), InvalidArgument);
  EXPECT_THROW(Checkpoints({.directory = "x", .keep = 0}), InvalidArgument);
  EXPECT_THROW(save_value(*std::make_unique<Checkpoints>(CheckpointOptions{.directory = dir.path()}), -1, 0),
               InvalidArgument);
}

TEST(Checkpoints, RankZeroWritesAndEveryoneReadsAfterTheBarrier) {
  const std::string dir = (fs::temp_directory_path() / ("ddp-ckpt-mp-" + std::to_string(::getpid()))).string();
  test::run_ranks(
      3,
      [&](int rank, int) {
    init_process_group("gloo", {.timeout = std::chrono::seconds(30)});
    Checkpoints c({.directory = std::getenv("CKPT_DIR")});
    for (int step = 1; step <= 3; ++step) {
      c.save(step, [&](torch::serialize::OutputArchive& a) {
        EXPECT_EQ(rank, 0) << "only rank 0 serializes";
        a.write("value", torch::full({1}, static_cast<double>(step)));
      });
      EXPECT_EQ(load_value(c), step) << "rank " << rank << " read a stale checkpoint after save()";
      barrier();  // everyone has read it before rank 0 writes the next
    }
    destroy_process_group();
      },
      {.env = {{"CKPT_DIR", dir}}});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ddp
