// The command line: torchrun's flags in both spellings, and a clear error for each bad input.
#include <gtest/gtest.h>

#include "ddp/error.h"
#include "cli/options.h"
#include "support/expect_error.h"

namespace ddp::launcher {
namespace {

std::string error_of(const std::vector<std::string>& args) {
  return ::ddp::test::expect_error<InvalidArgument>([&] { parse_command_line(args); }, {});
}

using ::ddp::test::expect_contains;

TEST(Options, DefaultsMatchTorchrun) {
  const Options o = parse_command_line({"./train"});
  EXPECT_EQ(o.nproc.kind, NprocSpec::Kind::Count);
  EXPECT_EQ(o.nproc.count, 1);
  EXPECT_EQ(o.min_nodes, 1);
  EXPECT_EQ(o.max_nodes, 1);
  EXPECT_FALSE(o.node_rank);
  EXPECT_EQ(o.rdzv_backend, RdzvBackend::Static);
  EXPECT_EQ(o.rdzv_id, "none");
  EXPECT_EQ(o.max_restarts, 0);
  EXPECT_FALSE(o.standalone);
  EXPECT_DOUBLE_EQ(o.stopped_timeout_s, 60);
  EXPECT_DOUBLE_EQ(parse_command_line({"--stopped_timeout=2.5", "p"}).stopped_timeout_s, 2.5);
  EXPECT_EQ(o.program, "./train");
  EXPECT_TRUE(o.program_args.empty());
}

TEST(Options, BothSpellingsAndBothValueForms) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--nproc_per_node=4", "--max_restarts=2", "--node_rank=1", "--nnodes=2", "--master_port=1234", "p"},
           {"--nproc-per-node", "4", "--max-restarts", "2", "--node-rank", "1", "--nnodes", "2", "--master-port",
            "1234", "p"}}) {
    const Options o = parse_command_line(args);
    EXPECT_EQ(o.nproc.count, 4);
    EXPECT_EQ(o.max_restarts, 2);
    EXPECT_EQ(o.node_rank, 1);
    EXPECT_EQ(o.max_nodes, 2);
    EXPECT_EQ(o.master_port, 1234);
  }
}

TEST(Options, EveryTorchrunFlagIsAccepted) {
  const Options o = parse_command_line({"--nproc_per_node=gpu",
                                        "--nnodes=1:4",
                                        "--node_rank=0",
                                        "--master_addr=10.0.0.1",
                                        "--master_port=29501",
                                        "--rdzv_backend=c10d",
                                        "--rdzv_endpoint=host:1234",
                                        "--rdzv_id=job7",
                                        "--rdzv_conf=join_timeout=5",
                                        "--standalone",
                                        "--max_restarts=3",
                                        "--monitor_interval=0.5",
                                        "--log_dir=/tmp/x",
                                        "--redirects=0:3,1:1",
                                        "--tee=2",
                                        "--local_ranks_filter=0,2",
                                        "--no_python",
                                        "--role=trainer",
                                        "--start_method=spawn",
                                        "--module",
                                        "prog"});
  EXPECT_EQ(o.nproc.kind, NprocSpec::Kind::Gpu);
  EXPECT_EQ(o.min_nodes, 1);
  EXPECT_EQ(o.max_nodes, 4);
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.rdzv_backend, RdzvBackend::C10d);
  EXPECT_EQ(o.rdzv_endpoint, "host:1234");
  EXPECT_EQ(o.rdzv_id, "job7");
  EXPECT_EQ(o.rdzv_conf.at("join_timeout"), "5");
  EXPECT_TRUE(o.standalone);
  EXPECT_DOUBLE_EQ(o.monitor_interval_s, 0.5);
  EXPECT_EQ(o.log_dir, "/tmp/x");
  EXPECT_EQ(o.redirects.for_local_rank(0), 3);
  EXPECT_EQ(o.redirects.for_local_rank(1), 1);
  EXPECT_EQ(o.redirects.for_local_rank(2), 0);
  EXPECT_EQ(o.tee.for_local_rank(5), 2);
  EXPECT_EQ(*o.local_ranks_filter, (std::vector<int>{0, 2}));
  EXPECT_TRUE(o.no_python);
  EXPECT_TRUE(o.module);
  EXPECT_EQ(o.role, "trainer");
  ASSERT_EQ(o.notes.size(), 1u);  // --start_method is ignored, with a note
}

