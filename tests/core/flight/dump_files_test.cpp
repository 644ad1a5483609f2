// Finding a run's dumps in a folder: the newest run's only, one per rank, and every file that
// cannot be read named with its fault (never an exception).
#include "records/flight_dump_files.h"

#include <gtest/gtest.h>

#include "support/launch.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

FlightDump dump(int rank, std::string job, int restart, std::int64_t time) {
  FlightDump d;
  d.rank = rank;
  d.job = std::move(job);
  d.restart = restart;
  d.time_ns = time;
  d.groups = {{"world", rank, 4, {0, 1, 2, 3}}};
  return d;
}

TEST(FlightDumpFiles, TheNewestRunsDumpsAreReadOnePerRank) {
  test::TempDir dir;
  test::write_file(dir.file("rank_0.flight"), encode(dump(0, "job", 1, 100)));
  test::write_file(dir.file("rank_1.flight"), encode(dump(1, "job", 1, 200)));
  test::write_file(dir.file("rank_3.flight"), encode(dump(3, "job", 0, 300)));  // the attempt before: older...
  test::write_file(dir.file("copy.flight"), encode(dump(1, "job", 1, 150)));    // rank 1 again, older
  test::write_file(dir.file("rank_2.flight"), encode(dump(2, "job", 1, 400)));  // the newest dump
  test::write_file(dir.file("other.flight"), encode(dump(2, "another", 1, 50)));
  test::write_file(dir.file("rank_0.log"), "not a dump, not read");
  test::write_file(dir.file("broken.flight"), "ddp-flight-recorder 1\nrank x\n");
  const auto loaded = load_dumps({dir.path(), dir.file("missing.flight")});
  EXPECT_EQ(loaded.files, 8u);  // the missing path counts: it was asked for
  ASSERT_EQ(loaded.dumps.size(), 3u);
  EXPECT_EQ(loaded.dumps[0].rank, 0);
  EXPECT_EQ(loaded.dumps[1].rank, 1);
  EXPECT_EQ(loaded.dumps[1].time_ns, 200);
  EXPECT_EQ(loaded.dumps[2].rank, 2);
  const std::string ignored = join(loaded.ignored, "\n");
  EXPECT_NE(ignored.find("copy.flight: rank 1 again, older than"), std::string::npos) << ignored;
  EXPECT_NE(ignored.find("rank_3.flight: another run's (job \"job\", attempt 0)"), std::string::npos) << ignored;
  EXPECT_NE(ignored.find("other.flight: another run's (job \"another\", attempt 1)"), std::string::npos) << ignored;
  const std::string problems = join(loaded.problems, "\n");
  EXPECT_NE(problems.find("broken.flight: line 2: the rank is \"x\""), std::string::npos) << problems;
  EXPECT_NE(problems.find("missing.flight: cannot open it"), std::string::npos) << problems;
  EXPECT_TRUE(load_dumps({dir.file("nothing-here")}).dumps.empty());
}

}  // namespace
}  // namespace ddp::detail
