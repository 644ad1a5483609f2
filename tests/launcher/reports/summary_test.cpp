// The failure summary and the attempt-end record the nodes exchange.
#include <gtest/gtest.h>
#include <signal.h>

#include "rendezvous/attempt_end.h"
#include "ddp/error.h"
#include "reports/summary.h"

namespace ddp::launcher {
namespace {

WorkerExit failed_worker() {
  WorkerExit w;
  w.rank = 5;
  w.local_rank = 1;
  w.node_rank = 1;
  w.host = "node02";
  w.pid = 4242;
  w.signal = SIGSEGV;
  w.time = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'700'000'000'123));
  w.last_lines = {"loading data", "multi\\line = escaped\nnot split"};
  w.log_file = "/logs/job/attempt_0/rank_5.log";
  return w;
}

// A worker that ddprun stopped, and that ended by `signal` (0: it exited 0).
WorkerExit stopped_worker(int rank, int local_rank, long pid, int signal) {
  WorkerExit w;
  w.rank = rank;
  w.local_rank = local_rank;
  w.pid = pid;
  w.signal = signal;
  w.exit_code = signal ? -1 : 0;
  w.stopped = true;
  return w;
}

TEST(AttemptEnd, RoundTripsThroughText) {
  AttemptEnd end;
  end.kind = AttemptEnd::Kind::WorkerFailed;
  end.worker = failed_worker();
  end.node_rank = 1;
  end.host = "node02";
  end.agent_pid = 77;
  const AttemptEnd back = decode_attempt_end(encode(end));
  EXPECT_EQ(back.kind, AttemptEnd::Kind::WorkerFailed);
  EXPECT_EQ(back.worker.rank, 5);
  EXPECT_EQ(back.worker.local_rank, 1);
  EXPECT_EQ(back.worker.node_rank, 1);
  EXPECT_EQ(back.worker.host, "node02");
  EXPECT_EQ(back.worker.pid, 4242);
  EXPECT_EQ(back.worker.signal, SIGSEGV);
  EXPECT_EQ(back.worker.time, end.worker.time);
  EXPECT_EQ(back.worker.last_lines, end.worker.last_lines);
  EXPECT_EQ(back.worker.log_file, end.worker.log_file);
  EXPECT_EQ(back.agent_pid, 77);
  EXPECT_TRUE(back.restartable());

  AttemptEnd stop;
  stop.kind = AttemptEnd::Kind::Interrupted;
  stop.signal = SIGINT;
  stop.what = "ddprun on node 0 received SIGINT";
  const AttemptEnd stop_back = decode_attempt_end(encode(stop));
  EXPECT_EQ(stop_back.kind, AttemptEnd::Kind::Interrupted);
  EXPECT_EQ(stop_back.signal, SIGINT);
  EXPECT_EQ(stop_back.what, stop.what);
  EXPECT_FALSE(stop_back.restartable());
}

TEST(AttemptEnd, TheBlameTravelsWithTheFailure) {
  AttemptEnd end;
  end.kind = AttemptEnd::Kind::WorkerFailed;
  end.worker = failed_worker();
  end.blame = Blame{.rank = 3,
                    .local_rank = 1,
                    .node_rank = 1,
                    .host = "node02",
                    .pid = 0,
                    .evidence = "rank 5's error says it waited for rank 3: \"...\"\nsecond line"};
  const AttemptEnd back = decode_attempt_end(encode(end));
  ASSERT_TRUE(back.blame);
  EXPECT_EQ(back.blame->rank, 3);
  EXPECT_EQ(back.blame->local_rank, 1);
  EXPECT_EQ(back.blame->node_rank, 1);
  EXPECT_EQ(back.blame->host, "node02");
  EXPECT_EQ(back.blame->pid, 0);
  EXPECT_EQ(back.blame->evidence, end.blame->evidence);
  end.blame.reset();
  EXPECT_FALSE(decode_attempt_end(encode(end)).blame);
}