TEST(Options, NprocWords) {
  EXPECT_EQ(parse_command_line({"--nproc_per_node=auto", "p"}).nproc.kind, NprocSpec::Kind::Auto);
  EXPECT_EQ(parse_command_line({"--nproc_per_node=cpu", "p"}).nproc.kind, NprocSpec::Kind::Cpu);
  EXPECT_EQ(parse_command_line({"--nproc_per_node=gpu", "p"}).nproc.kind, NprocSpec::Kind::Gpu);
}

TEST(Options, TheProgramsArgumentsAreItsOwn) {
  const Options o = parse_command_line({"--nproc_per_node=2", "./train", "--lr", "0.1", "--nproc_per_node=9", "--"});
  EXPECT_EQ(o.nproc.count, 2);
  EXPECT_EQ(o.program, "./train");
  EXPECT_EQ(o.program_args, (std::vector<std::string>{"--lr", "0.1", "--nproc_per_node=9", "--"}));
}

TEST(Options, DoubleDashEndsTheFlags) {
  const Options o = parse_command_line({"--nproc_per_node=2", "--", "--weird-name", "x"});
  EXPECT_EQ(o.program, "--weird-name");
  EXPECT_EQ(o.program_args, (std::vector<std::string>{"x"}));
}

TEST(Options, ShortFlags) {
  const Options o = parse_command_line({"-r", "3", "-t3", "-m", "pkg.train"});
  EXPECT_EQ(o.redirects.all, 3);
  EXPECT_EQ(o.tee.all, 3);
  EXPECT_TRUE(o.module);
  EXPECT_EQ(o.program, "pkg.train");
}

TEST(Options, HelpAndVersion) {
  EXPECT_TRUE(parse_command_line({"--help"}).help);
  EXPECT_TRUE(parse_command_line({"-h"}).help);
  EXPECT_TRUE(parse_command_line({"--nproc_per_node=2", "--version"}).version);
  // After the program, --help is the program's.
  const Options o = parse_command_line({"./train", "--help"});
  EXPECT_FALSE(o.help);
  EXPECT_EQ(o.program_args, (std::vector<std::string>{"--help"}));
}

TEST(Options, HelpExplainsEveryFlag) {
  const std::string help = help_text();
  for (const char* flag : {"--nproc_per_node",
                           "--nnodes",
                           "--node_rank",
                           "--master_addr",
                           "--master_port",
                           "--rdzv_backend",
                           "--rdzv_endpoint",
                           "--rdzv_id",
                           "--rdzv_conf",
                           "--standalone",
                           "--max_restarts",
                           "--monitor_interval",
                           "--grace_period",
                           "--stopped_timeout",
                           "--log_dir",
                           "--redirects",
                           "--tee",
                           "--local_ranks_filter",
                           "--no_python",
                           "--module",
                           "--role",
                           "--start_method",
                           "--mixed_precision",
                           "--gradient_accumulation_steps",
                           "--cpu",
                           "--help",
                           "--version",
                           "SLURM_NNODES",
                           "Exit status"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
  }
  EXPECT_NE(version_text().find("ddprun "), std::string::npos);
}

TEST(Options, AccelerateFlagsAreUnsetByDefault) {
  const Options o = parse_command_line({"./train"});
  EXPECT_FALSE(o.accelerate.mixed_precision);
  EXPECT_FALSE(o.accelerate.gradient_accumulation_steps);
  EXPECT_FALSE(o.accelerate.cpu);
}

TEST(Options, AccelerateFlagsInBothSpellingsAndBothValueForms) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--mixed_precision=bf16", "--gradient_accumulation_steps=4", "--cpu", "p"},
           {"--mixed-precision", "bf16", "--gradient-accumulation-steps", "4", "--cpu", "p"}}) {
    const Options o = parse_command_line(args);
    EXPECT_EQ(o.accelerate.mixed_precision, "bf16");
    EXPECT_EQ(o.accelerate.gradient_accumulation_steps, 4);
    EXPECT_TRUE(o.accelerate.cpu);
    EXPECT_EQ(o.program, "p");
  }
  for (const char* precision : {"no", "fp16", "bf16"}) {
    EXPECT_EQ(parse_command_line({std::string("--mixed_precision=") + precision, "p"}).accelerate.mixed_precision,
              precision);
  }
  EXPECT_EQ(parse_command_line({"--gradient_accumulation_steps=1", "p"}).accelerate.gradient_accumulation_steps, 1);
}

