// torch.distributed's functions on tensors, over real processes.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "ddp/error.h"
#include "ddp/torch/collectives.h"
#include "support/multiprocess.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

const at::ScalarType kTypes[] = {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16,
                                 at::kChar,  at::kByte,   at::kInt,  at::kLong};

// Rank r's tensor: small integers, exact in every dtype.
at::Tensor input(int rank, int64_t n, at::ScalarType type) {
  return (at::arange(n, at::kLong) * 3 + rank * 7).remainder(11).to(type);
}

at::Tensor sum_over(int world, int64_t n, at::ScalarType type) {
  auto acc = at::zeros({n}, at::kLong);
  for (int r = 0; r < world; ++r) acc += input(r, n, at::kLong);
  return acc.to(type);
}

void expect_equal(const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
  EXPECT_TRUE(at::equal(actual.to(at::kDouble), expected.to(at::kDouble)))
      << what << ": got " << actual.to(at::kDouble).slice(0, 0, 8) << " expected "
      << expected.to(at::kDouble).slice(0, 0, 8);
}

TEST(TensorCollectives, EveryOpAndDtypeOnThreeRanks) {
  test::run_ranks(3, [](int rank, int world) {
    init_process_group("gloo", {.timeout = 60s});
    for (auto type : kTypes) {
      const std::string name = std::string(c10::toString(type));
      for (int64_t n : {0, 1, 17}) {
        auto t = input(rank, n, type);
        all_reduce(t);
        expect_equal(t, sum_over(world, n, type), "all_reduce " + name);

        t = input(rank, n, type);
        all_reduce_async(t, ReduceOp::MAX)->wait();
        auto max = input(0, n, at::kLong);
        for (int r = 1; r < world; ++r) max = at::maximum(max, input(r, n, at::kLong));
        expect_equal(t, max, "all_reduce MAX " + name);

        t = input(rank, n, type);
        broadcast(t, 1);
        expect_equal(t, input(1, n, type), "broadcast " + name);

        t = input(rank, n, type);
        reduce(t, 2);
        expect_equal(t, rank == 2 ? sum_over(world, n, type) : input(rank, n, type), "reduce " + name);

        std::vector<at::Tensor> outs;
        for (int r = 0; r < world; ++r) outs.push_back(at::empty({n}, type));
        all_gather(outs, input(rank, n, type));
        for (int r = 0; r < world; ++r) expect_equal(outs[r], input(r, n, type), "all_gather " + name);

        auto gathered = at::empty({world * n}, type);
        all_gather_into_tensor(gathered, input(rank, n, type));
        for (int r = 0; r < world; ++r)
          expect_equal(gathered.narrow(0, r * n, n), input(r, n, type), "all_gather_into_tensor " + name);

        std::vector<at::Tensor> ins;
        for (int r = 0; r < world; ++r) ins.push_back(input(rank + r, n, type));
        auto out = at::empty({n}, type);
        reduce_scatter(out, ins);
        auto expected = at::zeros({n}, at::kLong);
        for (int r = 0; r < world; ++r) expected += input(r + rank, n, at::kLong);
        expect_equal(out, expected.to(type), "reduce_scatter " + name);

        out = at::empty({n}, type);
        reduce_scatter_tensor(out, at::cat(ins));
        expect_equal(out, expected.to(type), "reduce_scatter_tensor " + name);

        std::vector<at::Tensor> to_all, from_all;
        for (int r = 0; r < world; ++r) {
          to_all.push_back(input(rank * 10 + r, n, type));
          from_all.push_back(at::empty({n}, type));
        }
        all_to_all(from_all, to_all);
        for (int r = 0; r < world; ++r) expect_equal(from_all[r], input(r * 10 + rank, n, type), "all_to_all " + name);

        auto single_in = at::cat(to_all), single_out = at::empty({world * n}, type);
        all_to_all_single(single_out, single_in);
        for (int r = 0; r < world; ++r)
          expect_equal(single_out.narrow(0, r * n, n), input(r * 10 + rank, n, type), "all_to_all_single " + name);

        std::vector<at::Tensor> list;
        if (rank == 0)
          for (int r = 0; r < world; ++r) list.push_back(at::empty({n}, type));
        gather(input(rank, n, type), list, 0);
        if (rank == 0)
          for (int r = 0; r < world; ++r) expect_equal(list[r], input(r, n, type), "gather " + name);

        std::vector<at::Tensor> parts;
        if (rank == 1)
          for (int r = 0; r < world; ++r) parts.push_back(input(100 + r, n, type));
        auto mine = at::empty({n}, type);
        scatter(mine, parts, 1);
        expect_equal(mine, input(100 + rank, n, type), "scatter " + name);

        auto received = at::empty({n}, type);
        auto s = isend(input(rank, n, type), (rank + 1) % world);
        auto r = irecv(received, (rank + world - 1) % world);
        s->wait();
        r->wait();
        expect_equal(received, input((rank + world - 1) % world, n, type), "send/recv " + name);
      }
    }
    auto two_d = at::ones({4, 5}, at::kFloat) * rank;
    all_reduce(two_d, ReduceOp::AVG);
    EXPECT_TRUE(at::allclose(two_d, at::ones({4, 5}) * 1.0f));
    barrier();
    destroy_process_group();
  });
}

TEST(TensorCollectives, BadTensorsGetClearErrorsBeforeAnythingIsSent) {
  init_process_group("gloo");  // a group of one: no launcher variables in this process
  auto expect_message = [](auto&& call, const std::string& fragment) {
    try {
      call();
      ADD_FAILURE() << "no error; expected one containing: " << fragment;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  auto t = at::ones({4, 4});
  auto transposed = t.t();
  expect_message([&] { all_reduce(transposed); }, "not contiguous");
  auto flags = at::ones({3}, at::kBool);
  expect_message([&] { all_reduce(flags); }, "Bool");
  auto meta = at::empty({3}, at::TensorOptions().device(at::kMeta));
  expect_message([&] { all_reduce(meta); }, "meta");
  std::vector<at::Tensor> mixed = {at::ones({4}, at::kFloat)};
  std::vector<at::Tensor> two = {at::ones({4}), at::ones({4})};
  expect_message([&] { all_gather(two, at::ones({4})); }, "holds 2 tensors but must hold 1");
  std::vector<at::Tensor> wrong_type = {at::ones({4}, at::kDouble)};
  expect_message([&] { all_gather(wrong_type, at::ones({4})); }, "Double");
  std::vector<at::Tensor> wrong_size = {at::ones({5})};
  auto out = at::empty({4});
  expect_message([&] { reduce_scatter(out, wrong_size); }, "5 elements");
  auto small = at::empty({3});
  expect_message([&] { all_gather_into_tensor(small, at::ones({4})); }, "must hold 4");
  auto ints = at::ones({4});
  expect_message([&] { all_reduce(ints, ReduceOp::BAND); }, "bitwise");
  expect_message([&] { broadcast(t, 1); }, "root 1 is not a rank");
  destroy_process_group();
}

}  // namespace
}  // namespace ddp
