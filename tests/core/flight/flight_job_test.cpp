// The flight recorder in real jobs: real processes, a real store, real failures. A mismatched
// collective, a stopped rank and a killed rank each leave dumps from which the analysis (and the
// ddp-trace tool) names the right rank and sequence number.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "ddp/flight_recorder.h"
#include "records/flight_analysis.h"
#include "records/flight_dump_files.h"
#include "support/expect_error.h"
#include "support/launch.h"
#include "support/multiprocess.h"
#include "util/strings.h"

namespace ddp {
namespace {

using detail::FlightFinding;
using Kind = FlightFinding::Kind;
using test::expect_error;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string dump_dir() { return std::getenv("DDP_FLIGHT_RECORDER_DIR"); }
std::string dump_of(int rank) { return detail::cat(dump_dir(), "/rank_", rank, ".flight"); }

// Waits (up to 20 s) until every listed rank's dump exists.
void wait_for_dumps(const std::vector<int>& ranks) {
  for (auto until = Clock::now() + 20s; Clock::now() < until;) {
    bool all = true;
    for (int r : ranks) all = all && ::access(dump_of(r).c_str(), F_OK) == 0;
    if (all) return;
    std::this_thread::sleep_for(10ms);
  }
  ADD_FAILURE() << "the dumps of ranks " << detail::join(ranks) << " did not appear in " << dump_dir();
}

detail::FlightReport analyze_folder(const std::string& dir) {
  const auto loaded = detail::load_dumps({dir});
  EXPECT_TRUE(loaded.problems.empty()) << detail::join(loaded.problems, "\n");
  return detail::analyze(loaded.dumps);
}

void expect_finding(const detail::FlightReport& r, Kind kind, std::uint64_t seq, std::vector<int> ranks) {
  const std::string text = detail::join(r.lines, "\n");
  EXPECT_EQ(static_cast<int>(r.finding.kind), static_cast<int>(kind)) << text;
  EXPECT_EQ(r.finding.seq, seq) << text;
  EXPECT_EQ(r.finding.ranks, ranks) << text;
  if (kind != Kind::None) {
    EXPECT_EQ(r.finding.group, "world") << text;
  }
}

// ddp-trace on the folder: its verdict line.
std::string trace(const std::string& dir) {
  auto run = test::run_command({DDP_TRACE_PATH, dir}, {}, 30s);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  return run.output;
}

TEST(FlightRecorderJobs, AKilledRankIsNamedFromTheDumpsOfTheOthers) {
  test::TempDir dir;  // the parent's (a rank process makes its own and ignores it)
  test::run_ranks(
      3,
      [](int rank, int) {
    init_process_group("gloo", {.timeout = 30s});
    auto group = get_default_group();
    float x[256] = {};
    for (int i = 0; i < 3; ++i) group->all_reduce(buffer_of(x, 256))->wait();
    if (rank == 2) ::raise(SIGKILL);
    expect_error<PeerLostError>([&] { group->all_reduce(buffer_of(x, 256))->wait(); }, {"all_reduce #3", "rank 2"});
    wait_for_dumps({0, 1});  // rank 0 hosts the store: it stays until rank 1 is done with it
      },
      {.env = {{"DDP_FLIGHT_RECORDER_DIR", dir.path()}}, .killed = {2}});
  if (test::is_rank_process()) return;
  EXPECT_NE(::access(dir.file("rank_2.flight").c_str(), F_OK), 0) << "a killed rank writes nothing";
  const auto report = analyze_folder(dir.path());
  expect_finding(report, Kind::NoDump, 3, {2});
  const std::string out = trace(dir.path());
  EXPECT_NE(out.find("dumps from 2 of 3 ranks; none from rank 2"), std::string::npos) << out;
  EXPECT_NE(out.find("ranks 0, 1 waited at all_reduce #3 (float32 x 256, SUM), which never finished"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("=> rank 2 at sequence number 3 of group 'world': missing (no dump)"), std::string::npos) << out;
}

TEST(FlightRecorderJobs, AStoppedRankIsNamedWithoutItsDumpAndWithIt) {
  test::TempDir dir;
  const std::string pid_file = dir.file("stopped.pid");
  test::run_ranks(
      3,
      [](int rank, int) {
    init_process_group("gloo", {.timeout = 3s});
    auto group = get_default_group();
    float x = 1;
    group->all_reduce(buffer_of(&x, 1))->wait();
    if (rank == 1) {
      test::stop_this_rank();
      for (;;) ::pause();  // continued only to write its dump (SIGUSR1), then killed
    }
    // A timeout, or (on the rank that did not time out first) its peer giving up.
    expect_error<Error>([&] { group->all_reduce(buffer_of(&x, 1))->wait(); }, {"all_reduce #1", "rank 1"});
    wait_for_dumps({0, 2});
    if (rank != 0) return;
    // Rank 1 is stopped and cannot write: it is named from the others' dumps alone ...
    expect_finding(analyze_folder(dump_dir()), Kind::NoDump, 1, {1});
    // ... and, continued long enough to answer SIGUSR1, from its own: it never called #1.
    const int pid = test::stopped_rank_pid();
    ASSERT_GT(pid, 0);
    ::kill(pid, SIGUSR1);
    ::kill(pid, SIGCONT);
    wait_for_dumps({1});
    std::this_thread::sleep_for(100ms);
    ::kill(pid, SIGKILL);
      },
      {.env = {{"DDP_FLIGHT_RECORDER_DIR", dir.path()}, {"PID_FILE", pid_file}}, .killed = {1}});
  if (test::is_rank_process()) return;
  const auto report = analyze_folder(dir.path());
  expect_finding(report, Kind::NotReached, 1, {1});
  const std::string text = detail::join(report.lines, "\n");
  EXPECT_NE(text.find("ranks 0, 2 called all_reduce #1 (float32 x 1, SUM); rank 1 never did"), std::string::npos)
      << text;
  EXPECT_NE(text.find("rank 1: its last was all_reduce #0 (float32 x 1, SUM), finished"), std::string::npos) << text;
  const auto stopped = detail::read_dump(dir.file("rank_1.flight"));
  EXPECT_NE(stopped.reason.find("SIGUSR1"), std::string::npos) << stopped.reason;
  EXPECT_NE(trace(dir.path()).find("=> rank 1 at sequence number 1 of group 'world': never called it"),
            std::string::npos);
}

// Rank 2 broadcasts where the others reduce. With DDP_DEBUG=1 every rank fails at once (and
// dumps). Without it, on one host, the shared-memory ops' signatures differ: rank 2 or the others
// see the mismatch, the rest see the group aborted, and dumps asked for afterwards show it all
// the same. (Across hosts, without DDP_DEBUG, such a pair may go through wrongly and silently.)
void mismatched_pair(bool dump_after) {
  init_process_group("gloo", {.timeout = 3s});
  auto group = get_default_group();
  float x[8] = {};
  group->all_reduce(buffer_of(x, 8))->wait();
  try {
    if (get_rank() == 2) {
      group->broadcast(buffer_of(x, 8), 0)->wait();
    } else {
      group->all_reduce(buffer_of(x, 8))->wait();
    }
  } catch (const Error&) {
  }
  if (dump_after) dump_flight_recorder("asked after the pair");
  wait_for_dumps({0, 1, 2});
}

void expect_rank_2_named(const std::string& dir) {
  expect_finding(analyze_folder(dir), Kind::Mismatch, 1, {2});
  const std::string out = trace(dir);
  EXPECT_NE(out.find("rank 2 called broadcast #1 (float32 x 8, root 0)"), std::string::npos) << out;
  EXPECT_NE(out.find("ranks 0, 1 called all_reduce #1 (float32 x 8, SUM)"), std::string::npos) << out;
  EXPECT_NE(out.find("=> rank 2 at sequence number 1 of group 'world': called a different collective"),
            std::string::npos)
      << out;
}

TEST(FlightRecorderJobs, ARankCallingADifferentCollectiveIsNamed) {
  test::TempDir failed, silent;
  test::run_ranks(3, [](int, int) { mismatched_pair(false); },
                  {.env = {{"DDP_FLIGHT_RECORDER_DIR", failed.path()}, {"DDP_DEBUG", "1"}}});
  if (!test::is_rank_process()) expect_rank_2_named(failed.path());
  test::run_ranks(3, [](int, int) { mismatched_pair(true); }, {.env = {{"DDP_FLIGHT_RECORDER_DIR", silent.path()}}});
  if (!test::is_rank_process()) expect_rank_2_named(silent.path());
}

TEST(FlightRecorderJobs, SigusrOneAndTheApiDumpAHealthyJob) {
  test::TempDir dir;
  test::write_file(dir.file("rank_0.flight"), "an earlier run's dump\n");
  test::run_ranks(
      2,
      [](int rank, int) {
    init_process_group("gloo", {.timeout = 20s});
    EXPECT_NE(::access(dump_of(rank).c_str(), F_OK), 0) << "the stale dump is removed when the recorder starts";
    auto group = get_default_group();
    std::int64_t v[4] = {};
    for (int i = 0; i < 5; ++i) group->all_reduce(buffer_of(v, 4))->wait();
    group->broadcast(buffer_of(v, 2), 1)->wait();
    if (rank == 0) group->send(buffer_of(v, 3), 1, 7)->wait();
    if (rank == 1) group->recv(buffer_of(v, 3), 0, 7)->wait();
    group->barrier()->wait();
    if (rank == 0) {
      ::raise(SIGUSR1);  // handled: writes the dump on the recorder's thread
      wait_for_dumps({0});
      const auto d = detail::read_dump(dump_of(0));
      EXPECT_NE(d.reason.find("SIGUSR1"), std::string::npos);
      ASSERT_EQ(d.entries.size(), 8u);
      for (std::size_t i = 0; i < 5; ++i) {
        const auto& e = d.entries[i];
        EXPECT_EQ(describe(detail::to_op(e)), detail::cat("all_reduce #", i, " (int64 x 4, SUM)"));
        EXPECT_EQ(e.state, detail::FlightState::Finished);
        EXPECT_LE(e.issued_ns, e.started_ns);
        EXPECT_LE(e.started_ns, e.ended_ns);
        EXPECT_NE(e.frame.find("ddp_core_tests+0x"), std::string::npos) << e.frame;
      }
      EXPECT_EQ(describe(detail::to_op(d.entries[5])), "broadcast #5 (int64 x 2, root 1)");
      EXPECT_EQ(describe(detail::to_op(d.entries[6])), "send #0 (int64 x 3, to rank 1, tag 7)");
      EXPECT_EQ(d.entries[6].state, detail::FlightState::Finished);
      EXPECT_EQ(describe(detail::to_op(d.entries[7])), "barrier #6");
      EXPECT_EQ(d.groups.size(), 1u);
    }
    if (rank == 1) {
      const std::string path = dump_flight_recorder("checking");
      EXPECT_EQ(path, dump_of(1));
      EXPECT_EQ(detail::read_dump(path).reason, "checking");
    }
    group->barrier()->wait();
      },
      {.env = {{"DDP_FLIGHT_RECORDER_DIR", dir.path()}}});
  if (test::is_rank_process()) return;
  const auto report = analyze_folder(dir.path());
  expect_finding(report, Kind::None, 0, {});
}

void own_handler(int) {}

// SIGTERM (ddprun stopping the survivors of a failure) writes the dump, then ends the process as
// SIGTERM does; a program's own SIGTERM handler is left alone.
TEST(FlightRecorderJobs, SigtermWritesTheDumpThenEndsTheProcess) {
  test::TempDir dir;
  const auto results = test::run_ranks(
      3,
      [](int rank, int) {
    if (rank == 2) ::signal(SIGTERM, own_handler);
    init_process_group("gloo", {.timeout = 20s});
    struct sigaction now {};
    ::sigaction(SIGTERM, nullptr, &now);
    if (rank == 2) {
      EXPECT_EQ(now.sa_handler, &own_handler) << "the program's handler was replaced";
    } else {
      EXPECT_NE(now.sa_handler, SIG_DFL) << "the recorder takes a default SIGTERM";
    }
    auto group = get_default_group();
    float x = 1;
    for (int i = 0; i < 3; ++i) group->all_reduce(buffer_of(&x, 1))->wait();
    if (rank == 1) {
      ::raise(SIGTERM);
      for (;;) ::pause();  // the handler does not return to here
    }
    if (rank == 0) wait_for_dumps({1});
      },
      {.env = {{"DDP_FLIGHT_RECORDER_DIR", dir.path()}}, .expect_success = false});
  if (test::is_rank_process()) return;
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(results[0].ok()) << results[0].output;
  EXPECT_EQ(results[1].signal, SIGTERM) << results[1].output;
  EXPECT_TRUE(results[2].ok()) << results[2].output;
  const auto d = detail::read_dump(dir.file("rank_1.flight"));
  EXPECT_NE(d.reason.find("SIGTERM"), std::string::npos) << d.reason;
  ASSERT_EQ(d.entries.size(), 3u);
  EXPECT_EQ(d.entries[2].state, detail::FlightState::Finished);
}

TEST(FlightRecorderJobs, ABadSettingIsAnErrorAtInitAndZeroTurnsItOff) {
  test::run_ranks(
      1,
      [](int, int) {
    expect_error<InvalidArgument>([] { init_process_group("gloo"); },
                                  {"DDP_FLIGHT_RECORDER=\"many\" is not a number of operations"});
      },
      {.env = {{"DDP_FLIGHT_RECORDER", "many"}}});
  test::TempDir dir;
  test::run_ranks(
      2,
      [](int rank, int) {
    init_process_group("gloo", {.timeout = 2s});
    float x = 1;
    if (rank == 0) {
      expect_error<TimeoutError>([&] { get_default_group()->all_reduce(buffer_of(&x, 1))->wait(); }, {});
      expect_error<InvalidArgument>([] { dump_flight_recorder(); }, {"the flight recorder is off"});
    }
    std::this_thread::sleep_for(rank == 1 ? 3s : 0s);
      },
      {.env = {{"DDP_FLIGHT_RECORDER", "0"}, {"DDP_FLIGHT_RECORDER_DIR", dir.path()}}});
  if (test::is_rank_process()) return;
  EXPECT_EQ(detail::load_dumps({dir.path()}).files, 0u) << "off: no dump";
}

}  // namespace
}  // namespace ddp
