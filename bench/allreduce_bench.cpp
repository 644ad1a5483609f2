// float32 all_reduce timing on one rank of a ddp job (run one process per rank; see
// run_allreduce.py). Prints one line per size: "<bytes> <median microseconds per op>".
//   allreduce_bench [--min-bytes N] [--max-bytes N] [--backend gloo] [--repeats R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ddp/distributed.h"

int main(int argc, char** argv) {
  std::size_t min_bytes = 4 << 10, max_bytes = 256 << 20;
  int repeats = 5;
  std::string backend = "gloo";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--min-bytes") min_bytes = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--max-bytes") max_bytes = std::strtoull(argv[i + 1], nullptr, 10);
    else if (flag == "--repeats") repeats = std::atoi(argv[i + 1]);
    else if (flag == "--backend") backend = argv[i + 1];
  }
  ddp::init_process_group(backend, {.timeout = std::chrono::minutes(5)});
  auto group = ddp::get_default_group();
  std::vector<float> data(max_bytes / sizeof(float), 1.0f);
  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const std::size_t count = bytes / sizeof(float);
    // About 64 MB of traffic per timed batch (at least 3, at most 200 ops).
    const int iters = static_cast<int>(std::clamp<std::size_t>((64u << 20) / bytes, 3, 200));
    for (int w = 0; w < std::max(2, iters / 10); ++w) group->all_reduce(ddp::buffer_of(data.data(), count))->wait();
    std::vector<double> per_op;
    for (int r = 0; r < repeats; ++r) {
      group->barrier()->wait();
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) group->all_reduce(ddp::buffer_of(data.data(), count))->wait();
      std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;
      per_op.push_back(elapsed.count() / iters);
    }
    std::sort(per_op.begin(), per_op.end());
    if (group->rank() == 0) std::printf("%zu %.2f\n", bytes, per_op[per_op.size() / 2]);
    std::fflush(stdout);
  }
  ddp::destroy_process_group();
  return 0;
}
