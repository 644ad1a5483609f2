// The one table of DDP_* variables (ddp/detail/settings.h): what read_settings makes of each,
// and that README's table and every source file agree with it.
#include "ddp/detail/settings.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "ddp/error.h"
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

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::set<std::string> table_names() {
  std::set<std::string> names;
  for (const auto& s : kSettings) names.emplace(s.name);
  return names;
}

TEST(Settings, NothingSetIsEveryDefault) {
  const Settings s = read_settings(env_of({}));
  EXPECT_EQ(s.log_level, LogLevel::Warn);
  EXPECT_FALSE(s.debug);
  EXPECT_TRUE(s.shm.enabled);
  EXPECT_EQ(s.shm.chunk_bytes, ShmSettings{}.chunk_bytes);
  EXPECT_EQ(s.flight_capacity, kDefaultFlightCapacity);
  EXPECT_EQ(s.socket_ifname, "");
  EXPECT_FALSE(s.store_protocol.has_value());
  EXPECT_TRUE(s.warnings.empty());
  EXPECT_EQ(s.invalid, "");
  EXPECT_NO_THROW(s.check());
}

TEST(Settings, EveryVariableOfTheTableIsRead) {
  const Settings s = read_settings(env_of({{"DDP_LOG_LEVEL", "error"},
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
                                           {"DDP_STORE_PROTOCOL", "ddp"},
                                           {"DDP_TIMELINE", "t-{rank}.json"},
                                           {"DDP_BUCKET_STREAMS", "1"},
                                           {"DDP_STRAGGLER_REPORT", "/s"},
                                           {"DDP_CHECKPOINT_RECORD", "/c"}}));
  EXPECT_EQ(s.log_level, LogLevel::Error);
  EXPECT_TRUE(s.debug);
  EXPECT_FALSE(s.shm.enabled);
  EXPECT_EQ(s.shm.chunk_bytes, 8192u) << "whole pages";
  EXPECT_EQ(s.shm.small_bytes, 7u);
  EXPECT_EQ(s.shm.stripe_bytes, 8u);
  EXPECT_EQ(s.shm.stripe_chunk_bytes, 9u);
  EXPECT_EQ(s.shm.gather_chunk_bytes, 10u);
  EXPECT_EQ(s.shm.gather_stripe_bytes, 11u);
  EXPECT_EQ(s.shm.spin, std::chrono::microseconds(12));
  EXPECT_EQ(s.shm.host_id, "h");
  EXPECT_EQ(s.shm.gloo_doubling_bytes, 13u);
  EXPECT_EQ(s.socket_ifname, "eth1") << "ddp's name before Gloo's";
  EXPECT_EQ(s.flight_capacity, 14u);
  EXPECT_EQ(s.flight_dir, "/d");
  EXPECT_EQ(s.job_id, "j") << "ddp's name before torchrun's";
  EXPECT_EQ(s.store_protocol, "ddp");
  EXPECT_EQ(s.timeline, "t-{rank}.json");
  EXPECT_EQ(s.bucket_streams, 1);
  EXPECT_EQ(s.straggler_report, "/s");
  EXPECT_EQ(s.checkpoint_record, "/c");
  EXPECT_TRUE(s.warnings.empty());
  EXPECT_EQ(read_settings(env_of({{"GLOO_SOCKET_IFNAME", "eth2"}, {"TORCHELASTIC_RUN_ID", "r"}})).job_id, "r");
  EXPECT_EQ(read_settings(env_of({{"GLOO_SOCKET_IFNAME", "eth2"}})).socket_ifname, "eth2");
  for (const char* off : {"0", "OFF", "off"}) EXPECT_FALSE(read_settings(env_of({{"DDP_DEBUG", off}})).debug) << off;
}

TEST(Settings, TuningOutOfRangeIsAWarningAndTheDefaultAndAValueThatMeansNothingIsAnError) {
  const Settings s = read_settings(env_of({{"DDP_SHM_SPIN_US", "-5"},
                                           {"DDP_SHM_CHUNK_BYTES", "lots"},
                                           {"DDP_LOG_LEVEL", "loud"},
                                           {"DDP_FLIGHT_RECORDER", "many"}}));  // reading never throws
  EXPECT_EQ(s.shm.spin, ShmSettings{}.spin);
  EXPECT_EQ(s.shm.chunk_bytes, ShmSettings{}.chunk_bytes);
  EXPECT_EQ(s.log_level, LogLevel::Warn);
  ASSERT_EQ(s.warnings.size(), 3u);
  test::expect_contains(s.warnings[0], {"DDP_LOG_LEVEL=\"loud\" is not debug, info, warn, error or off"});
  test::expect_contains(s.warnings[1], {"DDP_SHM_CHUNK_BYTES=\"lots\" is not an integer from 4096 to", "the default"});
  test::expect_contains(s.warnings[2], {"DDP_SHM_SPIN_US=\"-5\" is not an integer from 0 to 1000000"});
  test::expect_error<InvalidArgument>([&] { s.check(); }, {"DDP_FLIGHT_RECORDER=\"many\"", "0 to turn it off"});
}

TEST(Settings, TheLogLevelIsTheProcesssAndSetLogLevelChangesIt) {
  const LogLevel before = log_level();
  set_log_level(LogLevel::Error);
  EXPECT_FALSE(log_enabled(LogLevel::Warn));
  EXPECT_TRUE(log_enabled(LogLevel::Error));
  set_log_level(LogLevel::Debug);
  EXPECT_TRUE(log_enabled(LogLevel::Debug));
  set_log_level(before);
}

// README's table of variables names each variable of the table, and no other DDP_* variable.
TEST(Settings, ReadmesTableIsTheTable) {
  const std::string readme = read_text(std::filesystem::path(DDP_SOURCE_DIR) / "README.md");
  const auto start = readme.find("## Environment variables");
  ASSERT_NE(start, std::string::npos);
  const auto end = readme.find("\n## ", start + 1);
  const std::string section = readme.substr(start, end - start);
  std::set<std::string> documented;
  const std::regex name("DDP_[A-Z0-9_]+");
  for (auto it = std::sregex_iterator(section.begin(), section.end(), name); it != std::sregex_iterator(); ++it) {
    documented.insert(it->str());
  }
  EXPECT_EQ(documented, table_names()) << "README.md's table of environment variables and kSettings differ";
}

// No file but settings.cpp reads a DDP_* variable, and every variable a source names is in the table.
TEST(Settings, NoSourceReadsAVariableOutsideTheTable) {
  const std::regex literal("\"(DDP_[A-Z0-9_]+)\"");
  const std::regex read(R"(\b(getenv|env|lookup|parent)\(\s*"DDP_)");
  const auto names = table_names();
  int files = 0;
  for (const char* root : {"src", "include"}) {
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(std::filesystem::path(DDP_SOURCE_DIR) / root)) {
      const auto ext = entry.path().extension();
      if (ext != ".cpp" && ext != ".h") continue;
      ++files;
      const std::string text = read_text(entry.path());
      const std::string file = entry.path().lexically_relative(DDP_SOURCE_DIR).string();
      if (file != "src/core/util/settings.cpp") {
        EXPECT_FALSE(std::regex_search(text, read)) << file << " reads a DDP_* variable: read it in settings.cpp";
      }
      for (auto it = std::sregex_iterator(text.begin(), text.end(), literal); it != std::sregex_iterator(); ++it) {
        EXPECT_TRUE(names.contains((*it)[1].str())) << file << " names " << (*it)[1] << ", which kSettings lacks";
      }
    }
  }
  EXPECT_GT(files, 300);
}

}  // namespace
}  // namespace ddp::detail
