// One DDP training step (forward, backward with the gradient all-reduce, SGD step), timed on one
// rank of a ddp job; run_ddp_step.py runs it beside PyTorch's DDP (torch_ddp_step.py).
//   ddp_step_bench --model mlp|cnn [--no-ddp] [--steps N] [--batch B]
// Prints "<median step ms>" on rank 0.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "ddp/ddp.h"

namespace {

struct Mlp : torch::nn::Module {  // 784-1024-1024-10: 1.86M parameters
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(784, 1024));
    fc2 = register_module("fc2", torch::nn::Linear(1024, 1024));
    fc3 = register_module("fc3", torch::nn::Linear(1024, 10));
  }
  at::Tensor forward(const at::Tensor& x) { return fc3(torch::relu(fc2(torch::relu(fc1(x.flatten(1)))))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

struct Cnn : torch::nn::Module {  // PyTorch's MNIST example network: 1.2M parameters
  Cnn() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3)));
    fc1 = register_module("fc1", torch::nn::Linear(9216, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 10));
  }
  at::Tensor forward(const at::Tensor& x) {
    auto h = torch::max_pool2d(torch::relu(conv2(torch::relu(conv1(x)))), 2);
    return fc2(torch::relu(fc1(h.flatten(1))));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

template <typename Forward>
double median_step_ms(Forward forward, torch::optim::Optimizer& optimizer, int steps, int batch) {
  auto x = torch::randn({batch, 1, 28, 28});
  auto y = torch::randint(0, 10, {batch});
  std::vector<double> times;
  for (int i = 0; i < steps + 5; ++i) {
    ddp::barrier();
    auto start = std::chrono::steady_clock::now();
    optimizer.zero_grad();
    torch::cross_entropy_loss(forward(x), y).backward();
    optimizer.step();
    std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
    if (i >= 5) times.push_back(elapsed.count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

template <typename M>
double run(bool use_ddp, int steps, int batch) {
  auto model = std::make_shared<M>();
  if (!use_ddp) {
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
    return median_step_ms([&](const at::Tensor& x) { return model->forward(x); }, optimizer, steps, batch);
  }
  ddp::DistributedDataParallel ddp_model(model);
  torch::optim::SGD optimizer(ddp_model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  return median_step_ms([&](const at::Tensor& x) { return ddp_model->forward(x); }, optimizer, steps, batch);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "mlp";
  bool use_ddp = true;
  int steps = 30, batch = 64;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--model" && i + 1 < argc) model = argv[++i];
    else if (flag == "--no-ddp") use_ddp = false;
    else if (flag == "--steps" && i + 1 < argc) steps = std::stoi(argv[++i]);
    else if (flag == "--batch" && i + 1 < argc) batch = std::stoi(argv[++i]);
  }
  torch::set_num_threads(1);
  torch::manual_seed(0);
  ddp::init_process_group("gloo");
  const double ms = model == "cnn" ? run<Cnn>(use_ddp, steps, batch) : run<Mlp>(use_ddp, steps, batch);
  if (ddp::get_rank() == 0) std::printf("%.3f\n", ms);
  ddp::destroy_process_group();
  return 0;
}