TEST(Options, BadAccelerateValues) {
  for (const char* precision : {"fp8", "FP16", "", "yes"}) {
    expect_contains(error_of({std::string("--mixed_precision=") + precision, "p"}),
                    {"--mixed_precision", std::string("\"") + precision + "\"", "no, fp16 or bf16"});
  }
  for (const char* steps : {"0", "-2", "two", "1.5", ""}) {
    expect_contains(error_of({std::string("--gradient_accumulation_steps=") + steps, "p"}),
                    {"--gradient_accumulation_steps", std::string("\"") + steps + "\"", "1 or more"});
  }
  expect_contains(error_of({"--cpu=true", "p"}), {"--cpu takes no value", "\"true\""});
  expect_contains(error_of({"--mixed_precision"}), {"--mixed_precision needs a value"});
}

TEST(Options, UnknownFlag) {
  expect_contains(error_of({"--nprocs=2", "p"}), {"unknown flag", "--nprocs", "ddprun --help"});
  expect_contains(error_of({"-x", "p"}), {"unknown flag", "-x"});
}

TEST(Options, NonNumericCounts) {
  expect_contains(error_of({"--nproc_per_node=four", "p"}), {"--nproc_per_node", "\"four\"", "auto, cpu, gpu"});
  expect_contains(error_of({"--nproc_per_node=0", "p"}), {"--nproc_per_node", "\"0\"", "1 or more"});
  expect_contains(error_of({"--nnodes=two", "p"}), {"--nnodes", "\"two\"", "MIN:MAX"});
  expect_contains(error_of({"--nnodes=3:2", "p"}), {"--nnodes", "MIN <= MAX"});
  expect_contains(error_of({"--node_rank=-1", "p"}), {"--node_rank", "\"-1\""});
  expect_contains(error_of({"--max_restarts=x", "p"}), {"--max_restarts", "\"x\""});
  expect_contains(error_of({"--master_port=70000", "p"}), {"--master_port", "1 to 65535"});
  expect_contains(error_of({"--monitor_interval=0", "p"}), {"--monitor_interval", "positive"});
  expect_contains(error_of({"--stopped_timeout=-1", "p"}), {"--stopped_timeout", "\"-1\"", "0 or more"});
  expect_contains(error_of({"--redirects=4", "p"}), {"--redirects", "\"4\"", "0 (none)"});
  expect_contains(error_of({"--tee=0:5", "p"}), {"--tee", "\"0:5\""});
  expect_contains(error_of({"--local_ranks_filter=a", "p"}), {"--local_ranks_filter", "list of local ranks"});
  expect_contains(error_of({"--rdzv_backend=etcd", "p"}), {"--rdzv_backend", "static or c10d"});
  expect_contains(error_of({"--rdzv_conf=timeout", "p"}), {"--rdzv_conf", "KEY=VALUE"});
}

TEST(Options, MissingValuesAndProgram) {
  expect_contains(error_of({"--nproc_per_node"}), {"--nproc_per_node needs a value"});
  expect_contains(error_of({"--nproc_per_node=2"}), {"no program to run", "Usage: ddprun"});
  expect_contains(error_of({}), {"no program to run"});
  expect_contains(error_of({"--standalone=yes", "p"}), {"--standalone takes no value"});
}

}  // namespace
}  // namespace ddp::launcher
