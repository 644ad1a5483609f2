// PyTorch's DistributedSampler for LibTorch, index for index.
//
//   ddp::init_process_group("gloo");
//   auto dataset = ddp::data::FashionMNIST().map(torch::data::transforms::Stack<>());
//   ddp::DistributedSampler sampler(*dataset.size(), {.seed = 42});   // rank, world: the process group's
//   auto loader = torch::data::make_data_loader(std::move(dataset), sampler, /*batch_size=*/64);
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     sampler.set_epoch(epoch);            // a new order every epoch, the same on every rank
//     for (auto& batch : *loader) { ... }
//   }
//
// Each rank reads a different shard of the dataset; together the shards cover it once per epoch
// (padded by repeating indices, or trimmed with drop_last, so that every rank gets as many). The
// indices are exactly those of Python's torch.utils.data.distributed.DistributedSampler with the
// same arguments, so a C++ run sees the data in the same order as the same run in Python: a
// permutation from torch.randperm(dataset_size) with a CPU generator seeded seed + epoch, padded by
// repeating it from the start (or truncated with drop_last), then indices[rank::num_replicas].
// LibTorch's own torch::data::samplers::DistributedRandomSampler does not do this (contiguous
// shards, std::shuffle order, set_epoch does not reshuffle: pytorch/pytorch#73141).
//
// Bit-exactness and its limit. Below kRandpermLargeSize (214,748,364) indices every PyTorch release
// computes the same permutation, and so does this sampler. From that size on, PyTorch 2.7 changed
// torch.randperm's CPU algorithm (pytorch/pytorch#143682: 64-bit draws, "inside-out" Fisher-Yates);
// the `randperm` option says which PyTorch to reproduce there: RandpermCompat::kModern (the
// default: PyTorch 2.7 and later) or kLegacy (PyTorch up to 2.6, LibTorch 1.13). See docs/DATA.md.
//
// Mid-epoch resume, at any world size: state() returns {epoch, seed, consumed, ...}, a small
// struct to put in a checkpoint (or use save/load with torch::serialize archives); it says which
// permutation the epoch uses (seed and epoch) and how many samples of it the whole job consumed.
// set_state() on a new sampler continues the epoch: at the same world size with exactly the next
// batch (PyTorch's sequence, index for index); at another world size the rest of the epoch is
// split over the new ranks, so that across the change every sample is seen once (see "Passes and
// positions" below). A state saved on rank 0 restores on every rank (with even shards, any
// rank's does: all ranks consume the same number of indices per step).
#pragma once

#include <torch/data/samplers/base.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace ddp {

// Dataset sizes from which PyTorch 2.7 and later use another randperm algorithm than earlier
// releases: std::numeric_limits<uint32_t>::max() / 20, as in aten/src/ATen/native/TensorFactories.cpp.
inline constexpr std::int64_t kRandpermLargeSize = 214748364;

// Which PyTorch's torch.randperm to reproduce for dataset sizes >= kRandpermLargeSize. Below that
// size both give the same permutation (the one every PyTorch release gives).
enum class RandpermCompat {
  kModern,  // PyTorch 2.7 and later: z = random64() % (i + 1), inside-out Fisher-Yates
  kLegacy,  // PyTorch 2.6 and earlier, LibTorch 1.13: z = random() % (n - i) at every size
};

struct DistributedSamplerOptions {
  std::optional<int> num_replicas;                    // processes sharing the dataset; default: the world size
  std::optional<int> rank;                            // this process's shard, in [0, num_replicas); default: the rank
  bool shuffle = true;                                // a random permutation per epoch; false: 0, 1, 2, ... in order
  std::uint64_t seed = 0;                             // the generator is seeded seed + epoch (wrapping modulo 2^64)
  bool drop_last = false;                             // trim the tail to a multiple of num_replicas instead of padding
  RandpermCompat randperm = RandpermCompat::kModern;  // only matters from kRandpermLargeSize on
  // true (PyTorch's): every rank gets as many indices, the shards evened out by repeating the
  // permutation's first indices (or by drop_last's trim). false: each rank gets exactly its share,
  // no index twice; ranks differ by at most one index (rank r of R: ceil((N - r) / R)), so the
  // ranks take different numbers of steps: with ddp::Join an epoch sees every sample exactly once.
  // drop_last must be false then.
  bool even_shards = true;
};

