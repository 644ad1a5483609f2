// A synthetic classification dataset for tests and benchmarks: deterministic from a seed,
// any size and input shape, and learnable (each label is a function of its input).
//
//   ddp::data::SyntheticClassification data({.size = 4096, .shape = {1, 28, 28}, .num_classes = 10, .seed = 1});
//   auto loader = torch::data::make_data_loader(data.map(torch::data::transforms::Stack<>()), sampler, 64);
//
// Sample i's input is `shape` float32 values, uniform in [-1, 1), drawn from a stream that depends
// only on (seed, i); its label is argmax_c <w_c, input> for num_classes fixed random directions w_c
// drawn from the seed: a linear teacher, so a linear model can fit the data exactly and an MLP
// learns it quickly. The data are the same on every machine, process, run and LibTorch version
// (splitmix64, not torch's generators), in any order of access; nothing is stored per sample.
//
// Copies share the teacher (a data loader copies its dataset into each worker). get/size are
// thread-safe.
#pragma once

#include <torch/data/datasets.h>          // Dataset, and .map(transform) (map.h alone does not compile)
#include <torch/data/transforms/stack.h>  // Stack<>, the usual transform
#include <torch/data/example.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace ddp::data {

struct SyntheticOptions {
  std::int64_t size = 1024;                       // number of samples
  std::vector<std::int64_t> shape = {1, 28, 28};  // of each input
  std::int64_t num_classes = 10;                  // labels in [0, num_classes)
  std::uint64_t seed = 0;                         // another seed: other inputs and another teacher
};

class SyntheticClassification : public torch::data::datasets::Dataset<SyntheticClassification> {
 public:
  // Throws ddp::InvalidArgument: size < 0, an empty shape or a dimension < 1, more than 2^31
  // values per input, num_classes < 2.
  explicit SyntheticClassification(SyntheticOptions options = {});

  // Input (float32, `shape`) and label (int64 scalar) of sample `index`, computed on the fly
  // (microseconds for 784 values and 10 classes). Throws ddp::InvalidArgument for index >= size.
  torch::data::Example<> get(std::size_t index) override;

  torch::optional<std::size_t> size() const override;

  const SyntheticOptions& options() const noexcept { return options_; }

 private:
  SyntheticOptions options_;
  std::int64_t numel_ = 0;
  std::shared_ptr<const std::vector<float>> teacher_;  // [num_classes, numel]
};

}  // namespace ddp::data
