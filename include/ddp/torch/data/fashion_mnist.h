// Fashion-MNIST (Zalando: 70,000 28x28 grey images of 10 kinds of clothing) as a torch::data dataset.
//
//   ddp::data::FashionMNIST train;                                   // Debian's files, training split
//   ddp::data::FashionMNIST test("/data/fashion", ddp::data::FashionMNIST::Mode::kTest);
//   auto loader = torch::data::make_data_loader(train.map(torch::data::transforms::Stack<>()), ...);
//
// Reads the four gzip'd IDX files Debian's dataset-fashion-mnist package installs in
// /usr/share/datasets/fashion-mnist (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,
// t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz; uncompressed files of those names without
// .gz work too). The split is decompressed once, in the constructor, into one tensor.
//
// get(i): image [1, 28, 28] float32, normalized as (pixel / 255 - kMean) / kStd with the training
// split's mean and standard deviation (0.2860, 0.3530, the values commonly used for Fashion-MNIST:
// the same transform for both splits), and the label, an int64 scalar in [0, 10) naming
// class_names()[label].
//
// Copies share the tensors (a data loader copies its dataset into each worker). Reading (get,
// size, images, targets) is thread-safe.
#pragma once

#include <torch/data/datasets.h>          // Dataset, and .map(transform) (map.h alone does not compile)
#include <torch/data/transforms/stack.h>  // Stack<>, the usual transform
#include <torch/data/example.h>

#include <array>
#include <string>
#include <string_view>

namespace ddp::data {

class FashionMNIST : public torch::data::datasets::Dataset<FashionMNIST> {
 public:
  enum class Mode { kTrain, kTest };

  // Where Debian's dataset-fashion-mnist package puts the files.
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";
  static constexpr double kMean = 0.2860;  // of the training pixels, scaled to [0, 1]
  static constexpr double kStd = 0.3530;
  static constexpr int kNumClasses = 10;
  static constexpr int kImageSize = 28;

  // Loads the `mode` split from `root` (under a second for the training split).
  // Throws ddp::IOError: a file missing (the message names the package to install and how to
  // point elsewhere: this `root`, the examples' --data-dir flag), unreadable, not gzip-decodable,
  // of another IDX type (bad magic number), not 28x28, shorter or longer than its header says,
  // images and labels of different counts, or a label outside [0, 10).
  explicit FashionMNIST(const std::string& root = kDefaultRoot, Mode mode = Mode::kTrain);

  // Image [1, 28, 28] (float32, normalized) and label (int64 scalar) number `index`.
  // Throws ddp::InvalidArgument when index >= size().
  torch::data::Example<> get(std::size_t index) override;

  torch::optional<std::size_t> size() const override;  // 60,000 (train) or 10,000 (test)

  bool is_train() const noexcept { return mode_ == Mode::kTrain; }

  // All images [N, 1, 28, 28] (float32, normalized) and labels [N] (int64).
  const torch::Tensor& images() const noexcept { return images_; }
  const torch::Tensor& targets() const noexcept { return targets_; }

  // "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
  // "Ankle boot": the names of labels 0 to 9.
  static const std::array<std::string_view, kNumClasses>& class_names() noexcept;

 private:
  Mode mode_;
  torch::Tensor images_;
  torch::Tensor targets_;
};

}  // namespace ddp::data
