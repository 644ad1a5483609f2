// The network: two convolutions and two linear layers (PyTorch-tutorial size, 0.2M parameters),
// enough for about 90% test accuracy on Fashion-MNIST after a few epochs. net.py is its Python
// twin (the same layers under the same names): the two exchange weights (ddp::save_state_dict).
#pragma once

#include <torch/torch.h>

#include "ddp/torch/sync_batch_norm.h"

struct NetImpl : torch::nn::Module {
  // `dropout`: the probability before fc2 (0 makes a step deterministic, for comparing runs).
  explicit NetImpl(bool sync_bn = false, double dropout_p = 0.25) {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)));
    // With `sync_bn` ddp::SyncBatchNorm (statistics over every rank's batch) in place of
    // BatchNorm2d: the same parameters and buffers under the same names, so weights move between them.
    if (sync_bn) {
      sync_bn1 = register_module("bn1", ddp::SyncBatchNorm(32));
    } else {
      bn1 = register_module("bn1", torch::nn::BatchNorm2d(32));
    }
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)));
    if (sync_bn) {
      sync_bn2 = register_module("bn2", ddp::SyncBatchNorm(64));
    } else {
      bn2 = register_module("bn2", torch::nn::BatchNorm2d(64));
    }
    fc1 = register_module("fc1", torch::nn::Linear(64 * 7 * 7, 64));
    dropout = register_module("dropout", torch::nn::Dropout(dropout_p));
    fc2 = register_module("fc2", torch::nn::Linear(64, 10));
  }

  // [N, 1, 28, 28] normalized images -> [N, 10] logits.
  at::Tensor forward(at::Tensor x) {
    x = conv1(x);
    x = torch::max_pool2d(torch::relu(bn1 ? bn1(x) : sync_bn1(x)), 2);  // 32 x 14 x 14
    x = conv2(x);
    x = torch::max_pool2d(torch::relu(bn2 ? bn2(x) : sync_bn2(x)), 2);  // 64 x 7 x 7
    return fc2(dropout(torch::relu(fc1(x.flatten(1)))));
  }

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};        // without sync_bn
  ddp::SyncBatchNorm sync_bn1{nullptr}, sync_bn2{nullptr};  // with it
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(Net);
