#include "util/launch_env.h"

#include <gtest/gtest.h>

#include <map>

#include "ddp/error.h"
#include "init/init_method.h"
#include "support/expect_error.h"

namespace ddp::detail {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string error_of(std::map<std::string, std::string> vars) {
  return test::message_of<InvalidArgument>([&] { read_launch_env(env_of(std::move(vars))); });
}

TEST(LaunchEnv, ReadsTorchrunVariables) {
  auto env = read_launch_env(env_of({{"RANK", "3"},
                                     {"WORLD_SIZE", "8"},
                                     {"LOCAL_RANK", "1"},
                                     {"LOCAL_WORLD_SIZE", "2"},
                                     {"MASTER_ADDR", "node0"},
                                     {"MASTER_PORT", "29500"},
                                     {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                     {"TORCHELASTIC_RESTART_COUNT", "2"}}));
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.master_addr, "node0");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_TRUE(env.use_agent_store);
  EXPECT_EQ(env.restart_count, 2);
  EXPECT_FALSE(read_launch_env(env_of({{"TORCHELASTIC_USE_AGENT_STORE", "False"}})).use_agent_store);
}

TEST(LaunchEnv, FallsBackToOpenMpiThenSlurm) {
  auto mpi = read_launch_env(env_of({{"OMPI_COMM_WORLD_RANK", "1"},
                                     {"OMPI_COMM_WORLD_SIZE", "4"},
                                     {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                     {"SLURM_PROCID", "7"}}));
  EXPECT_EQ(mpi.rank, 1);
  EXPECT_EQ(mpi.world_size, 4);
  EXPECT_EQ(mpi.local_rank, 1);
  EXPECT_EQ(mpi.source, "Open MPI");
  auto slurm = read_launch_env(env_of({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "2"}}));
  EXPECT_EQ(slurm.rank, 5);
  EXPECT_EQ(slurm.world_size, 6);
  EXPECT_EQ(slurm.local_rank, 2);
  EXPECT_EQ(slurm.source, "Slurm");
  auto none = read_launch_env(env_of({}));
  EXPECT_FALSE(none.rank);
  EXPECT_FALSE(none.world_size);
}

TEST(LaunchEnv, BadValuesNameTheVariableAndTheFix) {
  auto message = error_of({{"RANK", "one"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(message.find("RANK=\"one\""), std::string::npos) << message;
  EXPECT_NE(message.find("non-negative integer"), std::string::npos) << message;
  message = error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}});
  EXPECT_NE(message.find("WORLD_SIZE=\"0\""), std::string::npos) << message;
  message = error_of({{"RANK", "0"}, {"WORLD_SIZE", "2x"}});
  EXPECT_NE(message.find("WORLD_SIZE=\"2x\""), std::string::npos) << message;
  message = error_of({{"RANK", "-1"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(message.find("RANK=\"-1\""), std::string::npos) << message;
  message = error_of({{"RANK", "0"}});
  EXPECT_NE(message.find("RANK is set but WORLD_SIZE is not"), std::string::npos) << message;
  message = error_of({{"MASTER_PORT", "http"}});
  EXPECT_NE(message.find("MASTER_PORT=\"http\""), std::string::npos) << message;
  message = error_of({{"MASTER_PORT", "70000"}});
  EXPECT_NE(message.find("1 to 65535"), std::string::npos) << message;
  message = error_of({{"OMPI_COMM_WORLD_RANK", "0"}});
  EXPECT_NE(message.find("no world size"), std::string::npos) << message;
}

TEST(InitMethod, ParsesTheThreeForms) {
  EXPECT_EQ(parse_init_method("env://").kind, InitMethod::Kind::Env);
  EXPECT_EQ(parse_init_method("").kind, InitMethod::Kind::Env);
  auto tcp = parse_init_method("tcp://10.0.0.1:23456");
  EXPECT_EQ(tcp.kind, InitMethod::Kind::Tcp);
  EXPECT_EQ(tcp.host, "10.0.0.1");
  EXPECT_EQ(tcp.port, 23456);
  auto v6 = parse_init_method("tcp://[::1]:80");
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 80);
  auto file = parse_init_method("file:///tmp/rdzv");
  EXPECT_EQ(file.kind, InitMethod::Kind::File);
  EXPECT_EQ(file.path, "/tmp/rdzv");
}

TEST(InitMethod, RejectsBadUrlsShowingTheAcceptedForms) {
  for (const char* url : {"tcp://host", "tcp://:80", "tcp://host:0", "tcp://host:99999", "tcp://host:x",
                          "file://relative", "http://host:1", "tcp://[::1]80"}) {
    try {
      parse_init_method(url);
      ADD_FAILURE() << url << " was accepted";
    } catch (const InvalidArgument& e) {
      std::string message = e.what();
      EXPECT_NE(message.find(url), std::string::npos) << message;
      EXPECT_NE(message.find("tcp://host:port"), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace ddp::detail
