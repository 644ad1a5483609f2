#include "cli/options.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::launcher {

using detail::cat;
using detail::quote;

int StreamSpec::for_local_rank(int local_rank) const {
  if (!is_map) return all;
  auto it = per_local_rank.find(local_rank);
  return it == per_local_rank.end() ? 0 : it->second;
}

bool StreamSpec::any() const {
  if (!is_map) return all != 0;
  return std::any_of(per_local_rank.begin(), per_local_rank.end(), [](const auto& kv) { return kv.second != 0; });
}

namespace {

[[noreturn]] void bad_value(const std::string& flag, const std::string& value, const std::string& expected) {
  throw InvalidArgument(cat("--", flag, " ", quote(value), " is not valid: expected ", expected, "."));
}

int parse_count(const std::string& flag, const std::string& value, int min_value, const std::string& expected) {
  auto number = detail::parse_int(value);
  if (!number || *number < min_value || *number > 1'000'000) bad_value(flag, value, expected);
  return static_cast<int>(*number);
}

double parse_seconds(const std::string& flag, const std::string& value, bool allow_zero) {
  char* end = nullptr;
  const double seconds = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(seconds) || seconds < 0 ||
      (!allow_zero && seconds == 0) || seconds > 1e6) {
    bad_value(flag, value, allow_zero ? "a number of seconds (0 or more)" : "a positive number of seconds");
  }
  return seconds;
}

NprocSpec parse_nproc(const std::string& value) {
  if (value == "auto") return {NprocSpec::Kind::Auto, 0};
  if (value == "cpu") return {NprocSpec::Kind::Cpu, 0};
  if (value == "gpu") return {NprocSpec::Kind::Gpu, 0};
  return {NprocSpec::Kind::Count,
          parse_count("nproc_per_node", value, 1, "a number of processes per node (1 or more), or auto, cpu, gpu")};
}

void parse_nnodes(const std::string& value, Options& options) {
  const std::string expected = "a number of nodes N (1 or more), or MIN:MAX for an elastic range";
  const auto colon = value.find(':');
  if (colon == std::string::npos) {
    options.min_nodes = options.max_nodes = parse_count("nnodes", value, 1, expected);
  } else {
    options.min_nodes = parse_count("nnodes", value.substr(0, colon), 1, expected);
    options.max_nodes = parse_count("nnodes", value.substr(colon + 1), 1, expected);
    if (options.min_nodes > options.max_nodes) {
      bad_value("nnodes", value, "MIN:MAX with MIN <= MAX");
    }
  }
  options.nnodes_given = true;
}

StreamSpec parse_streams(const std::string& flag, const std::string& value) {
  const std::string expected =
      "0 (none), 1 (stdout), 2 (stderr) or 3 (both), for every local rank, or per local "
      "rank as LOCAL_RANK:N,... (e.g. 0:3,1:1)";
  auto one = [&](const std::string& text) {
    auto n = detail::parse_int(text);
    if (!n || *n < 0 || *n > 3) bad_value(flag, value, expected);
    return static_cast<int>(*n);
  };
  StreamSpec spec;
  if (value.find(':') == std::string::npos) {
    spec.all = one(value);
    return spec;
  }
  spec.is_map = true;
  std::size_t start = 0;
  while (start <= value.size()) {
    const auto comma = std::min(value.find(',', start), value.size());
    const std::string item = value.substr(start, comma - start);
    const auto colon = item.find(':');
    if (colon == std::string::npos) bad_value(flag, value, expected);
    auto rank = detail::parse_int(item.substr(0, colon));
    if (!rank || *rank < 0 || *rank > 1'000'000) bad_value(flag, value, expected);
    spec.per_local_rank[static_cast<int>(*rank)] = one(item.substr(colon + 1));
    start = comma + 1;
  }
  return spec;
}

std::vector<int> parse_rank_list(const std::string& flag, const std::string& value) {
  std::vector<int> ranks;
  std::size_t start = 0;
  while (start <= value.size()) {
    const auto comma = std::min(value.find(',', start), value.size());
    ranks.push_back(parse_count(flag, value.substr(start, comma - start), 0,
                                "a comma-separated list of local ranks, e.g. 0 or 0,2"));
    start = comma + 1;
  }
  return ranks;
}

