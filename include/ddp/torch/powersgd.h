// PowerSGD gradient compression (PyTorch's ddp_comm_hooks/powerSGD_hook.py, 1.13): each bucket's
// matrices are all-reduced as two low-rank factors P (n x r) and Q (m x r) instead of n x m values.
//
//   auto state = std::make_shared<ddp::comm_hooks::PowerSGDState>(
//       ddp::comm_hooks::PowerSGDOptions{.matrix_approximation_rank = 2, .start_powerSGD_iter = 100});
//   ddp_model->register_comm_hook(ddp::comm_hooks::powersgd(state));
//   ...
//   checkpoints.save(step, [&](torch::serialize::OutputArchive& archive) {
//     torch::serialize::OutputArchive s; state->save(s); archive.write("powersgd", s); ...
//   });   // and state->load(...) from the same sub-archive when resuming
//
// Per bucket, as PyTorch does: the first start_powerSGD_iter iterations are a plain average
// (comm_hooks::allreduce()); afterwards the previous iteration's compression error is added
// (error feedback), each gradient of two or more dimensions is viewed as an n x m matrix M
// (first dimension x the rest) and compressed when (n + m) * r * min_compression_rate < n * m;
// the others (every bias and scalar, small matrices) are averaged uncompressed in one all-reduce.
// Q is random (the same on every rank: its seed comes from an MT19937 seeded by random_seed, which
// is numpy's RandomState, then torch's CPU generator, so ddp's Q equals PyTorch's for the same
// seed), or with warm_start the previous iteration's Q; P = M Q is all-reduced, orthogonalized,
// Q = M^T P all-reduced and averaged, and M = P Q^T. The P all-reduce starts in the hook, the
// Q all-reduce in the Future's continuation at the end of backward (in bucket order on every
// rank). The hook uses the bucket's process group.
//
// One difference from PyTorch: a one-dimensional gradient is never compressed here, whatever
// min_compression_rate; PyTorch compresses it (as an n x 1 matrix, exactly, at rank 1) when
// min_compression_rate < n / (n + 1), which also shifts the random Qs of the matrices after it.
#pragma once

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>

#include "ddp/torch/comm_hooks.h"

namespace ddp::comm_hooks {

struct PowerSGDOptions {
  int matrix_approximation_rank = 1;           // r >= 1: lower compresses more (1-4 is typical)
  std::int64_t start_powerSGD_iter = 1000;     // plain all-reduce before; > 1 with error feedback or warm start
  double min_compression_rate = 2;             // >= 0: compress a matrix only when it shrinks by more than this
  bool use_error_feedback = true;              // carry each bucket's compression error to the next iteration
  bool warm_start = true;                      // start from the previous iteration's Q (else a fresh random one)
  double orthogonalization_epsilon = 0;        // >= 0, added to each column's norm (1e-8 guards zero columns)
  std::uint32_t random_seed = 0;               // the seed of every rank's Qs (numpy's RandomState seed)
  bool batch_tensors_with_same_shape = false;  // compress same-shaped matrices in one batched product
};

// The hook's hyperparameters and its state across iterations (per bucket: the error, P and Q; the
// iteration; the random generator). One state per DDP model. Not thread-safe: the hook and its
// continuations use it on the thread that runs backward.
class PowerSGDState {
 public:
  // Throws InvalidArgument for matrix_approximation_rank < 1, start_powerSGD_iter < 0, or <= 1
  // with use_error_feedback or warm_start (DDP rebuilds its buckets after the first iteration, which
  // would invalidate what was memorized), negative or NaN min_compression_rate or epsilon.
  explicit PowerSGDState(PowerSGDOptions options = {});

  const PowerSGDOptions& options() const { return options_; }
  // Iterations (backward passes through the last bucket) seen so far.
  std::int64_t iter() const { return iter_; }
  // Elements before and after compression, summed over every compressed iteration and bucket.
  std::int64_t numel_before_compression() const { return numel_before_; }
  std::int64_t numel_after_compression() const { return numel_after_; }
  // numel_before / numel_after, 0 before any compression.
  double compression_rate() const;

  // Writes the options, the iteration, the statistics, the generator and each bucket's error, P
  // and Q. load() restores all of them (replacing the options), so that training resumes exactly;
  // it throws Error naming the key when the archive lacks one or holds a wrong type, and
  // InvalidArgument when the saved options are invalid. Resume with the same model and
  // bucket_cap_mb: a bucket whose parameters come in another order gets its error and Q
  // rearranged (same-shaped parameters are matched in their order), and the hook throws when a
  // bucket's parameter shapes differ from those its state was memorized for.
  void save(torch::serialize::OutputArchive& archive) const;
  void load(torch::serialize::InputArchive& archive);

 private:
  friend struct PowerSGDAccess;  // the hook (src/torch/comm_hooks/powersgd.cpp)

  PowerSGDOptions options_;
  std::mt19937 rng_;                                 // numpy's RandomState(random_seed): the same MT19937 and seeding
  std::map<std::size_t, at::Tensor> error_, p_, q_;  // by bucket index
  // By bucket index: the parameters' shapes that error_ and q_ were laid out for (int64: per
  // parameter its dimension count, then its sizes), so that a bucket whose parameters come in
  // another order (DDP's first iteration after a resume, before it rebuilds its buckets) gets its
  // memorized tensors rearranged.
  std::map<std::size_t, at::Tensor> layout_;
  std::int64_t iter_ = 0;
  std::int64_t numel_before_ = 0, numel_after_ = 0;
};

// PyTorch's powerSGD_hook over `state` (shared by the hook and your checkpoint code). Throws
// InvalidArgument when `state` is null.
CommHook powersgd(std::shared_ptr<PowerSGDState> state);
// The same with a state of its own (nothing to checkpoint).
CommHook powersgd(PowerSGDOptions options = {});

}  // namespace ddp::comm_hooks
