// The smallest ddp program: every rank contributes rank + 1 and prints the sum.
//   ddprun --nproc_per_node=2 build/examples/allreduce_demo
#include <ATen/ATen.h>

#include <iostream>

#include "ddp/ddp.h"

int main() {
  ddp::init_process_group("gloo");
  const int rank = ddp::get_rank(), world = ddp::get_world_size();
  at::Tensor t = at::full({4}, static_cast<float>(rank + 1));
  ddp::all_reduce(t);  // SUM over every rank, in place
  std::cout << "rank " << rank << " of " << world << ": all_reduce(rank + 1) = " << t << std::endl;
  ddp::barrier();
  ddp::destroy_process_group();
  return 0;
}
