#include "ddp/torch/data/fashion_mnist.h"

#include <ATen/ops/empty.h>

#include <filesystem>
#include <string>

#include "data/idx_file.h"
#include "ddp/error.h"

namespace ddp::data {
namespace {

constexpr const char* kContext = "FashionMNIST";

const char* const kFiles[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                              "t10k-labels-idx1-ubyte"};

// root/name.gz, else root/name; a missing file is an error that says how to get the data.
std::string find_file(const std::string& root, const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ignored;
  for (const std::string& candidate : {name + ".gz", name}) {
    const fs::path path = fs::path(root) / candidate;
    if (fs::is_regular_file(path, ignored)) return path.string();
  }
  std::string all;
  for (const char* file : kFiles) all += std::string(all.empty() ? "" : ", ") + file + ".gz";
  throw IOError(std::string(kContext) + ": no " + name + ".gz (nor " + name + ") in " + root +
                ". Install Debian's dataset-fashion-mnist package (apt-get install dataset-fashion-mnist; its files "
                "go to " +
                FashionMNIST::kDefaultRoot +
                "), or point the dataset's root argument (the examples' "
                "--data-dir flag) at a directory holding " +
                all);
}

}  // namespace

FashionMNIST::FashionMNIST(const std::string& root, Mode mode) : mode_(mode) {
  const std::string prefix = mode == Mode::kTrain ? "train" : "t10k";
  const std::string images_path = find_file(root, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_file(root, prefix + "-labels-idx1-ubyte");
  const detail::IdxArray images = detail::read_idx_ubyte(images_path, detail::kIdxImagesMagic, kContext);
  const detail::IdxArray labels = detail::read_idx_ubyte(labels_path, detail::kIdxLabelsMagic, kContext);

  if (images.dims[1] != kImageSize || images.dims[2] != kImageSize) {
    throw IOError(std::string(kContext) + ": " + images_path + ": images are " + std::to_string(images.dims[1]) + "x" +
                  std::to_string(images.dims[2]) + ", expected 28x28: not Fashion-MNIST");
  }
  const std::int64_t count = images.dims[0];
  if (labels.dims[0] != count) {
    throw IOError(std::string(kContext) + ": " + images_path + " holds " + std::to_string(count) + " images but " +
                  labels_path + " holds " + std::to_string(labels.dims[0]) +
                  " labels: the files do not belong together (a partial copy or a mix of versions?)");
  }
  for (std::size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= kNumClasses) {
      throw IOError(std::string(kContext) + ": " + labels_path + ": label " + std::to_string(labels.data[i]) +
                    " at index " + std::to_string(i) + " is outside [0, 10): the file is corrupt");
    }
  }

  // One pass: (byte / 255 - mean) / std = byte * scale + shift.
  images_ = at::empty({count, 1, kImageSize, kImageSize}, at::TensorOptions().dtype(at::kFloat));
  float* out = images_.data_ptr<float>();
  const auto scale = static_cast<float>(1.0 / (255.0 * kStd));
  const auto shift = static_cast<float>(-kMean / kStd);
  const std::uint8_t* in = images.data.data();
  const std::size_t pixels = images.data.size();
  for (std::size_t i = 0; i < pixels; ++i) out[i] = static_cast<float>(in[i]) * scale + shift;
  targets_ = at::empty({count}, at::TensorOptions().dtype(at::kLong));
  std::int64_t* target = targets_.data_ptr<std::int64_t>();
  for (std::int64_t i = 0; i < count; ++i) target[i] = labels.data[static_cast<std::size_t>(i)];
}

torch::data::Example<> FashionMNIST::get(std::size_t index) {
  const auto n = static_cast<std::size_t>(images_.size(0));
  if (index >= n) {
    throw InvalidArgument(std::string(kContext) + "::get: index " + std::to_string(index) +
                          " is out of range for the " + (is_train() ? "training" : "test") + " split of " +
                          std::to_string(n) + " images");
  }
  const auto i = static_cast<std::int64_t>(index);
  return {images_[i], targets_[i]};
}

torch::optional<std::size_t> FashionMNIST::size() const { return static_cast<std::size_t>(images_.size(0)); }

const std::array<std::string_view, FashionMNIST::kNumClasses>& FashionMNIST::class_names() noexcept {
  static constexpr std::array<std::string_view, kNumClasses> kNames = {
      "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
  return kNames;
}

}  // namespace ddp::data
