// The Fashion-MNIST example's training step on the CPU with and without --amp (bfloat16
// autocast around forward and loss), timed on one rank of a ddp job: forward, backward with
// DDP's all-reduce, SGD with momentum. The two kinds of step alternate in blocks of --steps, for
// --rounds rounds, so that drift in the machine's speed affects both alike; rank 0 prints
// "<median fp32 ms> <median bf16 ms>". run_amp_zero.py runs it at several world sizes.
//   amp_step_bench [--steps N] [--rounds R] [--batch B] [--threads T]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "ddp/ddp.h"
#include "net.h"  // examples/fashion_mnist: the example's network

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 20, rounds = 5, batch = 64, threads = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "amp_step_bench: %s needs a value\n", flag.c_str());
      return 2;
    }
    const int value = std::stoi(argv[++i]);
    if (flag == "--steps") steps = value;
    else if (flag == "--rounds") rounds = value;
    else if (flag == "--batch") batch = value;
    else if (flag == "--threads") threads = value;
    else {
      std::fprintf(stderr, "amp_step_bench: unknown argument %s\n", flag.c_str());
      return 2;
    }
  }
  torch::set_num_threads(threads);
  ddp::init_process_group("gloo");
  torch::manual_seed(0);
  Net net;
  ddp::DistributedDataParallel model(net);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9).weight_decay(5e-4));
  const auto x = torch::randn({batch, 1, 28, 28});
  const auto y = torch::randint(0, 10, {batch});
  auto step = [&](bool amp) {
    optimizer.zero_grad();
    at::Tensor loss;
    {
      ddp::amp::Autocast autocast(torch::kCPU, {.enabled = amp});
      loss = torch::cross_entropy_loss(model->forward(x), y);
    }
    loss.backward();
    optimizer.step();
  };
  std::vector<double> times[2];
  for (int round = 0; round < rounds; ++round) {
    for (int amp = 0; amp < 2; ++amp) {
      for (int i = 0; i < steps + 2; ++i) {
        ddp::barrier();
        const auto start = std::chrono::steady_clock::now();
        step(amp == 1);
        const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
        if (i >= 2) times[amp].push_back(elapsed.count());  // the first steps of a block warm up
      }
    }
  }
  if (ddp::get_rank() == 0) std::printf("%.3f %.3f\n", median(times[0]), median(times[1]));
  ddp::destroy_process_group();
  return 0;
}
