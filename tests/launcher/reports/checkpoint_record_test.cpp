// The records in which workers tell ddprun their last checkpoint (DDP_CHECKPOINT_RECORD).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "reports/checkpoint_record.h"
#include "ddp/error.h"
#include "support/expect_error.h"

namespace ddp::launcher {
namespace {

TEST(CheckpointRecord, Parses) {
  const auto record = parse_checkpoint_record("step=120\npath=/ckpt/checkpoint-000000000120.ckpt\n");
  EXPECT_EQ(record.step, 120);
  EXPECT_EQ(record.path, "/ckpt/checkpoint-000000000120.ckpt");
  EXPECT_EQ(parse_checkpoint_record("comment line\nstep=0").step, 0) << "other lines are ignored";
  EXPECT_EQ(parse_checkpoint_record("step=7\n").path, "");
}

TEST(CheckpointRecord, RejectsARecordWithoutAStep) {
  EXPECT_THROW(parse_checkpoint_record(""), Error);
  EXPECT_THROW(parse_checkpoint_record("path=/x\n"), Error);
  EXPECT_THROW(parse_checkpoint_record("step=-1\n"), Error);
  EXPECT_THROW(parse_checkpoint_record("step=12abc\n"), Error);
  ddp::test::expect_error<Error>([] { parse_checkpoint_record("step=x\n"); }, {"step=\"x\" is not a step number"});
}

TEST(CheckpointRecord, TheNewestOfTheRanksWinsAndBadRecordsAreNamed) {
  std::string folder;
  {
    CheckpointRecords records;
    folder = std::filesystem::path(records.path_for(0)).parent_path();
    EXPECT_TRUE(std::filesystem::is_directory(folder));
    std::vector<std::string> problems;
    EXPECT_FALSE(records.latest({0, 1}, problems)) << "nobody wrote one";
    EXPECT_TRUE(problems.empty());
    std::ofstream(records.path_for(0)) << "step=40\npath=/a\n";
    std::ofstream(records.path_for(1)) << "step=41\n";
    std::ofstream(records.path_for(2)) << "garbage";
    std::ofstream(records.path_for(3)) << std::string(70 * 1024, 'x');
    auto newest = records.latest({0, 1, 2, 3}, problems);
    ASSERT_TRUE(newest);
    EXPECT_EQ(newest->step, 41);
    EXPECT_EQ(newest->rank, 1);
    ASSERT_EQ(problems.size(), 2u);
    EXPECT_NE(
        problems[0].find("rank 2's checkpoint record " + records.path_for(2) + " is unreadable: it holds no step"),
        std::string::npos)
        << problems[0];
    EXPECT_NE(problems[1].find("is larger than 64 KiB"), std::string::npos) << problems[1];
    EXPECT_EQ(records.latest({0}, problems)->path, "/a");
  }
  EXPECT_FALSE(std::filesystem::exists(folder)) << "the folder outlived ddprun";
}

TEST(CheckpointRecord, TheLastStragglerReportIsItsFirstLineAndNothingWithoutOne) {
  CheckpointRecords records;
  EXPECT_EQ(std::filesystem::path(records.straggler_path()).parent_path(),
            std::filesystem::path(records.path_for(0)).parent_path());
  EXPECT_EQ(records.last_straggler_report(), "");
  std::ofstream(records.straggler_path()) << "rank 1 (host h) is the straggler: ...\n";
  EXPECT_EQ(records.last_straggler_report(), "rank 1 (host h) is the straggler: ...");
  std::ofstream(records.straggler_path()) << std::string(70 * 1024, 'x');
  EXPECT_EQ(records.last_straggler_report().size(), 64u * 1024) << "a runaway file is cut, not printed whole";
}

TEST(CheckpointRecord, AnUnusableTmpdirIsNamed) {
  const char* before = std::getenv("TMPDIR");
  const std::string saved = before ? before : "";
  ::setenv("TMPDIR", "/nonexistent/ddprun-test", 1);
  ddp::test::expect_error<IOError>([] { CheckpointRecords records; },
                                   {"/nonexistent/ddprun-test/ddprun-checkpoints-", "Set TMPDIR"});
  if (before) {
    ::setenv("TMPDIR", saved.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
}

}  // namespace
}  // namespace ddp::launcher
