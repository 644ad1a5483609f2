// The sampler's index sequence as a pure function: PyTorch's DistributedSampler.__iter__.
#include <algorithm>
#include <string>

#include "ddp/error.h"
#include "ddp/torch/distributed_sampler.h"
#include "sampler/randperm.h"
#include "sampler/shard_args.h"

namespace ddp {
namespace detail {

void check_shard_args(const char* where, std::int64_t dataset_size, int num_replicas, int rank) {
  const std::string prefix = std::string(where) + ": ";
  if (dataset_size < 0) {
    throw InvalidArgument(prefix + "dataset_size must be non-negative, got " + std::to_string(dataset_size));
  }
  if (num_replicas < 1) {
    throw InvalidArgument(prefix + "num_replicas must be at least 1, got " + std::to_string(num_replicas) +
                          ": it is the number of processes sharing the dataset (by default the world size)");
  }
  if (rank < 0) {
    throw InvalidArgument(prefix + "rank must be non-negative, got " + std::to_string(rank));
  }
  if (rank >= num_replicas) {
    throw InvalidArgument(prefix + "rank " + std::to_string(rank) + " is not less than num_replicas " +
                          std::to_string(num_replicas) + ": a rank must be in [0, " + std::to_string(num_replicas - 1) +
                          "]; pass the process's rank and the world size");
  }
}

void check_pass_args(const char* where, std::int64_t dataset_size, std::int64_t start, bool drop_last,
                     bool even_shards) {
  if (start < 0 || start > dataset_size) {
    throw InvalidArgument(std::string(where) + ": start " + std::to_string(start) + " is outside [0, " +
                          std::to_string(dataset_size) +
                          "]: it counts the samples of the epoch consumed before the pass");
  }
  if (drop_last && !even_shards) {
    throw InvalidArgument(std::string(where) +
                          ": drop_last trims the shards to one length, and even_shards = false "
                          "gives each rank exactly its share: choose one");
  }
}

void check_epoch(const char* where, std::int64_t epoch) {
  if (epoch < 0) {
    throw InvalidArgument(std::string(where) + ": epoch must be non-negative, got " + std::to_string(epoch));
  }
}

}  // namespace detail

std::vector<std::int64_t> torch_randperm(std::int64_t n, std::uint64_t seed, RandpermCompat randperm) {
  if (n < 0) throw InvalidArgument("torch_randperm: n must be non-negative, got " + std::to_string(n));
  if (randperm == RandpermCompat::kLegacy || n < kRandpermLargeSize) return detail::randperm_swap32(n, seed);
  return detail::randperm_inside_out64(n, seed);
}

std::int64_t distributed_num_samples(std::int64_t dataset_size, int num_replicas, bool drop_last) {
  detail::check_shard_args("distributed_num_samples", dataset_size, num_replicas, 0);
  // PyTorch: ceil((n - R) / R) when drop_last and R does not divide n (that is n // R, and 0 for
  // n < R), otherwise ceil(n / R).
  if (drop_last) return dataset_size / num_replicas;
  return dataset_size / num_replicas + (dataset_size % num_replicas != 0 ? 1 : 0);
}

namespace {

std::int64_t pass_size(const char* where, std::int64_t dataset_size, int num_replicas, int rank, std::int64_t start,
                       bool drop_last, bool even_shards) {
  detail::check_shard_args(where, dataset_size, num_replicas, rank);
  detail::check_pass_args(where, dataset_size, start, drop_last, even_shards);
  const std::int64_t rest = dataset_size - start;
  const std::int64_t replicas = num_replicas;
  if (!even_shards) return rest > rank ? (rest - rank + replicas - 1) / replicas : 0;
  if (drop_last) return rest / replicas;
  return (rest + replicas - 1) / replicas;
}

}  // namespace

std::int64_t distributed_pass_size(std::int64_t dataset_size, int num_replicas, int rank, std::int64_t start,
                                   bool drop_last, bool even_shards) {
  return pass_size("distributed_pass_size", dataset_size, num_replicas, rank, start, drop_last, even_shards);
}

std::vector<std::int64_t> distributed_pass_indices(std::int64_t dataset_size, int num_replicas, int rank,
                                                   std::uint64_t seed, std::int64_t epoch, std::int64_t start,
                                                   bool shuffle, bool drop_last, bool even_shards,
                                                   RandpermCompat randperm) {
  const std::int64_t count =
      pass_size("distributed_indices", dataset_size, num_replicas, rank, start, drop_last, even_shards);
  detail::check_epoch("distributed_indices", epoch);
  std::vector<std::int64_t> out(static_cast<std::size_t>(count));
  if (count == 0) return out;
  // PyTorch pads by appending indices[:padding] (or, when the padding is longer than the list,
  // the list repeated): position k of the padded list holds perm[k % n]. drop_last keeps
  // positions below total_size <= n. Rank r takes positions r, r + R, r + 2R, ... (from `start`).
  // Python adds seed + epoch as integers; manual_seed takes the sum as a uint64.
  std::vector<std::int64_t> perm;
  if (shuffle) perm = torch_randperm(dataset_size, seed + static_cast<std::uint64_t>(epoch), randperm);
  for (std::int64_t j = 0; j < count; ++j) {
    const std::int64_t position = (start + rank + j * static_cast<std::int64_t>(num_replicas)) % dataset_size;
    out[static_cast<std::size_t>(j)] = shuffle ? perm[static_cast<std::size_t>(position)] : position;
  }
  return out;
}

std::vector<std::int64_t> distributed_indices(std::int64_t dataset_size, int num_replicas, int rank, std::uint64_t seed,
                                              std::int64_t epoch, bool shuffle, bool drop_last,
                                              RandpermCompat randperm) {
  return distributed_pass_indices(dataset_size, num_replicas, rank, seed, epoch, 0, shuffle, drop_last, true, randperm);
}

std::int64_t DistributedSamplerState::samples_consumed() const {
  return std::min(start + consumed * static_cast<std::int64_t>(num_replicas), dataset_size);
}

}  // namespace ddp
