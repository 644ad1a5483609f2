// DistributedSampler: the pass and resume bookkeeping around distributed_indices.
#include "ddp/torch/distributed_sampler.h"

#include <torch/serialize/archive.h>

#include <limits>
#include <mutex>
#include <string>

#include "ddp/distributed.h"
#include "ddp/error.h"
#include "sampler/sampler_warnings.h"
#include "sampler/shard_args.h"

namespace ddp {
namespace {

constexpr const char* kWhere = "DistributedSampler";

// Archive keys (attribute names: no dots).
constexpr const char* kKeyEpoch = "ddp_distributed_sampler_epoch";
constexpr const char* kKeySeed = "ddp_distributed_sampler_seed";
constexpr const char* kKeyConsumed = "ddp_distributed_sampler_consumed";
constexpr const char* kKeyDatasetSize = "ddp_distributed_sampler_dataset_size";
constexpr const char* kKeyNumReplicas = "ddp_distributed_sampler_num_replicas";
constexpr const char* kKeyStart = "ddp_distributed_sampler_start";  // absent in archives of earlier versions: 0

std::int64_t checked_size(std::size_t dataset_size) {
  if (dataset_size > static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max())) {
    throw InvalidArgument(std::string(kWhere) + ": dataset_size " + std::to_string(dataset_size) +
                          " does not fit in int64 (a negative size converted to size_t?)");
  }
  return static_cast<std::int64_t>(dataset_size);
}

}  // namespace

struct DistributedSampler::Impl {
  mutable std::mutex mutex;
  // Configuration.
  std::int64_t dataset_size = 0;
  int num_replicas = 1;
  int rank = 0;
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool drop_last = false;
  bool even_shards = true;
  RandpermCompat randperm = RandpermCompat::kModern;
  std::int64_t num_samples = 0;  // this rank's indices of a whole epoch
  // Position.
  std::int64_t epoch = 0;                     // set_epoch's value: the epoch of the next pass
  std::int64_t start = 0;                     // the epoch position the current pass begins at
  std::optional<std::int64_t> pass_epoch;     // the epoch `indices` hold; unset: not computed yet
  std::int64_t pass_start = 0;                // the start `indices` hold
  std::vector<std::int64_t> indices;          // this rank's indices of the pass
  std::int64_t consumed = 0;                  // indices handed out in the current pass
  bool resume_pending = false;                // set_state ran: the next reset() continues the pass
  std::optional<std::int64_t> last_iterated;  // the epoch of the last pass that handed out an index

  std::int64_t size_from(std::int64_t from) const {
    return distributed_pass_size(dataset_size, num_replicas, rank, from, drop_last, even_shards);
  }

  std::vector<std::int64_t> compute(std::int64_t for_epoch, std::int64_t from) const {
    return distributed_pass_indices(dataset_size, num_replicas, rank, seed, for_epoch, from, shuffle, drop_last,
                                    even_shards, randperm);
  }

  bool cached(std::int64_t for_epoch, std::int64_t from) const { return pass_epoch == for_epoch && pass_start == from; }

  // The pass under way keeps its indices (a set_epoch mid-pass applies at the next pass).
  void ensure_indices() {
    if (pass_epoch) return;
    indices = compute(epoch, start);
    pass_epoch = epoch;
    pass_start = start;
  }

  void forget_indices() {
    pass_epoch.reset();
    indices.clear();
    indices.shrink_to_fit();
  }
};

DistributedSampler::DistributedSampler(std::size_t dataset_size, DistributedSamplerOptions options)
    : impl_(std::make_shared<Impl>()) {
  Impl& s = *impl_;
  s.dataset_size = checked_size(dataset_size);
  if (!options.num_replicas || !options.rank) {
    if (!is_initialized()) {
      throw Error(std::string(kWhere) +
                  ": num_replicas and rank default to the world size and rank of the default process "
                  "group, which is not initialized: call ddp::init_process_group(...) before building the "
                  "sampler, or pass both .num_replicas and .rank");
    }
  }
  s.num_replicas = options.num_replicas ? *options.num_replicas : get_world_size();
  s.rank = options.rank ? *options.rank : get_rank();
  detail::check_shard_args(kWhere, s.dataset_size, s.num_replicas, s.rank);
  s.shuffle = options.shuffle;
  s.seed = options.seed;
  s.drop_last = options.drop_last;
  s.even_shards = options.even_shards;
  detail::check_pass_args(kWhere, s.dataset_size, 0, s.drop_last, s.even_shards);
  s.randperm = options.randperm;
  s.num_samples = s.size_from(0);
}

