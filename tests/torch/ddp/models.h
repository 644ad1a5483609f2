// Small models for the DDP tests, and a single-process reference trainer.
#pragma once

#include <torch/torch.h>

namespace ddp::test {

struct Mlp : torch::nn::Module {
  Mlp() {
    a = register_module("a", torch::nn::Linear(20, 32));
    b = register_module("b", torch::nn::Linear(32, 16));
    c = register_module("c", torch::nn::Linear(16, 4));
  }
  at::Tensor forward(const at::Tensor& x) { return c(torch::relu(b(torch::relu(a(x))))); }
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
};

struct ConvBn : torch::nn::Module {
  ConvBn() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)));
    bn = register_module("bn", torch::nn::BatchNorm2d(4));
    fc = register_module("fc", torch::nn::Linear(4 * 6 * 6, 4));
  }
  at::Tensor forward(const at::Tensor& x) { return fc(torch::relu(bn(conv(x.view({-1, 1, 8, 8})))).flatten(1)); }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Linear fc{nullptr};
};

// Two heads; `use_b` picks the second one, leaving the first head's parameters unused.
struct Branchy : torch::nn::Module {
  Branchy() {
    trunk = register_module("trunk", torch::nn::Linear(20, 16));
    head_a = register_module("head_a", torch::nn::Linear(16, 4));
    head_b = register_module("head_b", torch::nn::Linear(16, 4));
  }
  at::Tensor forward(const at::Tensor& x, bool use_b) {
    auto h = torch::relu(trunk(x));
    return use_b ? head_b(h) : head_a(h);
  }
  torch::nn::Linear trunk{nullptr}, head_a{nullptr}, head_b{nullptr};
};

// The same Linear registered twice: its parameters are tied.
struct Tied : torch::nn::Module {
  Tied() {
    first = register_module("first", torch::nn::Linear(20, 20));
    again = register_module("again", first);
    out = register_module("out", torch::nn::Linear(20, 4));
  }
  at::Tensor forward(const at::Tensor& x) { return out(torch::tanh(again(torch::tanh(first(x))))); }
  torch::nn::Linear first{nullptr}, again{nullptr}, out{nullptr};
};

// The batch of `step`: `rows` rows of 20 features (64 for ConvBn's 8x8 images) and labels.
inline std::pair<at::Tensor, at::Tensor> batch(int step, int rows, int features = 20) {
  auto gen = at::detail::createCPUGenerator(1000 + step);
  auto x = at::randn({rows, features}, gen);
  auto y = at::randint(0, 4, {rows}, gen);
  return {x, y};
}

// max |a - b| / max |b| over every parameter: 0 for identical models.
inline double max_relative_difference(torch::nn::Module& a, torch::nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  double worst = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    double diff = (pa[i] - pb[i]).abs().max().item<double>();
    double scale = pb[i].abs().max().item<double>() + 1e-12;
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

}  // namespace ddp::test
