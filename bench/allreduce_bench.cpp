// float32 all_reduce timing on one rank of a ddp job (run one process per rank; see
// run_allreduce.py). Prints one line per size: "<bytes> <median microseconds per op>".
//   allreduce_bench [--min-bytes N] [--max-bytes N] [--backend gloo] [--repeats R] [--op OP] [--shared]
// --shared puts the buffers in the group's shared memory (ProcessGroup::allocate_shared_memory),
// which the peers on the host read where it is.
// --op times another collective of the same bytes instead: broadcast (from rank 0), all_gather
// (the bytes are the output, world size inputs) or reduce_scatter (the bytes are the input).
// With --memcpy, one process times a single-core memcpy of each size instead (the yardstick for
// the shared-memory path's bandwidth), in the same format.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ddp/distributed.h"

namespace {

// About 64 MB of traffic per timed batch (at least 3, at most 200 ops).
int iterations(std::size_t bytes) { return static_cast<int>(std::clamp<std::size_t>((64u << 20) / bytes, 3, 200)); }

// memcpy between two buffers of max_bytes, each size timed as the all_reduce is.
void time_memcpy(std::size_t min_bytes, std::size_t max_bytes, int repeats) {
  std::vector<char> from(max_bytes, 1), to(max_bytes, 2);
  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const int iters = iterations(bytes);
    for (int w = 0; w < std::max(2, iters / 10); ++w) std::memcpy(to.data(), from.data(), bytes);
    std::vector<double> per_op;
    for (int r = 0; r < repeats; ++r) {
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        std::memcpy(to.data(), from.data(), bytes);
        asm volatile("" : : "r"(to.data()) : "memory");  // keep every copy
      }
      std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;
      per_op.push_back(elapsed.count() / iters);
    }
    std::sort(per_op.begin(), per_op.end());
    std::printf("%zu %.2f\n", bytes, per_op[per_op.size() / 2]);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t min_bytes = 4 << 10, max_bytes = 256 << 20;
  int repeats = 5;
  std::string backend = "gloo";
  bool memcpy_only = false, shared = false;
  std::string op = "all_reduce";
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--memcpy" || flag == "--shared") {
      (flag == "--memcpy" ? memcpy_only : shared) = true;
      continue;
    }
    if (i + 1 >= argc) break;
    if (flag == "--min-bytes") min_bytes = std::strtoull(argv[++i], nullptr, 10);
    else if (flag == "--max-bytes") max_bytes = std::strtoull(argv[++i], nullptr, 10);
    else if (flag == "--repeats") repeats = std::atoi(argv[++i]);
    else if (flag == "--backend") backend = argv[++i];
    else if (flag == "--op") op = argv[++i];
  }
  if (memcpy_only) {
    time_memcpy(min_bytes, max_bytes, repeats);
    return 0;
  }
  ddp::init_process_group(backend, {.timeout = std::chrono::minutes(5)});
  auto group = ddp::get_default_group();
  if (op != "all_reduce" && op != "broadcast" && op != "all_gather" && op != "reduce_scatter") {
    std::fprintf(stderr, "allreduce_bench: --op %s is not all_reduce, broadcast, all_gather or reduce_scatter\n",
                 op.c_str());
    return 2;
  }
  const std::size_t n = max_bytes / sizeof(float);
  auto allocate = [&]() -> std::shared_ptr<float> {
    std::shared_ptr<void> memory = shared ? group->allocate_shared_memory(n * sizeof(float)) : nullptr;
    if (shared && !memory) {
      std::fprintf(stderr, "allreduce_bench: --shared, but this group has no shared memory (one rank per host?)\n");
      std::exit(2);
    }
    if (!memory) memory = std::shared_ptr<void>(new float[n], [](void* p) { delete[] static_cast<float*>(p); });
    auto typed = std::static_pointer_cast<float>(memory);
    std::fill(typed.get(), typed.get() + n, 1.0f);
    return typed;
  };
  const auto data_memory = allocate(), other_memory = allocate();
  float* const data = data_memory.get();
  float* const other = other_memory.get();
  const auto world = static_cast<std::size_t>(group->size());
  // Blocking ops, as torch.distributed's (async_op=False) are timed beside them.
  auto all_reduce = [&](std::size_t count) {
    std::shared_ptr<ddp::Work> work;
    const std::size_t part = count / world;
    if (op == "all_reduce")
      work = group->all_reduce(ddp::buffer_of(data, count), ddp::ReduceOp::SUM, ddp::Launch::OnWait);
    if (op == "broadcast") work = group->broadcast(ddp::buffer_of(data, count), 0, ddp::Launch::OnWait);
    if (op == "all_gather") {
      work = group->all_gather(ddp::buffer_of(other, part), ddp::buffer_of(data, part * world), ddp::Launch::OnWait);
    }
    if (op == "reduce_scatter") {
      work = group->reduce_scatter(ddp::buffer_of(data, part * world), ddp::buffer_of(other, part), ddp::ReduceOp::SUM,
                                   ddp::Launch::OnWait);
    }
    work->wait();
  };
  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const std::size_t count = bytes / sizeof(float);
    const int iters = iterations(bytes);
    for (int w = 0; w < std::max(2, iters / 10); ++w) all_reduce(count);
    std::vector<double> per_op;
    for (int r = 0; r < repeats; ++r) {
      ddp::barrier();
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) all_reduce(count);
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
