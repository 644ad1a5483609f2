// From the command line, the environment and the machine to what ddprun will do.
#include <gtest/gtest.h>

#include "ddp/error.h"
#include "cli/job_config.h"
#include "cli/slurm.h"
#include "support/expect_error.h"

namespace ddp::launcher {
namespace {

JobConfig config_of(const std::vector<std::string>& args, std::map<std::string, std::string> env = {},
                    MachineInfo machine = {8, 0}) {
  return make_job_config(parse_command_line(args), map_env(std::move(env)), machine, "random-id");
}

std::string error_of(const std::vector<std::string>& args, std::map<std::string, std::string> env = {},
                     MachineInfo machine = {8, 0}) {
  return ::ddp::test::expect_error<InvalidArgument>([&] { config_of(args, std::move(env), machine); }, {});
}

using ::ddp::test::expect_contains;

TEST(JobConfig, SingleNodeDefaults) {
  const JobConfig c = config_of({"p"});
  EXPECT_EQ(c.nproc, 1);
  EXPECT_EQ(c.store_role, JobConfig::StoreRole::Host);
  EXPECT_EQ(c.store_host, "127.0.0.1");
  EXPECT_EQ(c.store_port, 29500);
  EXPECT_EQ(c.master_addr, "127.0.0.1");
  EXPECT_EQ(c.node_rank, 0);
  EXPECT_EQ(c.run_id, "none");
  EXPECT_EQ(c.grace_period.count(), 30000);
  EXPECT_EQ(c.stopped_timeout.count(), 60000);
  EXPECT_EQ(c.join_timeout.count(), 600000);
}

TEST(JobConfig, CarriesTheAccelerateFlags) {
  const JobConfig c = config_of({"--mixed_precision=fp16", "--gradient_accumulation_steps=2", "--cpu", "p"});
  EXPECT_EQ(c.accelerate.mixed_precision, "fp16");
  EXPECT_EQ(c.accelerate.gradient_accumulation_steps, 2);
  EXPECT_TRUE(c.accelerate.cpu);
  const JobConfig plain = config_of({"p"});
  EXPECT_FALSE(plain.accelerate.mixed_precision);
  EXPECT_FALSE(plain.accelerate.gradient_accumulation_steps);
  EXPECT_FALSE(plain.accelerate.cpu);
}

TEST(JobConfig, Standalone) {
  const JobConfig c = config_of({"--standalone", "--nproc_per_node=2", "p"});
  EXPECT_EQ(c.backend, RdzvBackend::C10d);
  EXPECT_EQ(c.store_port, 0);  // a free one
  // An address that needs no resolver (a container without /etc/hosts cannot resolve localhost).
  EXPECT_EQ(c.master_addr, "127.0.0.1");
  EXPECT_EQ(c.store_host, "127.0.0.1");
  EXPECT_EQ(c.store_host_source, "--standalone");
  EXPECT_EQ(c.run_id, "random-id");
  EXPECT_EQ(c.store_role, JobConfig::StoreRole::Host);
  EXPECT_EQ(config_of({"--standalone", "--rdzv_id=mine", "p"}).run_id, "mine");
  expect_contains(error_of({"--standalone", "--nnodes=2", "p"}), {"--standalone", "single-node", "--nnodes"});
}

TEST(JobConfig, StaticNodes) {
  const JobConfig node1 =
      config_of({"--nnodes=2", "--node_rank=1", "--master_addr=10.0.0.1", "--master_port=1234", "p"});
  EXPECT_EQ(node1.store_role, JobConfig::StoreRole::Client);
  EXPECT_EQ(node1.store_host, "10.0.0.1");
  EXPECT_EQ(node1.store_port, 1234);
  EXPECT_EQ(node1.master_addr, "10.0.0.1");
  EXPECT_EQ(node1.store_host_source, "--master_addr");
  const JobConfig node0 = config_of({"--nnodes=2", "--node_rank=0", "--rdzv_endpoint=h:99", "p"});
  EXPECT_EQ(node0.store_role, JobConfig::StoreRole::Host);
  EXPECT_EQ(node0.store_host, "h");
  EXPECT_EQ(node0.store_port, 99);
  EXPECT_EQ(node0.store_host_source, "--rdzv_endpoint");
  // A name is passed to the workers as given (as torchrun does); ddprun checks that it resolves.
  EXPECT_EQ(config_of({"--master_addr=node01", "p"}).master_addr, "node01");
  EXPECT_EQ(config_of({"p"}).store_host_source, "the default --master_addr");
  // Node rank 1 at the default address is warned that it reaches only this machine.
  const auto notes = config_of({"--nnodes=2", "--node_rank=1", "p"}).notes;
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0],
            "node ranks above 0 reach node 0 at 127.0.0.1 (the default --master_addr): that only works "
            "when every node runs on this machine");
}

TEST(JobConfig, NodeRankMustBeBelowNnodes) {
  expect_contains(error_of({"--nnodes=2", "--node_rank=2", "p"}),
                  {"--node_rank=2", "not less than --nnodes=2", "0 to 1"});
  expect_contains(error_of({"--node_rank=1", "p"}), {"--node_rank=1", "--nnodes=1"});
}

