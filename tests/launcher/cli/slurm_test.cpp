// Slurm's compressed node lists.
#include <gtest/gtest.h>

#include "ddp/error.h"
#include "cli/slurm.h"

namespace ddp::launcher {
namespace {

using Hosts = std::vector<std::string>;

TEST(SlurmNodelist, PlainNames) {
  EXPECT_EQ(expand_nodelist("node1"), (Hosts{"node1"}));
  EXPECT_EQ(expand_nodelist("a,b.example.com,c-1"), (Hosts{"a", "b.example.com", "c-1"}));
}

TEST(SlurmNodelist, RangesKeepZeroPadding) {
  EXPECT_EQ(expand_nodelist("node[01-04,07]"), (Hosts{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(expand_nodelist("n[8-11]"), (Hosts{"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(expand_nodelist("n[098-101]"), (Hosts{"n098", "n099", "n100", "n101"}));
}

TEST(SlurmNodelist, MixedAndSeveralBrackets) {
  EXPECT_EQ(expand_nodelist("gpu[1-2],cpu5,io[3,5]"), (Hosts{"gpu1", "gpu2", "cpu5", "io3", "io5"}));
  EXPECT_EQ(expand_nodelist("r[1-2]n[1-2]"), (Hosts{"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(expand_nodelist("rack[1-2]-node[01-02].x"),
            (Hosts{"rack1-node01.x", "rack1-node02.x", "rack2-node01.x", "rack2-node02.x"}));
}

TEST(SlurmNodelist, Malformed) {
  for (const char* bad :
       {"", "node[1-2", "node1-2]", "node[a-b]", "node[3-1]", "node[]", "a,,b", "[1-2]", "n[[1]]", "n[0-2000000]"}) {
    try {
      expand_nodelist(bad);
      ADD_FAILURE() << "no error for " << bad;
    } catch (const InvalidArgument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("Slurm node list"), std::string::npos) << message;
      EXPECT_NE(message.find("--master_addr"), std::string::npos) << message;
    }
  }
}

TEST(SlurmInfo, ReadsTheAllocation) {
  auto info = read_slurm(map_env({{"SLURM_NNODES", "3"}, {"SLURM_NODEID", "1"}, {"SLURM_JOB_NODELIST", "c[5-7]"}}));
  EXPECT_EQ(info.nnodes, 3);
  EXPECT_EQ(info.node_id, 1);
  EXPECT_EQ(info.first_host, "c5");
  auto old = read_slurm(map_env({{"SLURM_JOB_NUM_NODES", "2"}, {"SLURM_NODELIST", "x,y"}}));
  EXPECT_EQ(old.nnodes, 2);
  EXPECT_EQ(old.first_host, "x");
  EXPECT_FALSE(read_slurm(map_env({})).present());
}

}  // namespace
}  // namespace ddp::launcher