TEST(AttemptEnd, AStoppedWorkerTravelsWithItsState) {
  AttemptEnd end;
  end.kind = AttemptEnd::Kind::WorkerStopped;
  end.worker = failed_worker();
  end.worker.suspended = "suspended (state T in /proc/4242/stat)";
  end.what = "rank 5 stayed suspended ...";
  const AttemptEnd back = decode_attempt_end(encode(end));
  EXPECT_EQ(back.kind, AttemptEnd::Kind::WorkerStopped);
  EXPECT_EQ(back.worker.rank, 5);
  EXPECT_EQ(back.worker.pid, 4242);
  EXPECT_EQ(back.worker.suspended, end.worker.suspended);
  EXPECT_EQ(back.worker.last_lines, end.worker.last_lines);
  EXPECT_EQ(back.what, end.what);
  EXPECT_TRUE(back.restartable()) << "a worker failure, as any other";
  // The summary: the sentence, where it ran, its output, and the mark in its node's list.
  WorkerExit mine = end.worker;
  mine.stopped = true;
  mine.exit_code = 0;
  mine.signal = 0;
  const std::string text = format_summary({.root = back, .local = {mine}, .node_rank = 1, .host = "node02"});
  for (const char* f : {"Root cause: rank 5 stayed suspended ...\n  rank       : 5 (local rank 1 on node 1)\n",
                        "  pid        : 4242\n", "log file   : /logs/job/attempt_0/rank_5.log", "[5]: loading data",
                        "rank 5 (local rank 1, pid 4242): stopped by ddprun (exit code 0); it had been suspended "
                        "(state T in /proc/4242/stat) when the attempt ended  <- root cause"}) {
    EXPECT_NE(text.find(f), std::string::npos) << "missing '" << f << "' in:\n" << text;
  }
  EXPECT_EQ(text.find("  exit       :"), std::string::npos) << "it had not exited when the record was written\n"
                                                            << text;
}

TEST(AttemptEnd, RejectsForeignText) {
  EXPECT_THROW(decode_attempt_end("hello"), Error);
  EXPECT_THROW(decode_attempt_end("ddprun-attempt-end 1\nkind=exploded\n"), Error);
  EXPECT_THROW(decode_attempt_end("ddprun-attempt-end 1\nkind=worker_failed\nw.rank=x\n"), Error);
}

TEST(Summary, NamesTheRootCauseAndEveryLocalWorker) {
  AttemptEnd root;
  root.kind = AttemptEnd::Kind::WorkerFailed;
  root.worker = failed_worker();
  const WorkerExit stopped = stopped_worker(4, 0, 4241, SIGTERM);
  SummaryInput in{.root = root,
                  .local = {stopped, root.worker},
                  .node_rank = 1,
                  .host = "node02",
                  .attempt = 0,
                  .max_restarts = 2,
                  .restarting = true};
  const std::string text = format_summary(in);
  for (const char* f : {"failed on attempt 1 of 3", "restarting every worker (attempt 2)", "Root cause",
                        "rank       : 5 (local rank 1 on node 1)", "host       : node02", "pid        : 4242",
                        "signal SIGSEGV (11)", "log file   : /logs/job/attempt_0/rank_5.log", "[5]: loading data",
                        "rank 4 (local rank 0, pid 4241): stopped by ddprun (signal SIGTERM (15))",
                        "rank 5 (local rank 1, pid 4242): failed: signal SIGSEGV (11)", "<- root cause"}) {
    EXPECT_NE(text.find(f), std::string::npos) << "missing '" << f << "' in:\n" << text;
  }
}

TEST(Summary, WithoutLogDirItSaysHowToKeepLogs) {
  AttemptEnd root;
  root.kind = AttemptEnd::Kind::WorkerFailed;
  root.worker = failed_worker();
  root.worker.log_file.clear();
  root.worker.last_lines.clear();
  root.worker.signal = 0;
  root.worker.exit_code = 3;
  const std::string text = format_summary({.root = root});
  EXPECT_NE(text.find("exit code 3"), std::string::npos) << text;
  EXPECT_NE(text.find("--log_dir"), std::string::npos) << text;
  EXPECT_NE(text.find("it printed nothing"), std::string::npos) << text;
  EXPECT_NE(text.find("attempt 1 of 1"), std::string::npos) << text;
  EXPECT_EQ(text.find("restarting"), std::string::npos) << text;
}

TEST(Summary, TheSummaryAndTheStopReportEndWithTheLastStragglerReport) {
  AttemptEnd root;
  root.kind = AttemptEnd::Kind::AgentLost;
  root.what = "the ddprun of node 3 vanished";
  const std::string line = "rank 1 (host h) is the straggler: its step takes 2.00x the median rank's";
  std::string text = format_summary({.root = root, .straggler = line});
  EXPECT_NE(text.find("Last straggler report: " + line + "\n"), std::string::npos) << text;
  EXPECT_EQ(format_summary({.root = root}).find("straggler"), std::string::npos);
  text = format_stop_report({.signal = SIGINT, .what = "ddprun received SIGINT", .straggler = line});
  EXPECT_NE(text.find("Last straggler report: " + line + "\n"), std::string::npos) << text;
}

TEST(Summary, OtherRootCausesAreASentence) {
  AttemptEnd root;
  root.kind = AttemptEnd::Kind::AgentLost;
  root.what = "the ddprun of node 3 vanished";
  const std::string text = format_summary({.root = root});
  EXPECT_NE(text.find("Root cause: the ddprun of node 3 vanished"), std::string::npos) << text;
}