TEST(JobConfig, ElasticRangeNeedsC10d) {
  expect_contains(error_of({"--nnodes=1:3", "p"}), {"--nnodes=1:3", "--rdzv_backend=c10d"});
  const JobConfig c = config_of({"--nnodes=1:3", "--rdzv_backend=c10d", "--rdzv_endpoint=node7", "p"});
  EXPECT_EQ(c.min_nodes, 1);
  EXPECT_EQ(c.max_nodes, 3);
  EXPECT_EQ(c.store_role, JobConfig::StoreRole::HostIfLocal);
  EXPECT_EQ(c.store_port, 29400);  // torchrun's default for c10d
  EXPECT_FALSE(c.node_rank);
  EXPECT_EQ(c.master_addr, "node7");
}

TEST(JobConfig, C10dNeedsAnEndpoint) {
  expect_contains(error_of({"--rdzv_backend=c10d", "p"}), {"--rdzv_endpoint", "--standalone"});
  expect_contains(error_of({"--rdzv_backend=c10d", "--rdzv_endpoint=h:0", "p"}), {"invalid port"});
  expect_contains(error_of({"--rdzv_backend=c10d", "--rdzv_endpoint=:5", "p"}), {"has no host"});
}

TEST(JobConfig, Endpoints) {
  EXPECT_EQ(parse_endpoint("host:12", 1, "f").host, "host");
  EXPECT_EQ(parse_endpoint("host:12", 1, "f").port, 12);
  EXPECT_EQ(parse_endpoint("host", 7, "f").port, 7);
  EXPECT_EQ(parse_endpoint("[::1]:5", 7, "f").host, "::1");
  EXPECT_EQ(parse_endpoint("[::1]:5", 7, "f").port, 5);
  EXPECT_EQ(parse_endpoint("::1", 7, "f").host, "::1");
  EXPECT_THROW(parse_endpoint("[::1", 7, "f"), InvalidArgument);
  EXPECT_THROW(parse_endpoint("h:x", 7, "f"), InvalidArgument);
}

TEST(JobConfig, Nproc) {
  EXPECT_EQ(resolve_nproc({NprocSpec::Kind::Count, 3}, {8, 2}), 3);
  EXPECT_EQ(resolve_nproc({NprocSpec::Kind::Auto, 0}, {8, 2}), 2);
  EXPECT_EQ(resolve_nproc({NprocSpec::Kind::Auto, 0}, {8, 0}), 8);
  EXPECT_EQ(resolve_nproc({NprocSpec::Kind::Cpu, 0}, {8, 2}), 8);
  EXPECT_EQ(resolve_nproc({NprocSpec::Kind::Gpu, 0}, {8, 2}), 2);
  expect_contains(error_of({"--nproc_per_node=gpu", "p"}, {}, {8, 0}), {"no visible GPU", "auto or cpu"});
}

TEST(JobConfig, VisibleGpus) {
  EXPECT_EQ(count_visible_gpus(std::nullopt, 4), 4);
  EXPECT_EQ(count_visible_gpus(std::string("0,1"), 4), 2);
  EXPECT_EQ(count_visible_gpus(std::string(""), 4), 0);
  EXPECT_EQ(count_visible_gpus(std::string("1,-1,2"), 4), 1);  // CUDA stops at the first invalid id
  EXPECT_EQ(count_visible_gpus(std::string("GPU-abc,GPU-def"), 0), 2);
}

TEST(JobConfig, SlurmFillsWhatTheFlagsLeaveOpen) {
  const std::map<std::string, std::string> slurm = {
      {"SLURM_NNODES", "4"}, {"SLURM_NODEID", "2"}, {"SLURM_JOB_NODELIST", "gpu[07-10]"}};
  const JobConfig c = config_of({"p"}, slurm);
  EXPECT_EQ(c.max_nodes, 4);
  EXPECT_EQ(c.node_rank, 2);
  EXPECT_EQ(c.store_host, "gpu07");
  EXPECT_EQ(c.master_addr, "gpu07");
  EXPECT_EQ(c.store_host_source, "the first host of SLURM_JOB_NODELIST");
  EXPECT_EQ(c.store_role, JobConfig::StoreRole::Client);
  EXPECT_EQ(c.notes.size(), 3u);
  // Flags win.
  const JobConfig f = config_of({"--nnodes=2", "--node_rank=0", "--master_addr=me", "p"}, slurm);
  EXPECT_EQ(f.max_nodes, 2);
  EXPECT_EQ(f.node_rank, 0);
  EXPECT_EQ(f.store_host, "me");
  EXPECT_EQ(f.store_host_source, "--master_addr");
  // A loopback first host: the note says that it came from Slurm (not from --master_addr's default).
  const JobConfig loopback =
      config_of({"p"}, {{"SLURM_NNODES", "2"}, {"SLURM_NODEID", "1"}, {"SLURM_JOB_NODELIST", "127.0.0.1,node2"}});
  EXPECT_EQ(loopback.master_addr, "127.0.0.1");
  ASSERT_EQ(loopback.notes.size(), 4u);
  EXPECT_EQ(loopback.notes[3],
            "node ranks above 0 reach node 0 at 127.0.0.1 (the first host of SLURM_JOB_NODELIST): "
            "that only works when every node runs on this machine");
  // A malformed Slurm value is named.
  expect_contains(error_of({"p"}, {{"SLURM_NNODES", "x"}}), {"SLURM_NNODES", "\"x\""});
}

}  // namespace
}  // namespace ddp::launcher
