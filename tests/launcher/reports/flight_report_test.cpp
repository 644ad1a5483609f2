// ddprun and the flight recorder: workers write their dumps into the attempt's log folder, and
// after a failure ddprun's summary says what the dumps show.
#include <signal.h>

#include "e2e.h"
#include "records/flight_dump.h"
#include "reports/flight_report.h"

namespace ddp::launcher::test {
namespace {

TEST(FlightReport, WorkersWriteTheirDumpsIntoTheAttemptsLogFolder) {
  std::map<std::string, std::string> env = {{"TORCHELASTIC_RUN_ID", "job"}, {"TORCHELASTIC_RESTART_COUNT", "1"}};
  const auto none = map_env({});
  EXPECT_EQ(point_flight_dumps(env, "/logs/job/attempt_1", none), "/logs/job/attempt_1");
  EXPECT_EQ(env["DDP_FLIGHT_RECORDER_DIR"], "/logs/job/attempt_1");
  // The user's own folder wins; without --log_dir, the worker's default place.
  env.erase("DDP_FLIGHT_RECORDER_DIR");
  EXPECT_EQ(point_flight_dumps(env, "/logs/job/attempt_1", map_env({{"DDP_FLIGHT_RECORDER_DIR", "/mine"}})), "/mine");
  EXPECT_EQ(env.count("DDP_FLIGHT_RECORDER_DIR"), 0u);
  EXPECT_EQ(point_flight_dumps(env, "", map_env({{"TMPDIR", "/scratch"}})),
            "/scratch/ddp-flight-" + std::to_string(::getuid()) + "/job/attempt_1");
  EXPECT_EQ(format_flight_report("/nonexistent", {0, 1}, 2), "") << "no dumps: nothing to say";
}

TEST(FlightReport, TheSummaryNamesAKilledWorkerAndTheCollectiveTheOthersWaitedAt) {
  TempDir dir;
  Launch run(ddprun_worker({"--nproc_per_node=3", port_flag(), "--log_dir", dir.path()},
                           {"--pid-dir", dir.path(), "--train", "100000", "--timeout-ms", "20000", "--step-ms", "10"}));
  ASSERT_TRUE(run.wait_for("[2]:rank 2 training")) << run.all();
  ::usleep(300000);
  auto workers = pids_in(dir, "worker", 3);
  ASSERT_EQ(workers.size(), 3u);
  ::kill(workers[1], SIGKILL);
  ASSERT_TRUE(run.wait());
  EXPECT_EQ(run.exit_code(), 1) << run.all();
  const std::string folder = dir.file("none/attempt_0");
  // Where the others stopped: the first collective rank 0's own dump does not show finished (or
  // the next one, when ddprun's SIGTERM came between two).
  const auto dump = ddp::detail::read_dump(folder + "/rank_0.flight");
  ASSERT_FALSE(dump.entries.empty());
  std::uint64_t seq = dump.entries.back().seq + 1;
  for (const auto& e : dump.entries) {
    if (e.state != ddp::detail::FlightState::Finished) {
      seq = e.seq;
      break;
    }
  }
  ASSERT_GT(seq, 1u) << "rank 0 should have finished some collectives before rank 1 was killed";
  expect_contains(run.err(),
                  {"Flight recorder (each rank's last collectives, from " + folder + "):",
                   "  dumps from 2 of 3 ranks; none from rank 1",
                   "  => rank 1 at sequence number " + std::to_string(seq) + " of group 'world': missing (no dump)",
                   "ddp-trace --entries 20 " + folder},
                  run.all());
  // The flight report follows the failure summary, which names the same rank.
  EXPECT_LT(run.err().find("rank       : 1 (local rank 1 on node 0)"), run.err().find("Flight recorder ("))
      << run.all();
}

}  // namespace
}  // namespace ddp::launcher::test