// Where a sampler stands in its epoch: what a checkpoint needs to resume mid-epoch, at the same
// world size or another.
struct DistributedSamplerState {
  std::int64_t epoch = 0;         // the epoch of the pass under way (or of the next pass)
  std::uint64_t seed = 0;         // the sampler's seed
  std::int64_t consumed = 0;      // indices this rank has handed out in that pass
  std::int64_t dataset_size = 0;  // checked on restore: the permutation depends on it
  int num_replicas = 1;           // the world size it was saved at
  std::int64_t start = 0;         // samples of the epoch the job had consumed when the pass began (0, but
                                  // for a pass resumed at another world size)

  // The samples of the epoch the whole job has consumed: positions [0, samples_consumed()) of its
  // sequence, min(start + consumed * num_replicas, dataset_size). Exact in rank 0's state (rank 0
  // has the most indices); in any rank's with even shards.
  std::int64_t samples_consumed() const;
};

// PyTorch's len(sampler): how many indices each rank gets per epoch. dataset_size / num_replicas
// rounded up (padding), or down with drop_last. Throws InvalidArgument as distributed_indices.
std::int64_t distributed_num_samples(std::int64_t dataset_size, int num_replicas, bool drop_last);

// Passes and positions. An epoch's sequence is its permutation repeated: position k holds
// perm[k % N] (N = dataset_size; the positions past N are the padding). A pass starts at position
// `start`, the samples the job consumed before it (0 at an epoch's start), and rank r of R reads
// positions start + r, start + r + R, start + r + 2R, ...: as many as
//   even shards:                 ceil((N - start) / R) for every rank (padding past N),
//   even shards with drop_last:  floor((N - start) / R) (the last (N - start) % R samples are not seen),
//   even_shards = false:         those below N, ceil((N - start - r) / R) (no padding).
// Every rank takes one index per position step, so after c indices each the job has consumed
// positions [start, start + c R): the state is that one number, whatever R was, and a pass at
// another R continues from it. At start 0 (any mode but even_shards = false) this is PyTorch's
// DistributedSampler, and a pass resumed at the same R is the rest of PyTorch's sequence.

// The indices rank `rank` reads in a pass from position `start` (see above). Throws
// InvalidArgument as distributed_indices, for start outside [0, dataset_size], and for
// drop_last with even_shards = false.
std::int64_t distributed_pass_size(std::int64_t dataset_size, int num_replicas, int rank, std::int64_t start,
                                   bool drop_last = false, bool even_shards = true);

// Those indices: a pure function. Time and memory as distributed_indices. Thread-safe.
std::vector<std::int64_t> distributed_pass_indices(std::int64_t dataset_size, int num_replicas, int rank,
                                                   std::uint64_t seed, std::int64_t epoch, std::int64_t start,
                                                   bool shuffle = true, bool drop_last = false, bool even_shards = true,
                                                   RandpermCompat randperm = RandpermCompat::kModern);

// The indices rank `rank` of `num_replicas` reads in epoch `epoch`: a pure function, equal to
// list(torch.utils.data.distributed.DistributedSampler(range(dataset_size), num_replicas, rank,
// shuffle, seed, drop_last)) after set_epoch(epoch). Time O(dataset_size) with shuffle (the whole
// permutation is built, as PyTorch does), O(num_samples) without; memory 8 bytes per index.
// Throws InvalidArgument: dataset_size < 0, num_replicas < 1, rank outside [0, num_replicas),
// epoch < 0. Thread-safe.
std::vector<std::int64_t> distributed_indices(std::int64_t dataset_size, int num_replicas, int rank, std::uint64_t seed,
                                              std::int64_t epoch, bool shuffle = true, bool drop_last = false,
                                              RandpermCompat randperm = RandpermCompat::kModern);