void DistributedSampler::set_epoch(std::int64_t epoch) {
  detail::check_epoch("DistributedSampler::set_epoch", epoch);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl& s = *impl_;
  if (epoch == s.epoch) return;  // keeps a restored position: resume loops call set_epoch(state.epoch)
  s.epoch = epoch;
  if (s.resume_pending || s.consumed == 0 || s.consumed >= s.size_from(s.start)) {
    // Nothing of the current pass handed out yet, or nothing left to hand out (or a restored
    // position for another epoch): the new epoch applies at once.
    s.resume_pending = false;
    s.consumed = 0;
    s.start = 0;
    s.forget_indices();
  }
}

std::int64_t DistributedSampler::epoch() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->epoch;
}

std::size_t DistributedSampler::size() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return static_cast<std::size_t>(impl_->num_samples);
}

std::size_t DistributedSampler::pass_size() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return static_cast<std::size_t>(impl_->size_from(impl_->start));
}

int DistributedSampler::num_replicas() const { return impl_->num_replicas; }  // fixed after construction
int DistributedSampler::rank() const { return impl_->rank; }

std::size_t DistributedSampler::dataset_size() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return static_cast<std::size_t>(impl_->dataset_size);
}

std::vector<std::int64_t> DistributedSampler::indices() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const Impl& s = *impl_;
  if (s.cached(s.epoch, 0)) return s.indices;
  return s.compute(s.epoch, 0);
}

void DistributedSampler::reset(torch::optional<std::size_t> new_size) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl& s = *impl_;
  if (new_size && static_cast<std::int64_t>(*new_size) != s.dataset_size) {
    const std::int64_t size = checked_size(*new_size);
    s.dataset_size = size;
    s.start = 0;
    s.num_samples = s.size_from(0);
    s.resume_pending = false;
    s.last_iterated.reset();  // another dataset: another order, nothing to warn about
    s.forget_indices();
  }
  if (s.resume_pending) {  // the data loader's begin() after set_state: continue the restored pass
    s.resume_pending = false;
    return;
  }
  if (s.shuffle && s.last_iterated == s.epoch) detail::warn_epoch_not_advanced(s.epoch);
  s.consumed = 0;
  s.start = 0;
  if (!s.cached(s.epoch, 0)) s.forget_indices();  // same epoch from its start: the cached indices still hold
}

torch::optional<std::vector<std::size_t>> DistributedSampler::next(std::size_t batch_size) {
  if (batch_size == 0) {
    throw InvalidArgument("DistributedSampler::next: batch_size must be at least 1, got 0");
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl& s = *impl_;
  s.ensure_indices();
  const auto total = static_cast<std::int64_t>(s.indices.size());
  if (s.consumed >= total) return torch::nullopt;
  const std::int64_t end =
      s.consumed + std::min<std::int64_t>(static_cast<std::int64_t>(batch_size), total - s.consumed);
  std::vector<std::size_t> batch;
  batch.reserve(static_cast<std::size_t>(end - s.consumed));
  for (std::int64_t i = s.consumed; i < end; ++i) batch.push_back(static_cast<std::size_t>(s.indices[i]));
  s.consumed = end;
  s.resume_pending = false;
  s.last_iterated = s.pass_epoch;
  return batch;
}

DistributedSamplerState DistributedSampler::state() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  const Impl& s = *impl_;
  DistributedSamplerState state;
  // Mid-pass (or at its end), the pass's epoch; otherwise the epoch the next pass will use.
  state.epoch = (s.consumed > 0 && s.pass_epoch) ? *s.pass_epoch : s.epoch;
  state.seed = s.seed;
  state.consumed = s.consumed;
  state.dataset_size = s.dataset_size;
  state.num_replicas = s.num_replicas;
  state.start = s.start;
  return state;
}

