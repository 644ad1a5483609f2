#include <ddp/core.h>

#include <cstdio>

int main() {
  ddp::init_process_group("gloo");  // a group of one
  long long x = 41;
  ddp::get_default_group()->all_reduce(ddp::buffer_of(&x, 1))->wait();
  std::printf("core_user: rank %d of %d, %lld\n", ddp::get_rank(), ddp::get_world_size(), x + 1);
  ddp::destroy_process_group();
}