// torch.randperm(n, generator=g) for a CPU generator g seeded `seed`, as `randperm` says
// PyTorch computes it. Throws InvalidArgument for n < 0. Thread-safe.
std::vector<std::int64_t> torch_randperm(std::int64_t n, std::uint64_t seed,
                                         RandpermCompat randperm = RandpermCompat::kModern);

// A torch::data sampler (usable as make_data_loader's sampler) yielding this rank's indices.
//
// A handle: copies share one state, so the copy you keep sees what the data loader does with the
// copy it holds (make_data_loader takes its sampler by value and gives no access to it), and
// set_epoch on yours reshuffles the loader's. Every method is thread-safe.
//
// Passes. reset() starts a pass over this rank's indices of the current epoch (the data loader
// calls it at the start of every `for (auto& batch : *loader)`); next(batch_size) hands out the
// next indices until the pass is exhausted. A sampler is ready for its first pass when built.
// Starting a second pass over the same epoch with shuffle on logs a warning, once per process:
// without set_epoch every epoch sees the same order (the most common DDP data bug).
class DistributedSampler : public torch::data::samplers::Sampler<std::vector<std::size_t>> {
 public:
  // Throws InvalidArgument: num_replicas < 1, rank < 0 or >= num_replicas, dataset_size beyond
  // int64 (a negative size converted to size_t), drop_last with even_shards = false; Error:
  // num_replicas or rank not given and the default process group not initialized (call
  // ddp::init_process_group first, or pass both).
  explicit DistributedSampler(std::size_t dataset_size, DistributedSamplerOptions options = {});

  // Sets the epoch the next pass uses (PyTorch's set_epoch): seeds the permutation seed + epoch.
  // Takes effect at the next reset(), or at once when the current pass has not handed out an
  // index yet or has handed out all. Call it before every epoch with the same value on every rank.
  // Throws InvalidArgument for epoch < 0.
  void set_epoch(std::int64_t epoch);
  std::int64_t epoch() const;

  // PyTorch's len(sampler): the number of indices this rank gets per epoch.
  std::size_t size() const;
  // The number of indices this rank hands out in the pass under way (or the next): size(), but
  // for a pass resumed at another world size (its share of the rest of the epoch).
  std::size_t pass_size() const;

  int num_replicas() const;
  int rank() const;
  std::size_t dataset_size() const;

  // This rank's indices for epoch() (what a whole pass over it hands out: from the epoch's
  // start), without touching the position of the pass under way.
  std::vector<std::int64_t> indices() const;

  // Starts a new pass (see above). `new_size`: the dataset's new size; a change restarts the
  // pass at 0 and drops a pending resume. Right after set_state()/load() the first reset()
  // continues the restored pass instead of restarting it.
  void reset(torch::optional<std::size_t> new_size = torch::nullopt) override;

  // Up to `batch_size` next indices of the pass, or nullopt when it is exhausted.
  // Throws InvalidArgument for batch_size 0.
  torch::optional<std::vector<std::size_t>> next(std::size_t batch_size) override;

  // The position to checkpoint. `consumed` counts the indices next() handed out in this pass.
  // With DataLoaderOptions::workers == 0 that is what the training loop has received; with
  // workers > 0 the loader prefetches up to max_jobs batches ahead, so set
  // state.consumed = batches_done * batch_size yourself before saving.
  DistributedSamplerState state() const;

  // Restores a position: the next pass (after the reset() that the data loader's begin() calls)
  // continues epoch state.epoch with seed state.seed. Saved at this world size (num_replicas),
  // it continues that pass from index state.consumed. Saved at another, it starts a pass over
  // the rest of the epoch, from position state.samples_consumed(): the samples the old ranks did
  // not reach, split over this sampler's ranks (pass_size() says how many are this rank's).
  // Throws InvalidArgument when state.dataset_size differs from this sampler's (another
  // permutation: start the epoch afresh with set_epoch(state.epoch) instead), when epoch,
  // consumed or start is negative, num_replicas below 1, start beyond dataset_size, or consumed
  // beyond what a rank reads in that pass.
  void set_state(const DistributedSamplerState& state);

  // state()/set_state() through a torch::serialize archive (torch::save(sampler, path) works).
  // load() throws InvalidArgument as set_state, and when the archive holds no sampler state.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ddp
