// Argument checks shared by distributed_indices and DistributedSampler: one wording everywhere.
#pragma once

#include <cstdint>

namespace ddp::detail {

// Throws InvalidArgument naming `where` ("DistributedSampler", "distributed_indices") when
// dataset_size < 0, num_replicas < 1, or rank is outside [0, num_replicas).
void check_shard_args(const char* where, std::int64_t dataset_size, int num_replicas, int rank);

// Throws InvalidArgument when `start` (the samples of the epoch a pass begins after) is outside
// [0, dataset_size], or for drop_last with even_shards = false.
void check_pass_args(const char* where, std::int64_t dataset_size, std::int64_t start, bool drop_last,
                     bool even_shards);

// Throws InvalidArgument when epoch < 0.
void check_epoch(const char* where, std::int64_t epoch);

}  // namespace ddp::detail
