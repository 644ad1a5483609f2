// What the README's "API at a glance" block takes as given (a model, a loss, tensors, a dataset's
// size). The block itself is compiled as written, with <ddp/ddp.h> alone for every ddp name:
// install_test.sh cuts it out of README.md into readme_api.cpp around this prelude.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace readme {

struct Given {
  std::shared_ptr<torch::nn::LinearImpl> model = std::make_shared<torch::nn::LinearImpl>(4, 2);
  at::Tensor tensor = torch::ones({4});
  at::Tensor output = torch::zeros({4});
  at::Tensor loss = torch::ones({1}, torch::requires_grad());
  std::vector<at::Tensor> outputs{torch::zeros({4})};
  std::vector<at::Tensor> inputs{torch::ones({4})};
  std::vector<at::Tensor> outs{torch::zeros({4})};
  std::vector<at::Tensor> ins{torch::ones({4})};
  std::size_t dataset_size = 60000;
};

}  // namespace readme
