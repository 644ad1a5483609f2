// The documented way to write a comm hook (the example in include/ddp/torch/comm_hooks.h, copied
// here verbatim: a test checks it), run under AddressSanitizer with the reducer, the built-in
// hooks and Future compiled with it: a hook whose Future reads memory that is gone when the end of
// backward waits for it is reported (stack-use-after-return, heap-use-after-free), not silently
// read. A control proves the detector catches exactly that mistake in this binary.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <type_traits>

#include "ddp/ddp.h"
#include "../models.h"
#include "support/multiprocess.h"

// LibTorch keeps global allocations for the life of the process (LeakSanitizer would report them
// at exit); the fake stack turns a read of a returned frame's locals into a report.
extern "C" const char* __asan_default_options() { return "detect_leaks=0:detect_stack_use_after_return=1"; }

namespace ddp::test {
namespace {

using namespace std::chrono_literals;

// Trains 3 steps of the MLP on this rank's data with `register_hook` installing the hook, and
// returns the largest difference between DDP's gradients and the average computed here from
// every rank's plain local gradients.
template <typename RegisterHook>
double train(int rank, int world, RegisterHook register_hook) {
  torch::manual_seed(3);
  auto model = std::make_shared<Mlp>();
  torch::manual_seed(3);
  auto plain = std::make_shared<Mlp>();
  DistributedDataParallel ddp_model(model);
  register_hook(ddp_model);
  double worst = 0;
  for (int step = 0; step < 3; ++step) {
    auto [x, y] = batch(step, world * 4);
    auto xs = x.narrow(0, rank * 4, 4), ys = y.narrow(0, rank * 4, 4);
    for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
    for (auto& p : plain->parameters()) p.mutable_grad() = at::Tensor();
    torch::cross_entropy_loss(ddp_model->forward(xs), ys).backward();
    torch::cross_entropy_loss(plain->forward(xs), ys).backward();
    auto ours = model->parameters(), theirs = plain->parameters();
    for (std::size_t i = 0; i < ours.size(); ++i) {
      at::Tensor average = theirs[i].grad().clone();
      all_reduce(average, ReduceOp::SUM);
      average.div_(world);
      worst = std::max(worst, (ours[i].grad() - average).abs().max().item<double>());
    }
  }
  return worst;
}

// The mistake the old example made, `[&buf = bucket.buffer()]`, cannot compile any more.
static_assert(!std::is_reference_v<decltype(std::declval<GradBucket&>().buffer())>,
              "GradBucket::buffer() returns the tensor by value");

void init() {
  torch::set_num_threads(1);
  init_process_group("gloo", {.timeout = 60s});
}

TEST(CommHookAsan, TheDocumentedHookTrainsCleanUnderAddressSanitizer) {
  run_ranks(2, [](int rank, int world) {
    init();
    const double diff = train(rank, world, [](auto& ddp_model) {
      ddp_model->register_comm_hook([](ddp::GradBucket& bucket) {
        at::Tensor buffer = bucket.buffer();
        auto work = ddp::all_reduce_async(buffer, ddp::ReduceOp::AVG, bucket.process_group());
        return std::make_shared<ddp::Future>(work, buffer);
      });
    });
    EXPECT_EQ(diff, 0) << "at 2 ranks (a + b) / 2 is exact";
    destroy_process_group();
  });
}

TEST(CommHookAsan, TheDocumentedContinuationTrainsCleanUnderAddressSanitizer) {
  run_ranks(2, [](int rank, int world) {
    init();
    const double diff = train(rank, world, [](auto& ddp_model) {
      ddp_model->register_comm_hook([](ddp::GradBucket& bucket) {
        at::Tensor wire = bucket.buffer().to(at::kBFloat16);
        auto work = ddp::all_reduce_async(wire, ddp::ReduceOp::AVG, bucket.process_group());
        return std::make_shared<ddp::Future>(
            work, wire, [buffer = bucket.buffer()](at::Tensor wire) mutable { return buffer.copy_(wire); });
      });
    });
    EXPECT_LE(diff, 2e-2) << "bfloat16 on the wire";
    EXPECT_GT(diff, 0) << "the gradients did not travel as bfloat16";
    destroy_process_group();
  });
}

// The control: the same mistake in another form, a continuation holding a reference to the hook's
// local, must be reported by this binary, or the tests above would prove nothing.
TEST(CommHookAsan, AContinuationReadingTheHooksLocalIsReported) {
  auto results = run_ranks(
      2,
      [](int rank, int world) {
    init();
    train(rank, world, [](auto& ddp_model) {
      ddp_model->register_comm_hook([](ddp::GradBucket& bucket) {
        at::Tensor buffer = bucket.buffer();
        auto work = ddp::all_reduce_async(buffer, ddp::ReduceOp::AVG, bucket.process_group());
        return std::make_shared<ddp::Future>(work, buffer, [&buffer](at::Tensor) { return buffer; });  // dangles
      });
    });
    ADD_FAILURE() << "the dangling continuation was not reported";
      },
      {.expect_success = false});
  if (is_rank_process()) return;
  for (const auto& r : results) {
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.output.find("ERROR: AddressSanitizer: stack-use-after-return"), std::string::npos)
        << "rank " << r.rank << ":\n"
        << r.output.substr(0, 4000);
  }
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    line.erase(0, line.find_first_not_of(' '));
    lines.push_back(line);
  }
  return lines;
}

// The hooks in the header's comment, each a block from "//   ddp_model->register_comm_hook([]"
// to "//   });", stand in this file line for line (indentation aside).
TEST(CommHookAsan, TheHeadersExamplesAreTheCodeTheseTestsRun) {
  const auto header = lines_of(std::string(DDP_SOURCE_DIR) + "/include/ddp/torch/comm_hooks.h");
  const auto source = lines_of(std::string(DDP_SOURCE_DIR) + "/tests/torch/ddp/asan/comm_hook_asan_test.cpp");
  std::vector<std::vector<std::string>> examples;
  bool in_example = false;
  for (const auto& line : header) {
    if (line.rfind("//   ", 0) != 0) continue;
    std::string code = line.substr(5);
    code.erase(0, code.find_first_not_of(' '));
    if (code.rfind("ddp_model->register_comm_hook([]", 0) == 0) {
      examples.emplace_back();
      in_example = true;
    }
    if (!in_example) continue;
    examples.back().push_back(code);
    if (code == "});") in_example = false;
  }
  ASSERT_EQ(examples.size(), 2u) << "comm_hooks.h should show two hooks";
  for (const auto& example : examples) {
    auto at = std::search(source.begin(), source.end(), example.begin(), example.end());
    EXPECT_NE(at, source.end()) << "not run by this test:\n" << example.front() << "\n" << example[1] << " ...";
  }
}

}  // namespace
}  // namespace ddp::test
