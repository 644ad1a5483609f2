// convert_sync_batchnorm: what it converts (containers, children called by name), what it refuses
// (layers a member or a variable also holds, a BatchNorm root), and state dicts that move between
// the converted model and the original.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include "ddp/ddp.h"
#include "support/expect_error.h"

namespace ddp::test {
namespace {

// Calls its batch norm through the registry, by name.
struct ByName : torch::nn::Module {
  ByName() { register_module("norm", torch::nn::BatchNorm1d(6)); }
  at::Tensor forward(const at::Tensor& x) { return named_children()["norm"]->as<SyncBatchNormImpl>()->forward(x); }
};

// Batch norms in a Sequential, a ModuleList, a ModuleDict and by name, one of them twice.
struct Nested : torch::nn::Module {
  Nested() {
    torch::nn::BatchNorm2d shared(4);
    features = register_module("features", torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)),
                                                                 shared, torch::nn::ReLU()));
    blocks = register_module("blocks", torch::nn::ModuleList(shared, torch::nn::BatchNorm3d(2)));
    heads = register_module(
        "heads", torch::nn::ModuleDict(std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>{
                     {"a", std::make_shared<torch::nn::BatchNorm1dImpl>(6)}}));
    inner = register_module("inner", std::make_shared<ByName>());
    fc = register_module("fc", torch::nn::Linear(4 * 3 * 3, 6));
  }
  at::Tensor forward(const at::Tensor& x) {
    auto h = blocks[0]->as<SyncBatchNormImpl>()->forward(features->forward(x));
    auto z = fc(h.flatten(1));
    return inner->forward(heads["a"]->as<SyncBatchNormImpl>()->forward(z));
  }
  torch::nn::Sequential features{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::ModuleDict heads{nullptr};
  std::shared_ptr<ByName> inner;
  torch::nn::Linear fc{nullptr};
};

int count_batch_norms(torch::nn::Module& m) {
  int n = 0;
  for (const auto& child : m.modules()) {
    n += child->as<torch::nn::BatchNorm1dImpl>() || child->as<torch::nn::BatchNorm2dImpl>() ||
         child->as<torch::nn::BatchNorm3dImpl>();
  }
  return n;
}

TEST(ConvertSyncBatchnorm, ReplacesTheLayersOfContainersAndNamedChildrenKeepingTheirTensors) {
  auto model = std::make_shared<Nested>();
  auto old_weight = model->features[1]->as<torch::nn::BatchNorm2dImpl>()->weight;
  auto old_mean = model->heads["a"]->as<torch::nn::BatchNorm1dImpl>()->running_mean;
  model->blocks[1]->eval();
  torch::optim::SGD optimizer(model->parameters(), 0.1);  // built before: still trains the same tensors

  EXPECT_EQ(convert_sync_batchnorm(model), 4);  // the shared layer once
  EXPECT_EQ(count_batch_norms(*model), 0);
  auto* sbn = model->features[1]->as<SyncBatchNormImpl>();
  ASSERT_NE(sbn, nullptr) << "Sequential still runs the old layer";
  EXPECT_EQ(model->features->ptr(1).get(), model->blocks[0].get()) << "the shared layer became two";
  EXPECT_TRUE(sbn->weight.is_same(old_weight));
  EXPECT_TRUE(model->heads["a"]->as<SyncBatchNormImpl>()->running_mean.is_same(old_mean));
  EXPECT_FALSE(model->blocks[1]->is_training()) << "the training mode is kept";
  EXPECT_EQ(model->blocks[1]->as<SyncBatchNormImpl>()->options.num_features(), 2);

  auto before = old_weight.clone();
  optimizer.zero_grad();
  auto out = model->forward(torch::randn({5, 1, 5, 5}));
  (out * torch::randn_like(out)).sum().backward();  // not a plain sum: through batch norm its gradient is 0
  optimizer.step();
  EXPECT_FALSE(at::equal(before, old_weight)) << "the optimizer built before no longer reaches the weight";
}

TEST(ConvertSyncBatchnorm, StateDictsMoveBetweenTheConvertedModelAndTheOriginal) {
  torch::manual_seed(0);
  auto original = std::make_shared<Nested>();
  {
    torch::NoGradGuard no_grad;
    for (auto& b : original->buffers()) b.add_(3);
    for (auto& p : original->parameters()) p.add_(1);
  }
  auto converted = std::make_shared<Nested>();
  convert_sync_batchnorm(converted);
  const std::string path = ::testing::TempDir() + "/convert-" + std::to_string(::getpid()) + ".pt";
  torch::save(original, path);
  torch::load(converted, path);  // BatchNorm's names load into SyncBatchNorm
  auto a = original->named_parameters(), b = converted->named_parameters();
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& key : a.keys()) EXPECT_TRUE(at::equal(a[key], b[key])) << key;
  auto ab = original->named_buffers(), bb = converted->named_buffers();
  ASSERT_EQ(ab.keys(), bb.keys());
  for (const auto& key : ab.keys()) EXPECT_TRUE(at::equal(ab[key], bb[key])) << key;
  torch::save(converted, path);
  auto back = std::make_shared<Nested>();
  torch::load(back, path);  // and back
  EXPECT_TRUE(at::equal(back->features[1]->as<torch::nn::BatchNorm2dImpl>()->running_var,
                        original->features[1]->as<torch::nn::BatchNorm2dImpl>()->running_var));
  ::unlink(path.c_str());
}

struct WithMember : torch::nn::Module {
  WithMember() {
    seq = register_module("seq", torch::nn::Sequential(torch::nn::BatchNorm1d(3)));
    bn = register_module("bn", torch::nn::BatchNorm1d(3));
  }
  at::Tensor forward(const at::Tensor& x) { return bn(seq->forward(x)); }
  torch::nn::Sequential seq{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

TEST(ConvertSyncBatchnorm, ALayerAMemberAlsoHoldsIsRefusedAndNothingIsConverted) {
  auto model = std::make_shared<WithMember>();
  expect_error<InvalidArgument>([&] { convert_sync_batchnorm(model); },
                                {"'bn' (torch::nn::BatchNorm1d) is also held outside the module registry",
                                 "Nothing was converted", "ddp::SyncBatchNorm"});
  EXPECT_EQ(count_batch_norms(*model), 2);
  // A variable holding a layer of a container is a handle too.
  torch::nn::BatchNorm2d kept(4);
  torch::nn::Sequential seq(kept);
  expect_error<InvalidArgument>([&] { convert_sync_batchnorm(seq); }, {"'0' (torch::nn::BatchNorm2d)"});
  expect_error<InvalidArgument>([&] { convert_sync_batchnorm(kept); },
                                {"the module itself is a torch::nn::BatchNorm2d", "construct a ddp::SyncBatchNorm"});
}

}  // namespace
}  // namespace ddp::test