void DistributedSampler::set_state(const DistributedSamplerState& state) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Impl& s = *impl_;
  const std::string prefix = "DistributedSampler::set_state: ";
  if (state.dataset_size != s.dataset_size) {
    throw InvalidArgument(prefix + "the state was saved with dataset_size " + std::to_string(state.dataset_size) +
                          ", this sampler has " + std::to_string(s.dataset_size) +
                          ": the epoch's permutation depends on it, so its position means nothing here. To start "
                          "that epoch afresh, call set_epoch(state.epoch) instead");
  }
  detail::check_epoch("DistributedSampler::set_state", state.epoch);
  if (state.num_replicas < 1) {
    throw InvalidArgument(prefix + "num_replicas " + std::to_string(state.num_replicas) +
                          " is not a world size (at least 1)");
  }
  if (state.start < 0 || state.start > s.dataset_size) {
    throw InvalidArgument(prefix + "start " + std::to_string(state.start) + " is outside [0, " +
                          std::to_string(s.dataset_size) + "], the samples of an epoch");
  }
  // Rank 0 of the world it was saved at reads the most indices.
  const std::int64_t most =
      distributed_pass_size(s.dataset_size, state.num_replicas, 0, state.start, s.drop_last, s.even_shards);
  if (state.consumed < 0 || state.consumed > most) {
    throw InvalidArgument(
        prefix + "consumed " + std::to_string(state.consumed) + " is outside [0, " + std::to_string(most) +
        "], the indices a rank reads " +
        (state.start == 0 ? std::string("per epoch") : "in a pass from sample " + std::to_string(state.start)));
  }
  // The same world: that very pass, from its next index. Another: a pass over the rest.
  const bool same_world = state.num_replicas == s.num_replicas;
  const std::int64_t start = same_world ? state.start : state.samples_consumed();
  if (state.seed != s.seed || !s.cached(state.epoch, start)) s.forget_indices();  // else the cache holds
  s.seed = state.seed;
  s.epoch = state.epoch;
  s.start = start;
  s.consumed = same_world ? state.consumed : 0;
  s.resume_pending = true;
  s.last_iterated = state.samples_consumed() > 0 ? std::optional<std::int64_t>(state.epoch) : std::nullopt;
}

void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  const DistributedSamplerState st = state();
  archive.write(kKeyEpoch, c10::IValue(st.epoch));
  archive.write(kKeySeed, c10::IValue(static_cast<std::int64_t>(st.seed)));  // the bits, as int64
  archive.write(kKeyConsumed, c10::IValue(st.consumed));
  archive.write(kKeyDatasetSize, c10::IValue(st.dataset_size));
  archive.write(kKeyNumReplicas, c10::IValue(static_cast<std::int64_t>(st.num_replicas)));
  archive.write(kKeyStart, c10::IValue(st.start));
}

void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  auto read = [&](const char* key) -> std::int64_t {
    c10::IValue value;
    if (!archive.try_read(key, value) || !value.isInt()) {
      throw InvalidArgument(std::string("DistributedSampler::load: the archive holds no DistributedSampler "
                                        "state (no integer '") +
                            key + "'): was it written by DistributedSampler::save?");
    }
    return value.toInt();
  };
  DistributedSamplerState st;
  st.epoch = read(kKeyEpoch);
  st.seed = static_cast<std::uint64_t>(read(kKeySeed));
  st.consumed = read(kKeyConsumed);
  st.dataset_size = read(kKeyDatasetSize);
  st.num_replicas = static_cast<int>(read(kKeyNumReplicas));
  c10::IValue start;
  if (archive.try_read(kKeyStart, start) && start.isInt()) st.start = start.toInt();
  set_state(st);
}

}  // namespace ddp
