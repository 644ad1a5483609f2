// The failure summary and the attempt-end record the nodes exchange.
#include <gtest/gtest.h>
#include <signal.h>

#include "attempt_end.h"
#include "ddp/error.h"
#include "summary.h"

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

TEST(AttemptEnd, RejectsForeignText) {
  EXPECT_THROW(decode_attempt_end("hello"), Error);
  EXPECT_THROW(decode_attempt_end("ddprun-attempt-end 1\nkind=exploded\n"), Error);
  EXPECT_THROW(decode_attempt_end("ddprun-attempt-end 1\nkind=worker_failed\nw.rank=x\n"), Error);
}

TEST(Summary, NamesTheRootCauseAndEveryLocalWorker) {
  AttemptEnd root;
  root.kind = AttemptEnd::Kind::WorkerFailed;
  root.worker = failed_worker();
  WorkerExit stopped;
  stopped.rank = 4;
  stopped.local_rank = 0;
  stopped.pid = 4241;
  stopped.signal = SIGTERM;
  stopped.stopped = true;
  SummaryInput in{.root = root, .local = {stopped, root.worker}, .node_rank = 1, .host = "node02", .attempt = 0,
                  .max_restarts = 2, .restarting = true};
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

TEST(Summary, OtherRootCausesAreASentence) {
  AttemptEnd root;
  root.kind = AttemptEnd::Kind::AgentLost;
  root.what = "the ddprun of node 3 vanished";
  const std::string text = format_summary({.root = root});
  EXPECT_NE(text.find("Root cause: the ddprun of node 3 vanished"), std::string::npos) << text;
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
