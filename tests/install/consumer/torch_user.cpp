#include <ddp/ddp.h>
#include <torch/torch.h>

#include <iostream>

int main() {
  ddp::init_process_group("gloo");
  auto model = std::make_shared<torch::nn::LinearImpl>(4, 2);
  ddp::DistributedDataParallel ddp_model(model);
  ddp_model->forward(torch::ones({3, 4})).sum().backward();
  std::cout << "torch_user: gradient defined " << model->weight.grad().defined() << std::endl;
  ddp::destroy_process_group();
}
