// The process-wide default group and the torch.distributed-style functions around it.
#include "ddp/distributed.h"

#include <algorithm>
#include <mutex>
#include <set>

#include "ddp/error.h"
#include "ddp/file_store.h"
#include "ddp/prefix_store.h"
#include "ddp/tcp_store.h"
#include "init/init_method.h"
#include "util/launch_env.h"
#include "backends/registry.h"
#include "store/store_variables.h"
#include "group/backend_set.h"
#include "util/log.h"
#include "util/error_kind.h"

namespace ddp {

using detail::cat;

namespace {

struct World {
  std::mutex mutex;
  std::shared_ptr<ProcessGroup> group;
  std::shared_ptr<Store> store;  // this generation's prefix of the rendezvous store
  std::string backend;
  std::string master_addr;
  int local_rank = 0;
  int local_world_size = 1;
  int generation = 0;  // init calls so far: keeps a re-initialized world's keys apart
  int subgroups = 0;   // new_group calls in this generation
};

World& world() {
  static World instance;
  return instance;
}

std::shared_ptr<ProcessGroup> require(const std::shared_ptr<ProcessGroup>& group, const char* function) {
  if (group) return group;
  std::lock_guard lock(world().mutex);
  if (!world().group) {
    throw Error(cat(function, ": the default process group is not initialized; call ddp::init_process_group() first"));
  }
  return world().group;
}

std::shared_ptr<Store> make_store(const detail::InitMethod& method, const detail::LaunchEnv& env,
                                  const std::optional<std::string>& store_protocol, int rank,
                                  std::chrono::milliseconds timeout, int generation, std::string& master_addr) {
  if (method.kind == detail::InitMethod::Kind::File) {
    auto store = std::make_shared<FileStore>(method.path);
    store->set_timeout(timeout);
    return store;
  }
  TCPStoreOptions options;
  options.timeout = timeout;
  options.rank = rank;
  if (method.kind == detail::InitMethod::Kind::Tcp) {
    options.host = method.host;
    options.port = method.port;
  } else {
    if (env.master_addr.empty()) {
      throw InvalidArgument(
          "MASTER_ADDR is not set. env:// needs MASTER_ADDR and MASTER_PORT (ddprun and torchrun set them); set "
          "them by hand (e.g. MASTER_ADDR=127.0.0.1 MASTER_PORT=29500), or pass init_method \"tcp://host:port\".");
    }
    if (!env.master_port) {
      throw InvalidArgument(
          "MASTER_PORT is not set. env:// needs MASTER_ADDR and MASTER_PORT (ddprun and torchrun set them); set "
          "MASTER_PORT to a free port, e.g. 29500.");
    }
    options.host = env.master_addr;
    options.port = *env.master_port;
  }
  // Under a launcher that hosts the store (TORCHELASTIC_USE_AGENT_STORE=True) every rank is a
  // client, and speaks the launcher's protocol: ddprun exports DDP_STORE_PROTOCOL=ddp, torchrun
  // sets nothing and hosts a PyTorch TCPStore. Otherwise rank 0 hosts a ddp store.
  const bool launcher_store = method.kind == detail::InitMethod::Kind::Env && env.use_agent_store;
  options.is_server = rank == 0 && !launcher_store;
  if (launcher_store) options.protocol = agent_store_protocol(store_protocol);
  // Rank 0's store lives as long as this init: a rank that re-initializes quickly must not join
  // the previous store while rank 0 is still tearing it down.
  if (!launcher_store) options.generation = static_cast<std::uint64_t>(generation) + 1;
  master_addr = options.host;
  return std::make_shared<TCPStore>(options);
}

}  // namespace

void init_process_group(const std::string& backend_name, InitOptions options) {
  std::lock_guard lock(world().mutex);
  World& w = world();
  if (w.group) {
    throw Error(cat("init_process_group was called twice: this process is already rank ", w.group->rank(), " of ",
                    w.group->size(), " (backend ", w.backend,
                    "). Call ddp::destroy_process_group() first to start a new group."));
  }
  try {
    const auto env = detail::read_launch_env(detail::process_env());
    detail::VariableProblems problems;
    const auto protocol =
        detail::read_variables(detail::kStoreVariables, detail::with_overrides(options.variables), problems).protocol;
    const auto method = detail::parse_init_method(options.init_method);
    if (options.timeout <= std::chrono::milliseconds(0)) {
      throw InvalidArgument(cat("the timeout must be positive, got ", options.timeout.count(), " ms"));
    }
    int world_size = options.world_size.value_or(env.world_size.value_or(-1));
    int rank = options.rank.value_or(env.rank.value_or(-1));
    if (world_size == -1 && rank == -1 && !options.store && method.kind == detail::InitMethod::Kind::Env) {
      detail::log(detail::LogLevel::Info,
                  "no RANK/WORLD_SIZE (nor Open MPI or Slurm) in the environment: running as a group of one");
      world_size = 1;
      rank = 0;
    }
    if (world_size < 1) {
      throw InvalidArgument(cat("the world size is unknown or invalid (", world_size,
                                "): set WORLD_SIZE or pass InitOptions{.world_size = N}"));
    }
    if (rank < 0 || rank >= world_size) {
      throw InvalidArgument(cat("RANK ", rank, " is outside the world of ", world_size,
                                " processes: ranks go from 0 to ", world_size - 1,
                                ". Check RANK and WORLD_SIZE (or InitOptions)."));
    }
    // "" as in PyTorch 2.x: gloo for CPU tensors, and NCCL for CUDA ones where CUDA is usable.
    const std::string backend = backend_name.empty() ? detail::default_backend_spec() : backend_name;
    detail::parse_backend_spec(backend);  // a malformed spec fails before any waiting

    std::shared_ptr<Store> store = options.store;
    std::string master_addr = env.master_addr;
    if (!store && world_size > 1) {
      store = make_store(method, env, protocol.empty() ? std::nullopt : std::optional(protocol), rank, options.timeout,
                         w.generation, master_addr);
    }
    if (store) {
      // Keys of an earlier attempt (a restart) or an earlier init in this process stay apart.
      store = std::make_shared<PrefixStore>(cat("ddp/", env.restart_count, "/", w.generation), store);
    }
    auto group = ProcessGroup::create(
        backend, store, rank, world_size,
        {.timeout = options.timeout, .name = "world", .master_addr = master_addr, .variables = options.variables});
    w.group = std::move(group);
    w.store = std::move(store);
    w.backend = backend;
    w.master_addr = master_addr;
    w.local_rank = env.local_rank.value_or(world_size == 1 ? 0 : rank);
    w.local_world_size = env.local_world_size.value_or(world_size);
    w.subgroups = 0;
    ++w.generation;
  } catch (const Error&) {
    detail::rethrow_with_context("init_process_group");
  }
}

bool is_initialized() {
  std::lock_guard lock(world().mutex);
  return world().group != nullptr;
}

std::shared_ptr<ProcessGroup> get_default_group() { return require(nullptr, "get_default_group"); }

int get_rank(const std::shared_ptr<ProcessGroup>& group) { return require(group, "get_rank")->rank(); }

int get_world_size(const std::shared_ptr<ProcessGroup>& group) { return require(group, "get_world_size")->size(); }

int get_local_rank() {
  require(nullptr, "get_local_rank");
  std::lock_guard lock(world().mutex);
  return world().local_rank;
}

int get_local_world_size() {
  require(nullptr, "get_local_world_size");
  std::lock_guard lock(world().mutex);
  return world().local_world_size;
}

std::string get_backend(const std::shared_ptr<ProcessGroup>& group) {
  return std::string(require(group, "get_backend")->backend_name());
}

void barrier(const std::shared_ptr<ProcessGroup>& group) { require(group, "barrier")->barrier(Launch::OnWait)->wait(); }

std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, std::optional<std::chrono::milliseconds> timeout,
                                        const std::string& backend) {
  auto world_group = require(nullptr, "new_group");
  std::unique_lock lock(world().mutex);
  World& w = world();
  const int world_size = world_group->size();
  std::vector<int> members = ranks;
  std::sort(members.begin(), members.end());
  if (members.empty()) throw InvalidArgument("new_group: the list of ranks is empty");
  if (std::adjacent_find(members.begin(), members.end()) != members.end()) {
    throw InvalidArgument(cat("new_group: rank ", *std::adjacent_find(members.begin(), members.end()),
                              " is listed twice in [", detail::join(ranks), "]"));
  }
  if (members.front() < 0 || members.back() >= world_size) {
    throw InvalidArgument(cat("new_group: ranks [", detail::join(ranks), "] must lie in 0 to ", world_size - 1));
  }
  const std::string name = cat("group", ++w.subgroups);
  auto it = std::find(members.begin(), members.end(), world_group->rank());
  if (it == members.end()) return nullptr;
  const int my_rank = static_cast<int>(it - members.begin());
  auto store = w.store;
  const auto options = ProcessGroupOptions{.timeout = timeout.value_or(world_group->timeout()),
                                           .name = name,
                                           .global_ranks = members,
                                           .master_addr = w.master_addr,
                                           .variables = world_group->variables()};
  const std::string group_backend = backend.empty() ? w.backend : backend;
  lock.unlock();  // joining waits for the other members
  return ProcessGroup::create(group_backend, store, my_rank, static_cast<int>(members.size()), options);
}

void destroy_process_group() {
  std::shared_ptr<ProcessGroup> group;
  std::shared_ptr<Store> store;
  {
    std::lock_guard lock(world().mutex);
    group = std::move(world().group);
    store = std::move(world().store);
  }
  // Released outside the lock: the group first finishes its queued operations.
}

}  // namespace ddp
