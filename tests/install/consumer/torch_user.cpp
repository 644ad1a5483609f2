#include <ddp/ddp.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <iostream>

// Under ddprun with DDP_SHM=0 (install_test.sh), DDP's gradients cross Gloo over TCP in a process
// that has LibTorch, and with an upstream LibTorch LibTorch's own Gloo, loaded.
int main() {
  ddp::init_process_group("gloo");
  auto model = std::make_shared<torch::nn::LinearImpl>(4, 2);
  ddp::DistributedDataParallel ddp_model(model);
  ddp_model->forward(torch::ones({3, 4}) * (ddp::get_rank() + 1)).sum().backward();
  // Each rank's gradient of the bias is 3 (the rows); of the weight, 3 * (rank + 1): averaged.
  const double expected = 3.0 * (ddp::get_world_size() + 1) / 2.0;
  std::cout << "torch_user: rank " << ddp::get_rank() << " of " << ddp::get_world_size() << ", LibTorch "
            << TORCH_VERSION << ", averaged gradient " << model->weight.grad()[0][0].item<double>() << " (expected "
            << expected << ")" << std::endl;
  const bool ok = std::abs(model->weight.grad()[0][0].item<double>() - expected) < 1e-6;
  ddp::destroy_process_group();
  return ok ? 0 : 1;
}