std::map<std::string, std::string> parse_rdzv_conf(const std::string& value, std::vector<std::string>& notes) {
  std::map<std::string, std::string> conf;
  if (value.empty()) return conf;
  std::size_t start = 0;
  while (start <= value.size()) {
    const auto comma = std::min(value.find(',', start), value.size());
    const std::string item = value.substr(start, comma - start);
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      bad_value("rdzv_conf", value, "KEY=VALUE pairs separated by commas, e.g. join_timeout=600,last_call_timeout=30");
    }
    const std::string key = item.substr(0, eq);
    const std::string setting = item.substr(eq + 1);
    if (key == "join_timeout" || key == "last_call_timeout" || key == "keep_alive_interval") {
      parse_seconds("rdzv_conf " + key, setting, key == "last_call_timeout");
    } else if (key == "keep_alive_max_attempt") {
      parse_count("rdzv_conf keep_alive_max_attempt", setting, 1, "a number of missed heartbeats (1 or more)");
    } else {
      notes.push_back(cat("--rdzv_conf ", key, "=", setting,
                          " is ignored: ddprun reads join_timeout, last_call_timeout, keep_alive_interval and "
                          "keep_alive_max_attempt only"));
    }
    conf[key] = setting;
    start = comma + 1;
  }
  return conf;
}

std::string normalize(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

struct Flag {
  bool takes_value;
  std::function<void(Options&, const std::string&)> apply;
};

const std::map<std::string, Flag>& flags() {
  static const std::map<std::string, Flag> table =
      {
          {"nproc_per_node", {true, [](Options& o, const std::string& v) { o.nproc = parse_nproc(v); }}},
          {"nnodes", {true, [](Options& o, const std::string& v) { parse_nnodes(v, o); }}},
          {"node_rank",
           {true,
            [](Options& o, const std::string& v) {
    o.node_rank = parse_count("node_rank", v, 0, "a node rank (0 or more, less than --nnodes)");
            }}},
          {"master_addr",
           {true,
            [](Options& o, const std::string& v) {
    if (v.empty()) bad_value("master_addr", v, "a host name or IP address");
    o.master_addr = v;
            }}},
                                           {"master_port",
                                            {true,
                                             [](Options& o, const std::string& v) {
    auto port = detail::parse_int(v);
    if (!port || *port < 1 || *port > 65535) bad_value("master_port", v, "a TCP port from 1 to 65535");
    o.master_port = static_cast<int>(*port);
                                             }}},
      {"rdzv_backend",
       {true,
        [](Options& o, const std::string& v) {
    if (v == "static") {
      o.rdzv_backend = RdzvBackend::Static;
    } else if (v == "c10d") {
      o.rdzv_backend = RdzvBackend::C10d;
    } else {
      bad_value("rdzv_backend", v,
                "static or c10d (ddprun hosts the rendezvous store itself; etcd is not "
                "supported)");
    }
    o.rdzv_backend_given = true;
        }}},
      {"rdzv_endpoint",
       {true,
        [](Options& o, const std::string& v) {
    if (v.empty()) bad_value("rdzv_endpoint", v, "HOST:PORT");
    o.rdzv_endpoint = v;
        }}},
      {"rdzv_id",
       {true,
        [](Options& o, const std::string& v) {
    if (v.empty()) bad_value("rdzv_id", v, "a non-empty job id");
    o.rdzv_id = v;
    o.rdzv_id_given = true;
        }}},
      {"rdzv_conf", {true, [](Options& o, const std::string& v) { o.rdzv_conf = parse_rdzv_conf(v, o.notes); }}},
      {"standalone", {false, [](Options& o, const std::string&) { o.standalone = true; }}},
      {"max_restarts",
       {true,
        [](Options& o, const std::string& v) {
    o.max_restarts = parse_count("max_restarts", v, 0, "a number of restarts (0 or more)");
        }}},
      {"monitor_interval",
       {true,
        [](Options& o, const std::string& v) { o.monitor_interval_s = parse_seconds("monitor_interval", v, false); }}},
      {"grace_period",
       {true, [](Options& o, const std::string& v) { o.grace_period_s = parse_seconds("grace_period", v, true); }}},
      {"stopped_timeout",
       {true,
        [](Options& o, const std::string& v) { o.stopped_timeout_s = parse_seconds("stopped_timeout", v, true); }}},
      {"log_dir",
       {true,
        [](Options& o, const std::string& v) {
    if (v.empty()) bad_value("log_dir", v, "a directory");
    o.log_dir = v;
        }}},
      {"redirects", {true, [](Options& o, const std::string& v) { o.redirects = parse_streams("redirects", v); }}},
      {"tee", {true, [](Options& o, const std::string& v) { o.tee = parse_streams("tee", v); }}},
      {"local_ranks_filter",
       {true,
        [](Options& o, const std::string& v) { o.local_ranks_filter = parse_rank_list("local_ranks_filter", v); }}},
      {"no_python", {false, [](Options& o, const std::string&) { o.no_python = true; }}},
      {"module", {false, [](Options& o, const std::string&) { o.module = true; }}},
      {"role",
       {true,
        [](Options& o, const std::string& v) {
    if (v.empty()) bad_value("role", v, "a non-empty role name");
    o.role = v;
        }}},
      // Accelerate's flags (options.h: AccelerateFlags), checked here so that a typo fails before any
      // worker starts rather than in every worker.
      {"mixed_precision",
       {true,
        [](Options& o, const std::string& v) {
    if (v != "no" && v != "fp16" && v != "bf16") bad_value("mixed_precision", v, "no, fp16 or bf16");
    o.accelerate.mixed_precision = v;
        }}},
      {"gradient_accumulation_steps",
       {true,
        [](Options& o, const std::string& v) {
    o.accelerate.gradient_accumulation_steps =
        parse_count("gradient_accumulation_steps", v, 1, "a number of batches per optimizer step (1 or more)");
        }}},
      {"cpu", {false, [](Options& o, const std::string&) { o.accelerate.cpu = true; }}},
      {"start_method",
       {true,
        [](Options& o, const std::string& v) {
    if (v != "spawn" && v != "fork" && v != "forkserver") bad_value("start_method", v, "spawn, fork or forkserver");
    o.notes.push_back("--start_method is ignored: ddprun always starts workers as new programs (fork and exec)");
        }}},
      {"help", {false, [](Options& o, const std::string&) { o.help = true; }}},
      {"version", {false, [](Options& o, const std::string&) { o.version = true; }}},
      };
  return table;
}

const std::map<std::string, std::string>& short_flags() {
  static const std::map<std::string, std::string> table = {
      {"-h", "help"}, {"-m", "module"}, {"-r", "redirects"}, {"-t", "tee"}};
  return table;
}

}  // namespace

