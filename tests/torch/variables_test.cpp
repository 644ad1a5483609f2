// Every DDP_* variable is declared once, beside the code that reads it (util/variables.h):
// README's table names exactly the declared ones, and no source reads or names another.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "util/variables.h"
#include "front_variables.h"

namespace ddp::detail {
namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<VariableInfo> declared() {
  auto all = core_variables();
  const auto front = front_variables();
  all.insert(all.end(), front.begin(), front.end());
  return all;
}

std::set<std::string> declared_names() {
  std::set<std::string> names;
  for (const auto& v : declared()) names.emplace(v.name);
  return names;
}

TEST(Variables, EachIsDeclaredOnceWithWhatItTakes) {
  std::set<std::string> seen;
  for (const auto& v : declared()) {
    EXPECT_TRUE(seen.emplace(v.name).second) << v.name << " is declared twice";
    EXPECT_FALSE(v.takes.empty()) << v.name << " does not say what it takes";
  }
  EXPECT_GT(seen.size(), 20u);
}

// README's table of variables names each declared variable, and no other DDP_* variable.
TEST(Variables, ReadmesTableIsTheDeclarations) {
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
  EXPECT_EQ(documented, declared_names()) << "README.md's table of environment variables and the declarations differ";
}

// No source reads a DDP_* variable but through read_variables, and every one a source names is declared.
TEST(Variables, NoSourceReadsOrNamesAnUndeclaredVariable) {
  const std::regex literal("\"(DDP_[A-Z0-9_]+)\"");
  const std::regex read(R"(\b(getenv|env|lookup|parent)\(\s*"DDP_)");
  const auto names = declared_names();
  int files = 0;
  for (const char* root : {"src", "include"}) {
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(std::filesystem::path(DDP_SOURCE_DIR) / root)) {
      const auto ext = entry.path().extension();
      if (ext != ".cpp" && ext != ".h") continue;
      ++files;
      const std::string text = read_text(entry.path());
      const std::string file = entry.path().lexically_relative(DDP_SOURCE_DIR).string();
      EXPECT_FALSE(std::regex_search(text, read))
          << file << " reads a DDP_* variable: declare it and use read_variables";
      for (auto it = std::sregex_iterator(text.begin(), text.end(), literal); it != std::sregex_iterator(); ++it) {
        EXPECT_TRUE(names.contains((*it)[1].str())) << file << " names " << (*it)[1] << ", which no part declares";
      }
    }
  }
  EXPECT_GT(files, 300);
}

}  // namespace
}  // namespace ddp::detail
