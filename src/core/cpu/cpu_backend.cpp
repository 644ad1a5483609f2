#include "cpu/cpu_backend.h"

#include <unistd.h>

#include <chrono>
#include <string>

#include "ddp/error.h"
#include "ddp/prefix_store.h"
#include "ddp/store.h"
#include "cpu/hierarchy.h"
#include "gloo/gloo_backend.h"
#include "gloo/tuning.h"
#include "shm/host_collectives.h"
#include "shm/rendezvous.h"
#include "shm/topology.h"
#include "shm/tuning.h"
#include "util/log.h"
#include "util/strings.h"
#include "util/deadline.h"

namespace ddp::detail {
namespace {

using shm::HostCollectives;

class CpuBackend final : public Backend {
 public:
  // `hierarchy` (several hosts) refers to `host` and `across`.
  CpuBackend(int rank, int size, std::unique_ptr<Backend> gloo, std::unique_ptr<Backend> across,
             std::unique_ptr<HostCollectives> host, std::unique_ptr<Hierarchy> hierarchy)
      : rank_(rank),
        size_(size),
        gloo_(std::move(gloo)),
        across_(std::move(across)),
        host_(std::move(host)),
        hierarchy_(std::move(hierarchy)) {}

  std::string_view name() const override { return "gloo"; }
  int hosts() const override { return gloo_->hosts(); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool accepts(const Device& device) const override { return device.is_cpu(); }

  // On one host every reduction is native; across hosts, what gloo can do.
  bool supports(DataType dtype, ReduceOp op) const override { return !hierarchy_ || gloo_->supports(dtype, op); }

  void all_reduce(Buffer data, ReduceOp op, Deadline deadline) override {
    if (!hierarchy_) return host_->all_reduce(data, op, deadline);
    hierarchy_->all_reduce(data, op, deadline);
  }

  void broadcast(Buffer data, int root, Deadline deadline) override {
    if (!hierarchy_) return host_->broadcast(data, root, deadline);
    hierarchy_->broadcast(data, root, deadline);
  }

  void reduce(Buffer data, ReduceOp op, int root, Deadline deadline) override {
    if (!hierarchy_) return host_->reduce(data, op, root, deadline);
    gloo_->reduce(data, op, root, deadline);
  }

  void all_gather(Buffer input, Buffer output, Deadline deadline) override {
    if (!hierarchy_) return host_->all_gather(input, output, deadline);
    hierarchy_->all_gather(input, output, deadline);
  }

  void reduce_scatter(Buffer input, Buffer output, ReduceOp op, Deadline deadline) override {
    if (!hierarchy_) return host_->reduce_scatter(input, output, op, deadline);
    hierarchy_->reduce_scatter(input, output, op, deadline);
  }

  void barrier(Deadline deadline) override {
    if (!hierarchy_) return host_->barrier(deadline);
    gloo_->barrier(deadline);
  }

  void gather(Buffer input, Buffer output, int root, Deadline deadline) override {
    gloo_->gather(input, output, root, deadline);
  }
  void scatter(Buffer input, Buffer output, int root, Deadline deadline) override {
    gloo_->scatter(input, output, root, deadline);
  }
  void all_to_all(Buffer input, Buffer output, Deadline deadline) override {
    gloo_->all_to_all(input, output, deadline);
  }
  Waiter post_send(Buffer data, int dst, std::uint32_t tag) override { return gloo_->post_send(data, dst, tag); }
  Waiter post_recv(Buffer data, int src, std::uint32_t tag) override { return gloo_->post_recv(data, src, tag); }

  std::shared_ptr<void> allocate_shared(std::size_t bytes) override {
    return host_ ? host_->allocate_shared(bytes) : nullptr;
  }

  void abort() noexcept override {
    if (host_) host_->abort();
    gloo_->abort();
    if (across_) across_->abort();
  }

 private:
  int rank_;
  int size_;
  std::unique_ptr<Backend> gloo_;  // the whole group
  // Several hosts: striped, the ranks of this rank's index on every host (its lane); else one rank
  // per host, on host leaders only.
  std::unique_ptr<Backend> across_;
  std::unique_ptr<HostCollectives> host_;  // this host's ranks (when more than one)
  std::unique_ptr<Hierarchy> hierarchy_;   // several hosts
};

// Group rank 0's `mine` under `key`: a setting that decides which algorithm runs, so every rank
// must use the same one. Rank 0 publishes its own; the others read it.
std::string rank_zero_value(const BackendContext& ctx, const std::string& key, std::string mine,
                            std::chrono::steady_clock::time_point deadline) {
  if (ctx.rank == 0) {
    ctx.store->set(key, mine);
    return mine;
  }
  return ctx.store->get(key, ms_until(deadline));
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const BackendContext& ctx) {
  const auto variables = with_overrides(ctx.variables);
  VariableProblems problems;
  const shm::Tuning tuning = read_variables(shm::kShmVariables, variables, problems);
  const GlooTuning gloo_tuning = read_variables(kGlooVariables, variables, problems);
  problems.log_warnings();
  const auto deadline = std::chrono::steady_clock::now() + ctx.timeout;
  const shm::Identity me{tuning.enabled, ::getpid(),
                         tuning.host_id.empty() ? shm::local_host_identity() : tuning.host_id,
                         shm::local_network_identity()};
  const auto ids = shm::exchange_identities(*ctx.store, ctx.rank, ctx.size, me, deadline);
  shm::Plan plan = shm::make_plan(ids, ctx.rank);

  std::unique_ptr<HostCollectives> host;
  if (plan.shm) {
    std::string failure;
    if (plan.my_host().size() > 1) {
      try {
        host = shm::join_host_segment(*ctx.store, plan, ids, tuning, deadline);
      } catch (const std::exception& e) {
        failure = e.what();
      }
    }
    const auto failures = shm::agree_on_setup(*ctx.store, ctx.rank, ctx.size, failure, deadline);
    if (!failures.empty()) {
      if (ctx.rank == 0) {
        log(LogLevel::Warn, "shared memory is off for this group of ", ctx.size,
            " ranks, which uses gloo alone: ", join(failures, "; "), ". Set DDP_SHM=0 to silence this.");
      }
      host.reset();
      plan.shm = false;
    } else if (host) {
      host->close_descriptor();  // every peer has mapped it
    }
  }

  const GlooPlacement placement{.one_network = shm::one_network(ids), .hosts = static_cast<int>(plan.hosts.size())};
  const std::string doubling_key = "gloo_doubling_bytes";
  const auto doubling =
      parse_int(rank_zero_value(ctx, doubling_key, std::to_string(gloo_tuning.doubling_bytes), deadline));
  if (!doubling || *doubling < 0) throw InvalidArgument(cat("gloo: rank 0 published a malformed ", doubling_key));
  const auto doubling_bytes = static_cast<std::size_t>(*doubling);
  auto gloo = make_gloo_backend(ctx, placement, doubling_bytes);
  if (!plan.shm) return gloo;
  // Across hosts, every host with the same number L > 1 of ranks: L lanes (local index l of every
  // host), all ranks taking part. Otherwise one rank per host carries the host's whole buffer.
  const bool striped = !plan.single_host() && shm::equal_hosts(plan) && plan.my_host().size() > 1;
  std::unique_ptr<Backend> across;
  if (!plan.single_host() && (striped || plan.local == 0)) {
    const std::string prefix = striped ? "lane" + std::to_string(plan.local) : "leaders";
    BackendContext across_ctx{std::make_shared<PrefixStore>(prefix, ctx.store),
                              plan.host,
                              static_cast<int>(plan.hosts.size()),
                              ctx.timeout,
                              ctx.master_addr,
                              ctx.variables};
    GlooPlacement across_placement = placement;
    for (const auto& ranks : plan.hosts) across_placement.group_ranks.push_back(ranks[striped ? plan.local : 0]);
    across = make_gloo_backend(across_ctx, across_placement, doubling_bytes);
  }
  if (plan.single_host()) {
    log(LogLevel::Debug, "rank ", ctx.rank, ": shared memory with ", plan.my_host().size(), " ranks on this host");
    return std::make_unique<CpuBackend>(ctx.rank, ctx.size, std::move(gloo), nullptr, std::move(host), nullptr);
  }
  // Every rank must take the same path and chunks for the same buffer: rank 0's thresholds hold.
  Hierarchy::Thresholds thresholds{tuning.stripe_bytes, tuning.stripe_chunk_bytes, tuning.gather_chunk_bytes,
                                   tuning.gather_stripe_bytes};
  thresholds = decode_thresholds(rank_zero_value(ctx, "hierarchy_thresholds", encode_thresholds(thresholds), deadline));
  if (plan.my_host().size() < 2) host.reset();
  log(LogLevel::Debug, "rank ", ctx.rank, ": shared memory with ", plan.my_host().size(), " ranks on this host, ",
      plan.hosts.size(), " hosts", striped ? ", striped over every rank's lane" : ", through the hosts' first ranks");
  auto hierarchy = std::make_unique<Hierarchy>(plan, host.get(), across.get(), thresholds);
  return std::make_unique<CpuBackend>(ctx.rank, ctx.size, std::move(gloo), std::move(across), std::move(host),
                                      std::move(hierarchy));
}

std::vector<VariableInfo> cpu_backend_variables() {
  auto all = infos_of(shm::kShmVariables);
  const auto gloo = infos_of(kGlooVariables);
  all.insert(all.end(), gloo.begin(), gloo.end());
  return all;
}

}  // namespace ddp::detail
