// The main job as an elastic job: one ddprun per "host" (network namespaces with host names of
// their own; skipped with the reason where they cannot be made), --nnodes=2:3. One node's ddprun
// is killed mid-epoch: the other two go on at the smaller world size; a fourth node started then
// joins at the next round, and the job finishes at the larger size. Across both changes the job
// trains on every sample of each epoch once (checked from every rank's --sample-log), apart from
// the padding that evens out the shards of a pass.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>

#include "sample_log.h"
#include "support/launch.h"
#include "support/netns.h"

namespace ddp::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr long kTrain = 2048;

std::vector<std::string> trainer_node(const NodeNetwork& net, int node, int nproc, const fs::path& dir) {
  return net.on(node,
                {DDPRUN,
                 "--nnodes=2:3",
                 "--nproc_per_node=" + std::to_string(nproc),
                 "--rdzv_backend=c10d",
                 "--rdzv_endpoint=" + NodeNetwork::address(0) + ":29400",
                 "--rdzv_id=elastic-example",
                 "--max_restarts=2",
                 "--grace_period=30",
                 "--rdzv_conf=join_timeout=60,last_call_timeout=3,keep_alive_interval=0.5,keep_alive_max_attempt=10",
                 TRAIN_FASHION_MNIST,
                 "--epochs",
                 "2",
                 "--limit-train",
                 std::to_string(kTrain),
                 "--limit-test",
                 "200",
                 "--batch-size",
                 "16",
                 "--log-every",
                 "2",
                 "--checkpoint-every",
                 "2",
                 "--timeout",
                 "20",
                 "--checkpoint-dir",
                 (dir / "run").string(),
                 "--sample-log",
                 (dir / "ids").string()});
}

// The highest step of epoch 0 that any rank has logged so far.
long steps_logged(const fs::path& ids) {
  long most = 0;
  for (const auto& line : read_sample_log(ids)) {
    if (line.epoch == 0) most = std::max(most, line.step);
  }
  return most;
}

TEST(FashionMnistElastic, ANodeLostAndANodeJoinedAndEveryEpochSawEachSampleOnce) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)";
  }
  NodeNetwork net(4);
  REQUIRE_NETWORK(net);
  TempDir dir;
  const fs::path root = dir.path();
  fs::create_directories(root / "ids");
  const std::map<std::string, std::string> env = {{"OMP_NUM_THREADS", "1"}};
  // Nodes A (2 workers, the store), B and C (1 each): 4 ranks.
  Launch a(trainer_node(net, 0, 2, root), env);
  ASSERT_TRUE(a.wait_for("hosting job")) << a.all();
  Launch b(trainer_node(net, 1, 1, root), env);
  Launch c(trainer_node(net, 2, 1, root), env);
  ASSERT_TRUE(a.wait_for("training on 4 processes", 120s)) << a.all();
  // Mid-epoch 1 (32 steps at 4 ranks), C's ddprun is killed.
  const auto until = Clock::now() + 120s;
  while (steps_logged(root / "ids") < 8 && Clock::now() < until) ::usleep(50000);
  ASSERT_GE(steps_logged(root / "ids"), 8) << a.all();
  // B and C started together: the later arrival is node 2, whose ddprun is killed.
  ASSERT_TRUE(b.wait_for("ddprun: node ") && c.wait_for("ddprun: node ")) << b.all() << c.all();
  const bool b_last = b.err().find("ddprun: node 2 of 3:") != std::string::npos;
  Launch& victim = b_last ? b : c;
  Launch& survivor = b_last ? c : b;
  const auto killed = Clock::now();
  ::kill(victim.pid(), SIGKILL);
  ASSERT_TRUE(a.wait_for("[0]:resumed at world size 3 (written at 4): sample ", 120s)) << a.all();
  EXPECT_LT(Clock::now() - killed, 90s) << "the survivors took too long to go on";
  EXPECT_NE(a.err().find(std::string("node 2 (host ") + (b_last ? "nodeB" : "nodeC") + ", pid " +
                         std::to_string(victim.pid()) + ") lost: its ddprun vanished ("),
            std::string::npos)
      << a.all();
  // A fourth node joins the running job: the others are told (SIGTERM), checkpoint and re-form.
  Launch d(trainer_node(net, 3, 1, root), env);
  ASSERT_TRUE(Launch::wait_all({&a, &survivor, &d}, 240s));
  for (Launch* n : {&a, &survivor, &d}) EXPECT_EQ(n->exit_code(), 0) << n->all();
  ASSERT_TRUE(victim.wait(10s));
  EXPECT_NE(a.out().find("[0]:resumed at world size 4 (written at 3): sample "), std::string::npos) << a.all();
  EXPECT_NE(a.out().find("[0]:done: test accuracy"), std::string::npos) << a.all();
  for (Launch* n : {&a, &survivor, &d}) {
    EXPECT_NE(n->err().find("node 2 (host nodeD, pid " + std::to_string(d.pid()) +
                            ") joined; continuing with 3 nodes, 4 workers"),
              std::string::npos)
        << n->all();
  }
  for (Launch* n : {&a, &survivor}) {
    EXPECT_NE(n->err().find("the job succeeded in round 2 with 3 nodes, 4 workers, after 2 membership changes:"),
              std::string::npos)
        << n->all();
  }

  // Each epoch: every sample, once, but for the padding at the end of its last pass (fewer than
  // the 4 ranks of the last round).
  const auto seen = samples_per_epoch(read_sample_log(root / "ids"));
  ASSERT_EQ(seen.size(), 2u);
  for (const auto& [epoch, times] : seen) {
    EXPECT_EQ(static_cast<long>(times.size()), kTrain) << "epoch " << epoch << " missed a sample";
    long total = 0, repeated = 0;
    for (const auto& [id, n] : times) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, kTrain);
      total += n;
      if (n > 1) ++repeated;
    }
    EXPECT_LE(total - kTrain, 3) << "epoch " << epoch << ": " << repeated << " samples trained on more than once";
  }
}

}  // namespace
}  // namespace ddp::test
