#include "cli/job_config.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "ddp/error.h"
#include "net/socket.h"
#include "cli/slurm.h"
#include "util/strings.h"

namespace ddp::launcher {

using detail::cat;
using detail::quote;

namespace {

constexpr int kDefaultMasterPort = 29500;
constexpr int kDefaultC10dPort = 29400;

std::chrono::milliseconds seconds_setting(const std::map<std::string, std::string>& conf, const std::string& key,
                                          std::chrono::milliseconds fallback) {
  auto it = conf.find(key);
  if (it == conf.end()) return fallback;
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::strtod(it->second.c_str(), nullptr) * 1000));
}

std::chrono::milliseconds seconds(double value) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(value * 1000));
}

}  // namespace

int count_visible_gpus(const std::optional<std::string>& cuda_visible_devices, int device_files) {
  if (!cuda_visible_devices) return device_files;
  int count = 0;
  std::size_t start = 0;
  const std::string& list = *cuda_visible_devices;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    // CUDA stops at the first entry that is not a device (an empty one, "-1", a bad id).
    if (item.empty() || item[0] == '-') break;
    ++count;
    start = comma + 1;
  }
  return count;
}

MachineInfo probe_machine(const EnvLookup& env) {
  MachineInfo machine;
  machine.cpus = std::max(1, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
  int device_files = 0;
  if (DIR* dev = ::opendir("/dev")) {
    while (dirent* entry = ::readdir(dev)) {
      const char* name = entry->d_name;
      if (std::strncmp(name, "nvidia", 6) == 0 && name[6] != '\0' &&
          std::strspn(name + 6, "0123456789") == std::strlen(name + 6)) {
        ++device_files;
      }
    }
    ::closedir(dev);
  }
  machine.gpus = count_visible_gpus(env("CUDA_VISIBLE_DEVICES"), device_files);
  return machine;
}

int resolve_nproc(const NprocSpec& spec, const MachineInfo& machine) {
  switch (spec.kind) {
    case NprocSpec::Kind::Count: return spec.count;
    case NprocSpec::Kind::Cpu: return machine.cpus;
    case NprocSpec::Kind::Auto: return machine.gpus > 0 ? machine.gpus : machine.cpus;
    case NprocSpec::Kind::Gpu:
      if (machine.gpus == 0) {
        throw InvalidArgument(
            "--nproc_per_node=gpu, but this machine has no visible GPU (no /dev/nvidiaN, or CUDA_VISIBLE_DEVICES "
            "hides them). Give a number of workers, or use auto or cpu.");
      }
      return machine.gpus;
  }
  return 1;
}

Endpoint parse_endpoint(const std::string& text, int default_port, const std::string& flag) {
  Endpoint endpoint;
  std::string port_text;
  if (!text.empty() && text[0] == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos) {
      throw InvalidArgument(cat("--", flag, " ", quote(text), " is not valid: an IPv6 address needs a closing ']'."));
    }
    endpoint.host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':')
        throw InvalidArgument(cat("--", flag, " ", quote(text), " is not valid: expected [ADDRESS]:PORT."));
      port_text = text.substr(close + 2);
    }
  } else {
    const auto colon = text.find(':');
    if (colon != std::string::npos && text.find(':', colon + 1) == std::string::npos) {
      endpoint.host = text.substr(0, colon);
      port_text = text.substr(colon + 1);
    } else {
      endpoint.host = text;  // no port, or a bare IPv6 address
    }
  }
  if (endpoint.host.empty()) {
    throw InvalidArgument(cat("--", flag, " ", quote(text), " has no host: expected HOST:PORT, e.g. node01:29400."));
  }
  endpoint.port = default_port;
  if (!port_text.empty()) {
    auto port = detail::parse_int(port_text);
    if (!port || *port < 1 || *port > 65535) {
      throw InvalidArgument(cat("--", flag, " ", quote(text), " has an invalid port ", quote(port_text),
                                ": expected a TCP port from 1 to 65535."));
    }
    endpoint.port = static_cast<int>(*port);
  }
  return endpoint;
}

