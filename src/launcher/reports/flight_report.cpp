#include "reports/flight_report.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "records/flight_analysis.h"
#include "records/flight_config.h"
#include "records/flight_dump_files.h"
#include "util/strings.h"

namespace ddp::launcher {

using detail::cat;

std::string point_flight_dumps(std::map<std::string, std::string>& env, const std::string& attempt_dir,
                               const EnvLookup& parent) {
  detail::VariableProblems ignored;  // the folder is text
  if (!attempt_dir.empty() && detail::read_variables(detail::kFlightVariables, parent, ignored).dir.empty()) {
    env[std::string(detail::kFlightDirVariable)] = attempt_dir;
  }
  const detail::EnvLookup worker = [&](const std::string& name) -> std::optional<std::string> {
    if (auto it = env.find(name); it != env.end()) return it->second;
    return parent(name);
  };
  return detail::flight_dir(worker, ::getuid(), 0);
}

std::string format_flight_report(const std::string& folder, const std::vector<int>& local_ranks, int world_size) {
  std::error_code error;
  if (folder.empty() || local_ranks.empty() || !std::filesystem::is_directory(folder, error)) return "";
  const auto loaded = detail::load_dumps({folder});
  if (loaded.files == 0) return "";
  std::vector<int> elsewhere;
  for (int r = 0; r < world_size; ++r) {
    if (std::find(local_ranks.begin(), local_ranks.end(), r) == local_ranks.end()) elsewhere.push_back(r);
  }
  std::string out = cat("Flight recorder (each rank's last collectives, from ", folder, "):\n");
  for (const auto& problem : loaded.problems) out += cat("  ", problem, "\n");
  if (!loaded.dumps.empty()) {
    for (const auto& line : detail::analyze(loaded.dumps, elsewhere).lines) out += cat("  ", line, "\n");
  }
  out += cat("  (each rank's last operations: ddp-trace --entries 20 ", folder, ")\n");
  return out + std::string(72, '=') + "\n";
}

}  // namespace ddp::launcher
