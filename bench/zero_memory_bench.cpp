// Optimizer-state memory per rank with ZeroRedundancyOptimizer<Adam>, against unsharded Adam
// (world size 1 is Adam itself), for an MLP of equal 1024-wide layers. Adam allocates its state
// (two moments per parameter) in the first step, so each rank measures the state twice: the
// bytes of the state tensors it holds, and the growth of its heap (glibc's mallinfo2: in-use
// arena bytes plus mmap'd blocks) across that first step, with nothing else kept from it.
// Rank 0 prints one line per rank: "<rank> <parameters owned> <elements owned> <state MB> <heap MB>".
//   zero_memory_bench [--layers N] [--width W]
#include <malloc.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "ddp/ddp.h"

namespace {

double heap_bytes() {
  const auto info = mallinfo2();
  return static_cast<double>(info.uordblks + info.hblkhd);
}

}  // namespace

int main(int argc, char** argv) {
  int layers = 8, width = 1024;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--layers") layers = std::stoi(argv[i + 1]);
    else if (flag == "--width") width = std::stoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "zero_memory_bench: unknown argument %s\n", flag.c_str());
      return 2;
    }
  }
  torch::set_num_threads(1);
  ddp::init_process_group("gloo");
  torch::manual_seed(0);
  torch::nn::Sequential net;
  for (int l = 0; l < layers; ++l) {
    net->push_back(torch::nn::Linear(width, width));
    net->push_back(torch::nn::ReLU());
  }
  ddp::DistributedDataParallel model(net);
  ddp::ZeroRedundancyOptimizer<torch::optim::Adam> zero(model->parameters(), torch::optim::AdamOptions(1e-3));
  const auto x = torch::randn({16, width});
  zero.zero_grad();
  model->forward(x).pow(2).mean().backward();
  const double before = heap_bytes();
  zero.step();
  const double grown = heap_bytes() - before;

  double state = 0, owned = 0, elements = 0;
  for (const auto& [key, s] : zero.local().state()) {
    const auto& adam = static_cast<const torch::optim::AdamParamState&>(*s);
    state += static_cast<double>(adam.exp_avg().nbytes() + adam.exp_avg_sq().nbytes());
  }
  for (const auto& group : zero.local().param_groups()) {
    for (const auto& p : group.params()) owned += 1, elements += static_cast<double>(p.numel());
  }
  const int world = ddp::get_world_size();
  auto all = torch::empty({world * 4}, torch::kDouble);
  ddp::all_gather_into_tensor(all, torch::tensor({owned, elements, state, grown}, torch::kDouble));
  if (ddp::get_rank() == 0) {
    for (int r = 0; r < world; ++r) {
      const double* v = all.data_ptr<double>() + 4 * r;
      std::printf("%d %.0f %.0f %.2f %.2f\n", r, v[0], v[1], v[2] / 1048576.0, v[3] / 1048576.0);
    }
  }
  ddp::destroy_process_group();
  return 0;
}