namespace {

// What the flags say directly, before the rendezvous decides where the store is.
JobConfig flags_config(const Options& options, const MachineInfo& machine) {
  JobConfig config;
  config.notes = options.notes;
  config.nproc = resolve_nproc(options.nproc, machine);
  config.min_nodes = options.min_nodes;
  config.max_nodes = options.max_nodes;
  config.backend = options.rdzv_backend;
  config.run_id = options.rdzv_id;
  config.max_restarts = options.max_restarts;
  config.monitor_interval = seconds(options.monitor_interval_s);
  config.grace_period = seconds(options.grace_period_s);
  config.stopped_timeout = seconds(options.stopped_timeout_s);
  config.join_timeout = seconds_setting(options.rdzv_conf, "join_timeout", config.join_timeout);
  config.last_call_timeout = seconds_setting(options.rdzv_conf, "last_call_timeout", config.last_call_timeout);
  config.keep_alive_interval = seconds_setting(options.rdzv_conf, "keep_alive_interval", config.keep_alive_interval);
  if (auto it = options.rdzv_conf.find("keep_alive_max_attempt"); it != options.rdzv_conf.end()) {
    config.keep_alive_max_attempt = static_cast<int>(detail::parse_int(it->second).value_or(3));
  }
  config.log_dir = options.log_dir;
  config.redirects = options.redirects;
  config.tee = options.tee;
  config.local_ranks_filter = options.local_ranks_filter;
  config.role = options.role;
  config.accelerate = options.accelerate;
  return config;
}

// --standalone: one node, a store of its own on localhost.
void standalone_store(JobConfig& config, const Options& options, const std::string& random_id) {
  if (options.nnodes_given && options.max_nodes > 1) {
    throw InvalidArgument(cat("--standalone runs a single-node job, but --nnodes asks for ", options.max_nodes,
                              " nodes. Drop --standalone and give --rdzv_endpoint (or --master_addr) instead."));
  }
  if (!options.rdzv_endpoint.empty() || options.master_addr || options.master_port) {
    config.notes.push_back(
        "--standalone picks its own port on localhost: --rdzv_endpoint, --master_addr and "
        "--master_port are ignored");
  }
  config.backend = RdzvBackend::C10d;
  config.min_nodes = config.max_nodes = 1;
  config.node_rank = 0;
  config.store_role = JobConfig::StoreRole::Host;
  // An address, not "localhost": it needs no resolver (a container without /etc/hosts).
  config.store_host = "127.0.0.1";
  config.store_host_source = "--standalone";
  config.store_port = 0;
  config.master_addr = "127.0.0.1";
  if (!options.rdzv_id_given) config.run_id = random_id;
}

// Under Slurm (srun, one ddprun per node), what the flags leave open comes from the allocation.
void slurm_defaults(JobConfig& config, const Options& options, const EnvLookup& env) {
  const bool want_nnodes = !options.nnodes_given;
  const bool want_node_rank = !options.node_rank && config.backend == RdzvBackend::Static;
  const bool want_master = !options.master_addr && options.rdzv_endpoint.empty();
  if (want_nnodes || want_node_rank || want_master) {
    const SlurmInfo slurm = read_slurm(env);
    if (want_nnodes && slurm.nnodes) {
      config.min_nodes = config.max_nodes = *slurm.nnodes;
      config.notes.push_back(cat("--nnodes=", *slurm.nnodes, " from SLURM_NNODES"));
    }
    if (want_node_rank && slurm.node_id) {
      config.node_rank = *slurm.node_id;
      config.notes.push_back(cat("--node_rank=", *slurm.node_id, " from SLURM_NODEID"));
    }
    if (want_master && slurm.first_host) {
      config.store_host = *slurm.first_host;
      config.store_host_source = "the first host of SLURM_JOB_NODELIST";
      config.notes.push_back(cat("--master_addr=", *slurm.first_host, " from SLURM_JOB_NODELIST (its first host)"));
    }
  }
}

// The static rendezvous: node 0 hosts the store at --master_addr:--master_port (or --rdzv_endpoint).
void static_store(JobConfig& config, const Options& options) {
  if (config.min_nodes != config.max_nodes) {
    throw InvalidArgument(cat("--nnodes=", config.min_nodes, ":", config.max_nodes,
                              " is an elastic range, which needs --rdzv_backend=c10d; the static rendezvous needs "
                              "a fixed number of nodes (e.g. --nnodes=",
                              config.max_nodes, ")."));
  }
  if (!config.node_rank) config.node_rank = 0;
  if (*config.node_rank >= config.max_nodes) {
    throw InvalidArgument(cat("--node_rank=", *config.node_rank, " is not less than --nnodes=", config.max_nodes,
                              ": node ranks go from 0 to ", config.max_nodes - 1,
                              ". Give each node its own rank in that range."));
  }
  Endpoint endpoint;
  if (!options.rdzv_endpoint.empty()) {
    endpoint = parse_endpoint(options.rdzv_endpoint, options.master_port.value_or(kDefaultMasterPort), "rdzv_endpoint");
    config.store_host_source = "--rdzv_endpoint";
  } else {
    endpoint.host = options.master_addr.value_or(config.store_host.empty() ? "127.0.0.1" : config.store_host);
    endpoint.port = options.master_port.value_or(kDefaultMasterPort);
    if (options.master_addr) config.store_host_source = "--master_addr";
    if (config.store_host_source.empty()) config.store_host_source = "the default --master_addr";
  }
  config.store_host = endpoint.host;
  config.store_port = endpoint.port;
  config.master_addr = endpoint.host;
  config.store_role = *config.node_rank == 0 ? JobConfig::StoreRole::Host : JobConfig::StoreRole::Client;
  if (config.max_nodes > 1 && *config.node_rank > 0 && detail::is_loopback_host(endpoint.host) &&
      !options.master_addr && options.rdzv_endpoint.empty()) {
    // The host may be a loopback name, and may come from Slurm's node list: say which, and whence.
    config.notes.push_back(cat("node ranks above 0 reach node 0 at ", endpoint.host, " (", config.store_host_source,
                               "): that only works when every node runs on this machine"));
  }
}

// c10d: the store lives at the rendezvous endpoint; node ranks go by arrival.
void c10d_store(JobConfig& config, const Options& options) {
  if (options.rdzv_endpoint.empty()) {
    throw InvalidArgument(
        "--rdzv_backend=c10d needs --rdzv_endpoint HOST[:PORT], the address of the job's store on one of the nodes "
        "(the same on every node). For a single node, use --standalone.");
  }
  const Endpoint endpoint = parse_endpoint(options.rdzv_endpoint, kDefaultC10dPort, "rdzv_endpoint");
  if (options.node_rank) {
    config.notes.push_back("--node_rank is ignored with --rdzv_backend=c10d: node ranks go by arrival order");
  }
  if (options.master_addr || options.master_port) {
    config.notes.push_back(
        "--master_addr and --master_port are ignored with --rdzv_backend=c10d: the workers' "
        "MASTER_ADDR:MASTER_PORT is the store at --rdzv_endpoint");
  }
  config.node_rank.reset();
  config.store_role = JobConfig::StoreRole::HostIfLocal;
  config.store_host = endpoint.host;
  config.store_host_source = "--rdzv_endpoint";
  config.store_port = endpoint.port;
  config.master_addr = endpoint.host;
}

}  // namespace

JobConfig make_job_config(const Options& options, const EnvLookup& env, const MachineInfo& machine,
                          const std::string& random_id) {
  JobConfig config = flags_config(options, machine);
  if (options.standalone) {
    standalone_store(config, options, random_id);
    return config;
  }
  slurm_defaults(config, options, env);
  if (!config.node_rank && options.node_rank) config.node_rank = options.node_rank;
  if (config.backend == RdzvBackend::Static) {
    static_store(config, options);
  } else {
    c10d_store(config, options);
  }
  return config;
}

}  // namespace ddp::launcher
