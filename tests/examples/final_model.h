// The trained network in the newest usable checkpoint of the main job (its parameters, then its
// buffers), to compare runs tensor by tensor.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "ddp/torch/checkpoint.h"
#include "fashion_mnist/net.h"

namespace ddp::test {

inline std::vector<at::Tensor> final_model(const std::string& checkpoint_dir) {
  std::vector<at::Tensor> tensors;
  Checkpoints({.directory = checkpoint_dir}).load_latest([&](torch::serialize::InputArchive& archive) {
    torch::serialize::InputArchive model;
    archive.read("model", model);
    Net net;
    net->load(model);
    for (const auto& p : net->parameters()) tensors.push_back(p);
    for (const auto& b : net->buffers()) tensors.push_back(b);
  });
  return tensors;
}

}  // namespace ddp::test
