// The network: two convolutions and two linear layers (PyTorch-tutorial size, 0.2M parameters),
// enough for about 90% test accuracy on Fashion-MNIST after a few epochs. net.py is its Python
// twin (the same layers under the same names): the two exchange weights (ddp::save_state_dict).
#pragma once

#include <torch/torch.h>

#include "ddp/torch/sync_batch_norm.h"

// BatchNorm2d, or with `sync` ddp::SyncBatchNorm (statistics over every rank's batch): the same
// parameters and buffers under the same names, so checkpoints move between the two.
inline torch::nn::AnyModule batch_norm(int channels, bool sync) {
  if (sync) return torch::nn::AnyModule(ddp::SyncBatchNorm(channels));
  return torch::nn::AnyModule(torch::nn::BatchNorm2d(channels));
}

struct NetImpl : torch::nn::Module {
  explicit NetImpl(bool sync_bn = false) {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)));
    bn1 = batch_norm(32, sync_bn);
    register_module("bn1", bn1.ptr());
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)));
    bn2 = batch_norm(64, sync_bn);
    register_module("bn2", bn2.ptr());
    fc1 = register_module("fc1", torch::nn::Linear(64 * 7 * 7, 64));
    dropout = register_module("dropout", torch::nn::Dropout(0.25));
    fc2 = register_module("fc2", torch::nn::Linear(64, 10));
  }

  // [N, 1, 28, 28] normalized images -> [N, 10] logits.
  at::Tensor forward(at::Tensor x) {
    x = torch::max_pool2d(torch::relu(bn1.forward(conv1(x))), 2);  // 32 x 14 x 14
    x = torch::max_pool2d(torch::relu(bn2.forward(conv2(x))), 2);  // 64 x 7 x 7
    return fc2(dropout(torch::relu(fc1(x.flatten(1)))));
  }

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::AnyModule bn1, bn2;
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(Net);
