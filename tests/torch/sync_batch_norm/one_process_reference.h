// What the SyncBatchNorm tests compare against: one process running plain BatchNorm on the
// concatenated batch of a group's ranks. Every rank computes it itself, from every rank's seeded
// inputs. Used by sync_batch_norm_test.cpp (CPU) and tests/torch/cuda (CUDA).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>
#include <vector>

#include "ddp/ddp.h"

namespace ddp::test {

struct BatchNormScenario {
  int id;
  std::vector<int> members;        // global ranks, in group order
  std::vector<std::int64_t> rows;  // per member
  std::vector<std::int64_t> tail;  // an input's shape after [N, C]
  std::int64_t channels;
  c10::optional<double> momentum;
  bool affine = true;
  bool channels_last = false;         // 4-d inputs only
  at::ScalarType dtype = at::kFloat;  // the inputs' (the layer's parameters stay float32)
};

inline double relative(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 && b.numel() == 0) return 0;
  const at::Tensor x = a.to(at::kDouble), y = b.to(at::kDouble);
  return (x - y).abs().max().item<double>() / (y.abs().max().item<double>() + 1e-12);
}

// Trains a SyncBatchNorm (in DDP, on `group`) and, beside it, one BatchNorm on the whole
// group's batch, `steps` SGD steps on `device`; checks outputs, gradients and running statistics.
template <typename BatchNorm>
void expect_matches_one_process(const BatchNormScenario& s, const std::shared_ptr<ProcessGroup>& group, int steps,
                                const torch::Device& device = torch::kCPU, double tolerance = 1e-5) {
  const int me = group->rank(), world = group->size();
  torch::nn::BatchNormOptions options(s.channels);
  options.momentum(s.momentum).affine(s.affine);
  SyncBatchNorm bn(options, group);
  BatchNorm reference(options);
  bn->to(device);
  reference->to(device);
  if (s.affine) {
    torch::NoGradGuard no_grad;
    torch::manual_seed(7);
    bn->weight.copy_(torch::rand({s.channels}) + 0.5);
    bn->bias.copy_(torch::randn({s.channels}));
    reference->weight.copy_(bn->weight);
    reference->bias.copy_(bn->bias);
  }
  // Without affine parameters there is nothing for DDP or an optimizer: the layer alone.
  std::optional<DistributedDataParallel<SyncBatchNormImpl>> model;
  std::optional<torch::optim::SGD> optimizer, reference_optimizer;
  if (s.affine) {
    model.emplace(bn, DDPOptions{.process_group = group});
    optimizer.emplace((*model)->parameters(), 0.1);
    reference_optimizer.emplace(reference->parameters(), 0.1);
  }
  std::int64_t total = 0;
  for (auto n : s.rows) total += n;
  for (int step = 0; step < steps; ++step) {
    std::vector<at::Tensor> xs, ws;
    for (int m = 0; m < world; ++m) {
      torch::manual_seed(1000 * s.id + 10 * m + step);
      std::vector<std::int64_t> shape{s.rows[m], s.channels};
      shape.insert(shape.end(), s.tail.begin(), s.tail.end());
      const auto layout = s.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
      xs.push_back((torch::randn(shape) * 2 + 0.5).to(device, s.dtype).contiguous(layout));
      ws.push_back(torch::randn(shape).to(device, s.dtype).contiguous(layout));  // the loss: sum(out * w) / count
    }
    const double scale = static_cast<double>(world) / static_cast<double>(total);  // DDP averages over world
    auto x = xs[me].clone().requires_grad_(true);
    if (optimizer) optimizer->zero_grad();
    auto out = model ? (*model)->forward(x) : bn->forward(x);
    ((out * ws[me]).sum() * scale).backward();
    if (optimizer) optimizer->step();

    auto whole = torch::cat(xs).requires_grad_(true);
    if (reference_optimizer) reference_optimizer->zero_grad();
    auto expected = reference->forward(whole);
    ((expected * torch::cat(ws)).sum() / static_cast<double>(total)).backward();
    if (reference_optimizer) reference_optimizer->step();

    std::int64_t offset = 0;
    for (int m = 0; m < me; ++m) offset += s.rows[m];
    const std::string where = "scenario " + std::to_string(s.id) + ", step " + std::to_string(step);
    EXPECT_LT(relative(out, expected.narrow(0, offset, s.rows[me])), tolerance) << where << ": outputs";
    EXPECT_LT(relative(x.grad() / world, whole.grad().narrow(0, offset, s.rows[me])), tolerance)
        << where << ": input gradients";
    if (s.affine) {
      EXPECT_LT(relative(bn->weight.grad(), reference->weight.grad()), tolerance) << where << ": weight gradient";
      EXPECT_LT(relative(bn->bias.grad(), reference->bias.grad()), tolerance) << where << ": bias gradient";
    }
    EXPECT_LT(relative(bn->running_mean, reference->running_mean), tolerance) << where << ": running mean";
    EXPECT_LT(relative(bn->running_var, reference->running_var), tolerance) << where << ": running variance";
    EXPECT_EQ(bn->num_batches_tracked.item<std::int64_t>(), step + 1);
  }
  if (s.affine) {
    EXPECT_LT(relative(bn->weight, reference->weight), tolerance) << "trained weight";
  }
}

}  // namespace ddp::test
