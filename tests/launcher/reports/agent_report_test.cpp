// What an agent says about its job (agent_report.h): pure text from its membership and history.
#include <gtest/gtest.h>

#include "reports/agent_report.h"
#include "support/expect_error.h"

namespace ddp::launcher {
namespace {

Membership two_nodes(int node_rank) {
  Membership m;
  m.node_rank = node_rank;
  m.nnodes = 2;
  m.nodes = {{.nproc = 2, .host = "a", .pid = 1, .agent = 0}, {.nproc = 2, .host = "b", .pid = 2, .agent = 1}};
  return m;
}

MembershipChange lost_node() {
  MembershipChange c;
  c.kind = MembershipChange::Kind::Lost;
  c.agent = 1;
  c.node_rank = 1;
  c.host = "b";
  c.pid = 2;
  c.nnodes = 1;
  c.workers = 2;
  return c;
}

TEST(AgentReport, APlaceNamesTheNodeAndItsRanksAndTheRoundOnlyWhenThereIsOne) {
  EXPECT_EQ(place_line(two_nodes(1), 2, std::nullopt), "node 1 of 2: ranks 2 to 3 of 4");
  EXPECT_EQ(place_line(two_nodes(0), 2, 0), "node 0 of 2: ranks 0 to 1 of 4");
  EXPECT_EQ(place_line(two_nodes(1), 2, 3), "round 3: node 1 of 2: ranks 2 to 3 of 4");
  Membership alone;
  alone.nodes = {{.nproc = 4}};
  EXPECT_EQ(place_line(alone, 4, std::nullopt), "") << "a job of one node without rounds has nothing to place";
  EXPECT_EQ(place_line(alone, 4, 2), "round 2: node 0 of 1: ranks 0 to 3 of 4");
}

TEST(AgentReport, AWaitingNodeIsToldWhetherTheJobMakesRoomOrIsFull) {
  RoundRecord full;
  full.round = 4;
  full.nodes = {{.nproc = 1}, {.nproc = 1}};
  const std::string room = waiting_line(full, 1, 3);
  test::expect_contains(room,
                        {"the job runs with 2 nodes (round 4)", "stop their workers (SIGTERM, then --grace_period)"});
  const std::string no_room = waiting_line(full, 1, 2);
  test::expect_contains(no_room, {"the most nodes --nnodes=1:2 allows, so until one is lost"});
  full.nodes.resize(1);
  EXPECT_NE(waiting_line(full, 1, 2).find("with 1 node (round 4)"), std::string::npos);
}

TEST(AgentReport, ASuccessReportSaysTheStragglerAndAnElasticJobsChangesAndNothingElse) {
  EXPECT_EQ(success_report("", 0, two_nodes(0), {}), "");
  EXPECT_EQ(success_report("rank 1 is slowest", 0, two_nodes(0), {}),
            "ddprun: the job succeeded; its last straggler report: rank 1 is slowest\n");
  Membership after;
  after.nnodes = 1;
  after.nodes = {{.nproc = 2}};
  const std::string text = success_report("", 2, after, {lost_node()});
  test::expect_contains(text,
                        {"ddprun: the job succeeded in round 2 with 1 node, 2 workers, after 1 membership change:\n",
                         "  " + history_line(lost_node()) + "\n"});
  EXPECT_EQ(history_lines({lost_node(), lost_node()}), std::vector<std::string>(2, history_line(lost_node())));
}

}  // namespace
}  // namespace ddp::launcher
