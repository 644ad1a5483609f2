// ddp-trace: reads the ranks' flight recorder dumps and says in a few lines what happened (the
// first sequence number at which the ranks part ways, who was missing, who called a different
// op, who was slow to arrive). docs/FLIGHT_RECORDER.md.
#include <cstdio>
#include <string>
#include <vector>

#include "records/flight_analysis.h"
#include "records/flight_dump_files.h"
#include "util/strings.h"

namespace {

using namespace ddp::detail;

constexpr const char* kUsage = R"(usage: ddp-trace [--entries N] [--elsewhere R,...] PATH...

Reads the flight recorder dumps of a job (the rank_<R>.flight files that each rank writes when a
collective fails, on SIGUSR1, or when asked) and says what happened: the first sequence number at
which the ranks part ways, the rank that was missing there (a rank without a dump was killed or
stopped), the rank that called a different collective, the rank that was slow to arrive.

  PATH            a folder (its *.flight files: under ddprun, <--log_dir>/<run id>/attempt_<N>;
                  otherwise DDP_FLIGHT_RECORDER_DIR, by default ${TMPDIR:-/tmp}/ddp-flight-<uid>/
                  <job>/attempt_<N>) or dump files. Only the newest run's dumps are compared.
  --entries N     also print each rank's last N operations
  --elsewhere R,...
                  ranks whose dumps are on other machines: their absence is no evidence
Exit status: 0 when dumps were read and compared, 1 when none could be read, 2 for bad arguments.
)";

void print(const std::string& line) { std::printf("%s\n", line.c_str()); }

std::string entry_line(const FlightEntry& e, const FlightGroup& group, std::int64_t t0) {
  auto ms = [&](std::int64_t ns) {
    char text[32];
    std::snprintf(text, sizeof text, "%+.3f", static_cast<double>(ns - t0) / 1e6);
    return std::string(text);
  };
  std::string line = cat(describe(e, group), ": ", to_string(e.state), ", issued ", ms(e.issued_ns), " ms");
  if (e.started_ns) line += cat(", started ", ms(e.started_ns));
  if (e.ended_ns) line += cat(", ended ", ms(e.ended_ns));
  if (!e.frame.empty()) line += cat(", called from ", e.frame);
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> paths;
  std::vector<int> elsewhere;
  long entries = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "ddp-trace: %s needs a value\n%s", arg.c_str(), kUsage);
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--entries") {
      const std::string v = value();
      const auto n = parse_int(v);
      if (!n || *n < 0) {
        std::fprintf(stderr, "ddp-trace: --entries takes a number of entries, not %s\n", quote(v).c_str());
        return 2;
      }
      entries = static_cast<long>(*n);
    } else if (arg == "--elsewhere") {
      const std::string v = value();
      for (std::size_t start = 0; start <= v.size();) {
        const auto comma = std::min(v.find(',', start), v.size());
        const auto n = parse_int(std::string_view(v).substr(start, comma - start));
        if (!n || *n < 0) {
          std::fprintf(stderr, "ddp-trace: --elsewhere takes ranks separated by commas, not %s\n", quote(v).c_str());
          return 2;
        }
        elsewhere.push_back(static_cast<int>(*n));
        start = comma + 1;
      }
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "ddp-trace: unknown flag %s\n%s", arg.c_str(), kUsage);
      return 2;
    } else {
      paths.push_back(arg);
    }
  }
  if (paths.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const LoadedDumps loaded = load_dumps(paths);
  for (const auto& problem : loaded.problems) std::fprintf(stderr, "ddp-trace: %s\n", problem.c_str());
  for (const auto& ignored : loaded.ignored) std::fprintf(stderr, "ddp-trace: ignored %s\n", ignored.c_str());
  if (loaded.dumps.empty()) {
    std::fprintf(stderr, "ddp-trace: no flight recorder dump could be read (%zu file%s found)\n", loaded.files,
                 loaded.files == 1 ? "" : "s");
    return 1;
  }
  for (const auto& line : analyze(loaded.dumps, elsewhere).lines) print(line);
  if (entries > 0) {
    std::int64_t t0 = 0;  // times are shown relative to the first issue time in the dumps
    for (const auto& d : loaded.dumps) {
      for (const auto& e : d.entries) t0 = t0 == 0 || e.issued_ns < t0 ? e.issued_ns : t0;
    }
    for (const auto& d : loaded.dumps) {
      const std::size_t shown = std::min<std::size_t>(d.entries.size(), static_cast<std::size_t>(entries));
      print(cat("rank ", d.rank, " (pid ", d.pid, " on ", d.host, "), its last ", shown, " of ", d.recorded,
                " operations (ms from the first issue in the dumps):"));
      for (std::size_t i = d.entries.size() - shown; i < d.entries.size(); ++i) {
        const FlightEntry& e = d.entries[i];
        print(cat("  [", d.groups[e.group].name, "] ", entry_line(e, d.groups[e.group], t0)));
      }
    }
  }
  return 0;
}