Options parse_command_line(const std::vector<std::string>& args) {
  Options options;
  std::size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program
    std::string name;
    std::optional<std::string> value;
    if (arg.rfind("--", 0) == 0) {
      const auto eq = arg.find('=');
      name = normalize(arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2));
      if (eq != std::string::npos) value = arg.substr(eq + 1);
    } else {
      auto it = short_flags().find(arg.substr(0, 2));
      if (it == short_flags().end()) {
        throw InvalidArgument(cat("unknown flag ", quote(arg), ". Run 'ddprun --help' for the flags it accepts."));
      }
      name = it->second;
      if (arg.size() > 2) value = arg.substr(2);
    }
    auto flag = flags().find(name);
    if (flag == flags().end()) {
      throw InvalidArgument(cat("unknown flag ", quote(arg.substr(0, arg.find('='))),
                                ". Run 'ddprun --help' for the flags it accepts (torchrun's, spelled with _ or -)."));
    }
    if (!flag->second.takes_value) {
      if (value) throw InvalidArgument(cat("--", name, " takes no value, but was given ", quote(*value), "."));
      flag->second.apply(options, "");
      if (options.help || options.version) return options;
      continue;
    }
    if (!value) {
      if (i + 1 >= args.size()) throw InvalidArgument(cat("--", name, " needs a value (e.g. --", name, "=VALUE)."));
      value = args[++i];
    }
    flag->second.apply(options, *value);
  }
  if (i >= args.size()) {
    throw InvalidArgument(
        "no program to run. Usage: ddprun [flags] PROGRAM [ARGS...], e.g. ddprun --nproc_per_node=4 ./train");
  }
  options.program = args[i];
  options.program_args.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
  if (options.program.empty()) throw InvalidArgument("the program name is empty.");
  return options;
}

}  // namespace ddp::launcher
