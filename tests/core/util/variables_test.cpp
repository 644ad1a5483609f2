// The core's variables, each declared beside its code (util/variables.h): what
// read_variables makes of each, the fallbacks, and what a bad value gives.
#include "util/variables.h"

#include <gtest/gtest.h>

#include <map>

#include "records/flight_config.h"
#include "util/log.h"
#include "ddp/error.h"
#include "gloo/tuning.h"
#include "group/execute.h"
#include "shm/tuning.h"
#include "store/store_variables.h"
#include "support/expect_error.h"

namespace ddp::detail {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

template <class S, std::size_t N>
S read(const Variable<S> (&variables)[N], std::map<std::string, std::string> vars, VariableProblems& problems) {
  return read_variables(variables, env_of(std::move(vars)), problems);
}

TEST(Variables, NothingSetIsEveryDefault) {
  VariableProblems p;
  EXPECT_EQ(read(kLogVariables, {}, p).level, LogLevel::Warn);
  EXPECT_FALSE(read(kDebugVariables, {}, p).check_agreement);
  const auto shm = read(shm::kShmVariables, {}, p);
  EXPECT_TRUE(shm.enabled);
  EXPECT_EQ(shm.chunk_bytes, shm::Tuning{}.chunk_bytes);
  EXPECT_EQ(read(kFlightVariables, {}, p).capacity, kDefaultFlightCapacity);
  EXPECT_EQ(read(kGlooVariables, {}, p).socket_ifname, "");
  EXPECT_EQ(read(kGlooVariables, {}, p).doubling_bytes, GlooTuning{}.doubling_bytes);
  EXPECT_EQ(read(kStoreVariables, {}, p).protocol, "");
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_EQ(p.invalid, "");
  EXPECT_NO_THROW(p.check());
}

TEST(Variables, EveryCoreVariableIsRead) {
  const std::map<std::string, std::string> vars{{"DDP_LOG_LEVEL", "error"},
                                                {"DDP_DEBUG", "1"},
                                                {"DDP_SHM", "off"},
                                                {"DDP_SHM_CHUNK_BYTES", "5000"},
                                                {"DDP_SHM_SMALL_BYTES", "7"},
                                                {"DDP_SHM_STRIPE_BYTES", "8"},
                                                {"DDP_SHM_STRIPE_CHUNK_BYTES", "9"},
                                                {"DDP_SHM_GATHER_CHUNK_BYTES", "10"},
                                                {"DDP_SHM_GATHER_STRIPE_BYTES", "11"},
                                                {"DDP_SHM_SPIN_US", "12"},
                                                {"DDP_SHM_HOST_ID", "h"},
                                                {"DDP_GLOO_DOUBLING_BYTES", "13"},
                                                {"DDP_SOCKET_IFNAME", "eth1"},
                                                {"GLOO_SOCKET_IFNAME", "eth2"},
                                                {"DDP_FLIGHT_RECORDER", "14"},
                                                {"DDP_FLIGHT_RECORDER_DIR", "/d"},
                                                {"DDP_JOB_ID", "j"},
                                                {"TORCHELASTIC_RUN_ID", "r"},
                                                {"DDP_STORE_PROTOCOL", "ddp"}};
  VariableProblems p;
  EXPECT_EQ(read(kLogVariables, vars, p).level, LogLevel::Error);
  EXPECT_TRUE(read(kDebugVariables, vars, p).check_agreement);
  const auto shm = read(shm::kShmVariables, vars, p);
  EXPECT_FALSE(shm.enabled);
  EXPECT_EQ(shm.chunk_bytes, 8192u) << "whole pages";
  EXPECT_EQ(shm.small_bytes, 7u);
  EXPECT_EQ(shm.stripe_bytes, 8u);
  EXPECT_EQ(shm.stripe_chunk_bytes, 9u);
  EXPECT_EQ(shm.gather_chunk_bytes, 10u);
  EXPECT_EQ(shm.gather_stripe_bytes, 11u);
  EXPECT_EQ(shm.spin, std::chrono::microseconds(12));
  EXPECT_EQ(shm.host_id, "h");
  const auto gloo = read(kGlooVariables, vars, p);
  EXPECT_EQ(gloo.doubling_bytes, 13u);
  EXPECT_EQ(gloo.socket_ifname, "eth1") << "ddp's name before Gloo's";
  const auto flight = read(kFlightVariables, vars, p);
  EXPECT_EQ(flight.capacity, 14u);
  EXPECT_EQ(flight.dir, "/d");
  const auto store = read(kStoreVariables, vars, p);
  EXPECT_EQ(store.job_id, "j") << "ddp's name before torchrun's";
  EXPECT_EQ(store.protocol, "ddp");
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_EQ(read(kStoreVariables, {{"TORCHELASTIC_RUN_ID", "r"}}, p).job_id, "r");
  EXPECT_EQ(read(kGlooVariables, {{"GLOO_SOCKET_IFNAME", "eth2"}}, p).socket_ifname, "eth2");
  EXPECT_EQ(read(kGlooVariables, {{"DDP_SOCKET_IFNAME", ""}, {"GLOO_SOCKET_IFNAME", "eth2"}}, p).socket_ifname, "eth2")
      << "empty is unset";
  for (const char* off : {"0", "OFF", "off", "false", "No"}) {
    EXPECT_FALSE(read(kDebugVariables, {{"DDP_DEBUG", off}}, p).check_agreement) << off;
    EXPECT_FALSE(read(shm::kShmVariables, {{"DDP_SHM", off}}, p).enabled) << off;
  }
}

TEST(Variables, TuningOutOfRangeIsAWarningAndTheDefaultAndAValueThatMeansNothingIsAnError) {
  const std::map<std::string, std::string> vars{{"DDP_SHM_SPIN_US", "-5"},
                                                {"DDP_SHM_CHUNK_BYTES", "lots"},
                                                {"DDP_LOG_LEVEL", "loud"},
                                                {"DDP_FLIGHT_RECORDER", "many"}};
  VariableProblems p;
  EXPECT_EQ(read(kLogVariables, vars, p).level, LogLevel::Warn);
  const auto shm = read(shm::kShmVariables, vars, p);  // reading never throws
  EXPECT_EQ(shm.spin, shm::Tuning{}.spin);
  EXPECT_EQ(shm.chunk_bytes, shm::Tuning{}.chunk_bytes);
  read(kFlightVariables, vars, p);
  ASSERT_EQ(p.warnings.size(), 3u);
  test::expect_contains(p.warnings[0], {"DDP_LOG_LEVEL=\"loud\" is not debug, info, warn, error or off"});
  test::expect_contains(p.warnings[1], {"DDP_SHM_CHUNK_BYTES=\"lots\" is not an integer from 4096 to", "the default"});
  test::expect_contains(p.warnings[2], {"DDP_SHM_SPIN_US=\"-5\" is not an integer from 0 to 1000000"});
  test::expect_error<InvalidArgument>([&] { p.check(); }, {"DDP_FLIGHT_RECORDER=\"many\"", "0 to turn it off"});
}

TEST(Variables, AGroupsVariablesStandInFrontOfTheEnvironment) {
  const auto env =
      with_overrides({{"DDP_SHM_HOST_ID", "mine"}}, env_of({{"DDP_SHM_HOST_ID", "env"}, {"DDP_SHM", "0"}}));
  EXPECT_EQ(env("DDP_SHM_HOST_ID"), "mine");
  EXPECT_EQ(env("DDP_SHM"), "0");
  EXPECT_EQ(env("DDP_DEBUG"), std::nullopt);
}

TEST(Variables, TheLogLevelIsTheProcesssAndSetLogLevelChangesIt) {
  const LogLevel before = log_level();
  set_log_level(LogLevel::Error);
  EXPECT_FALSE(log_enabled(LogLevel::Warn));
  EXPECT_TRUE(log_enabled(LogLevel::Error));
  set_log_level(LogLevel::Debug);
  EXPECT_TRUE(log_enabled(LogLevel::Debug));
  set_log_level(before);
}

}  // namespace
}  // namespace ddp::detail