TEST(Summary, ARootCauseOtherThanTheFirstFailureSaysHowDdprunKnows) {
  AttemptEnd root;
  root.kind = AttemptEnd::Kind::WorkerFailed;
  root.worker = failed_worker();  // rank 5, pid 4242
  root.blame = Blame{.rank = 4,
                     .local_rank = 0,
                     .node_rank = 1,
                     .host = "node02",
                     .pid = 4241,
                     .evidence = "ddprun found rank 4 suspended (state T in /proc/4241/stat) when rank 5 failed"};
  WorkerExit stopped = stopped_worker(4, 0, 4241, SIGTERM);
  stopped.suspended = "suspended (state T in /proc/4241/stat)";
  const std::string text =
      format_summary({.root = root, .local = {stopped, root.worker}, .node_rank = 1, .host = "node02"});
  for (const char* f :
       {"Root cause: rank 4, which the first failure waited for", "  rank       : 4 (local rank 0 on node 1)",
        "  pid        : 4241", "  evidence   : ddprun found rank 4 suspended",
        "First failure (a consequence of the root cause):", "  rank       : 5 (local rank 1 on node 1)",
        "rank 4 (local rank 0, pid 4241): stopped by ddprun (signal SIGTERM (15)); it had been suspended "
        "(state T in /proc/4241/stat) when the attempt ended  <- root cause",
        "rank 5 (local rank 1, pid 4242): failed: signal SIGSEGV (11)", "<- first failure"}) {
    EXPECT_NE(text.find(f), std::string::npos) << "missing '" << f << "' in:\n" << text;
  }
  EXPECT_EQ(text.find("Root cause (first failure)"), std::string::npos) << text;
  // A rank of another node: its pid is that node's to tell.
  root.blame->pid = 0;
  root.blame->node_rank = 2;
  EXPECT_NE(format_summary({.root = root}).find("  pid        : see the summary of node 2"), std::string::npos);
}

TEST(StopReport, SaysWhoAskedHowTheWorkersEndedAndWhereToResume) {
  StopInput in{.signal = SIGINT,
               .what = "ddprun on node 0 (host h, pid 7) received SIGINT and stopped the job",
               .local = {stopped_worker(0, 0, 100, 0), stopped_worker(1, 1, 101, 0)},
               .node_rank = 0,
               .host = "h",
               .grace_period = std::chrono::seconds(30),
               .checkpoint = CheckpointRecord{.step = 120, .path = "/ckpt/checkpoint-000000000120.ckpt", .rank = 0},
               .command = "ddprun --nproc_per_node=2 ./train 'a b'"};
  const std::string text = format_stop_report(in);
  for (const char* f :
       {"ddprun: the job was stopped by SIGINT (a request, not a failure): ddprun on node 0 (host h, "
        "pid 7) received SIGINT and stopped the job",
        "rank 0 (local rank 0, pid 100): stopped by ddprun (exit code 0)",
        "rank 1 (local rank 1, pid 101): stopped by ddprun (exit code 0)",
        "Last checkpoint: step 120, /ckpt/checkpoint-000000000120.ckpt (recorded by rank 0)",
        "To resume from it, run the same command again:\n  ddprun --nproc_per_node=2 ./train 'a b'\n"}) {
    EXPECT_NE(text.find(f), std::string::npos) << "missing '" << f << "' in:\n" << text;
  }
  for (const char* absent : {"failed", "Root cause", "SIGKILL", "grace"}) {
    EXPECT_EQ(text.find(absent), std::string::npos) << "'" << absent << "' in:\n" << text;
  }
}

TEST(StopReport, WithoutACheckpointOrWithWorkersKilled) {
  StopInput in{.signal = SIGTERM,
               .what = "ddprun on node 1 (host g, pid 9) received SIGTERM and stopped the job",
               .local = {stopped_worker(0, 0, 100, 0), stopped_worker(1, 1, 101, SIGKILL)},
               .grace_period = std::chrono::milliseconds(1500)};
  const std::string text = format_stop_report(in);
  EXPECT_NE(text.find("stopped by SIGTERM (a request, not a failure): ddprun on node 1"), std::string::npos) << text;
  EXPECT_EQ(text.find("Last checkpoint"), std::string::npos) << "a program without checkpoints gets no step:\n" << text;
  EXPECT_EQ(text.find("resume"), std::string::npos) << text;
  EXPECT_NE(text.find("Not every worker ended within --grace_period=1.5 s: what those ended by SIGKILL were writing"),
            std::string::npos)
      << text;
}

TEST(WorkerExit, SignalNames) {
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  WorkerExit w;
  w.exit_code = 0;
  EXPECT_FALSE(w.failed());
  w.exit_code = 2;
  EXPECT_TRUE(w.failed());
  EXPECT_EQ(w.status(), "exit code 2");
}

}  // namespace
}  // namespace ddp::launcher
