// A bucket on its own (a group of one): fill, launch through a hook, write back.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ddp/ddp.h"
#include "reducer/bucket.h"
#include "support/expect_error.h"

namespace ddp::detail {
namespace {

using test::expect_error;

struct Params {
  at::Tensor a = torch::zeros({2, 2}, torch::requires_grad());
  at::Tensor b = torch::zeros({3}, torch::requires_grad());
  at::Tensor c = torch::zeros({1}, torch::requires_grad());
  std::vector<at::Tensor> all() const { return {a, b, c}; }
};

class BucketTest : public ::testing::Test {
 protected:
  void SetUp() override { init_process_group("gloo"); }
  void TearDown() override { destroy_process_group(); }
};

TEST_F(BucketTest, FillsGradientsUnusedOnesAsZerosAndWritesTheHooksResultBack) {
  Params p;
  Bucket bucket(0, true, {2, 0, 1}, p.all(), get_default_group(), /*as_view=*/false);
  p.a.mutable_grad() = torch::full({2, 2}, 2.0f);
  p.b.mutable_grad() = torch::full({3}, 9.0f);  // stale: not used in this iteration
  p.c.mutable_grad() = torch::full({1}, 5.0f);
  bucket.fill({1, 0, 1}, /*divisor=*/0);
  at::Tensor seen;
  bucket.launch([&](GradBucket& handed) {
    seen = handed.buffer().clone();
    EXPECT_EQ(handed.parameters().size(), 3u);
    return Future::completed(handed.buffer() * 10);  // a new tensor: copied into the bucket
  });
  EXPECT_TRUE(at::equal(seen, torch::tensor({5.0f, 2.0f, 2.0f, 2.0f, 2.0f, 0.0f, 0.0f, 0.0f})));
  bucket.write_back({});
  EXPECT_TRUE(at::equal(p.a.grad(), torch::full({2, 2}, 20.0f)));
  EXPECT_TRUE(at::equal(p.b.grad(), torch::zeros({3})));
  EXPECT_TRUE(at::equal(p.c.grad(), torch::full({1}, 50.0f)));
  EXPECT_EQ(bucket.future(), nullptr);
}

TEST_F(BucketTest, AParameterUsedOnNoRankKeepsNoGradient) {
  Params p;
  Bucket bucket(0, true, {0, 1, 2}, p.all(), get_default_group(), /*as_view=*/false);
  p.a.mutable_grad() = torch::ones({2, 2});
  bucket.fill({1, 0, 0}, /*divisor=*/1);
  bucket.launch({});  // the built-in sum
  bucket.write_back({1, 0, 1});
  EXPECT_TRUE(at::equal(p.a.grad(), torch::ones({2, 2})));
  EXPECT_FALSE(p.b.grad().defined());                     // used nowhere
  EXPECT_TRUE(at::equal(p.c.grad(), torch::zeros({1})));  // used elsewhere: the average
}

TEST_F(BucketTest, FillingDividesByTheDivisorItIsGiven) {
  // Under a join with divide_by_initial_world_size = false the divisor is the number of ranks
  // still training, which changes between iterations; the multiplier follows it.
  Params p;
  Bucket bucket(0, true, {0}, p.all(), get_default_group(), /*as_view=*/false);
  p.a.mutable_grad() = torch::full({2, 2}, 6.0f);
  at::Tensor seen;
  auto keep = [&](GradBucket& handed) {
    seen = handed.buffer().clone();
    return Future::completed(handed.buffer());
  };
  bucket.fill({1, 1, 1}, /*divisor=*/3);
  bucket.launch(keep);
  bucket.write_back({});
  EXPECT_TRUE(at::allclose(seen, torch::full({4}, 2.0f)));
  p.a.mutable_grad() = torch::full({2, 2}, 6.0f);
  bucket.fill({1, 1, 1}, /*divisor=*/2);
  bucket.launch(keep);
  bucket.write_back({});
  EXPECT_TRUE(at::equal(seen, torch::full({4}, 3.0f)));
}

TEST_F(BucketTest, GradientsAsBucketViewsAliasTheBucket) {
  Params p;
  p.b.mutable_grad() = torch::full({3}, 4.0f);
  Bucket bucket(0, true, {0, 1}, p.all(), get_default_group(), /*as_view=*/true);
  EXPECT_TRUE(at::equal(p.b.grad(), torch::full({3}, 4.0f)));  // copied in before aliasing
  at::Tensor buffer;
  bucket.launch([&](GradBucket& handed) {
    buffer = handed.buffer();
    return Future::completed(buffer);
  });
  EXPECT_EQ(p.a.grad().data_ptr(), buffer.data_ptr());
  EXPECT_EQ(p.b.grad().data_ptr(), static_cast<float*>(buffer.data_ptr()) + 4);
  bucket.write_back({});
  p.a.mutable_grad() = at::Tensor();  // set to none (LibTorch 2.x's zero_grad): aliased again
  bucket.fill({1, 1, 1}, /*divisor=*/0);
  bucket.launch([&](GradBucket& handed) { return Future::completed(handed.buffer()); });
  bucket.write_back({});
  EXPECT_EQ(p.a.grad().data_ptr(), buffer.data_ptr());
  EXPECT_TRUE(at::equal(p.a.grad(), torch::zeros({2, 2})));
}

TEST_F(BucketTest, AHookThatReturnsNoFutureIsAnErrorNamingTheBucket) {
  Params p;
  Bucket bucket(4, false, {0}, p.all(), get_default_group(), /*as_view=*/false);
  bucket.fill({1, 1, 1}, 0);
  expect_error<Error>([&] { bucket.launch([](GradBucket&) { return std::shared_ptr<Future>(); }); },
                      {"the comm hook returned no future for bucket 4"});
}

TEST_F(BucketTest, AFailedCommunicationIsRethrownNamingTheBucket) {
  Params p;
  Bucket bucket(3, false, {0}, p.all(), get_default_group(), /*as_view=*/false);
  bucket.fill({1, 1, 1}, 0);
  auto work = std::make_shared<Work>("all_reduce #7 in group 'world'");
  bucket.launch([&](GradBucket& handed) { return std::make_shared<Future>(work, handed.buffer()); });
  work->finish(std::make_exception_ptr(PeerLostError("all_reduce #7: Lost rank 1")));
  expect_error<PeerLostError>([&] { bucket.write_back({}); },
                              {"DistributedDataParallel: the gradient all-reduce of bucket 3 failed", "Lost rank 1"});
  bucket.settle();  // the error is known: settling does not throw
  EXPECT_EQ(bucket.future(), nullptr);
}

}  // namespace
}  // namespace ddp::detail
