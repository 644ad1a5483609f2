#include "ddp/torch/data/synthetic.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>

#include <limits>
#include <string>

#include "ddp/error.h"

namespace ddp::data {
namespace {

constexpr const char* kWhere = "SyntheticClassification";

// splitmix64 (Steele, Lea, Flood 2014): a tiny, well-mixed generator whose output depends only on
// its 64-bit state, the same everywhere.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) : state_(state) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1) on a grid of 2^-23: exact in float32.
  float uniform() {
    return static_cast<float>(static_cast<std::int64_t>(next() >> 40) - (std::int64_t{1} << 23)) * 0x1p-23f;
  }

 private:
  std::uint64_t state_;
};

// The state of stream `stream` under `seed`: streams of one seed, and one stream under two seeds,
// start far apart.
std::uint64_t stream_state(std::uint64_t seed, std::uint64_t stream) {
  SplitMix64 mix(seed ^ (stream * 0xd1b54a32d192ed03ULL));
  mix.next();
  return mix.next();
}

constexpr std::uint64_t kTeacherStream = ~std::uint64_t{0};  // samples use streams 0 .. size - 1

}  // namespace

SyntheticClassification::SyntheticClassification(SyntheticOptions options) : options_(std::move(options)) {
  if (options_.size < 0) {
    throw InvalidArgument(std::string(kWhere) + ": size must be non-negative, got " + std::to_string(options_.size));
  }
  if (options_.shape.empty()) throw InvalidArgument(std::string(kWhere) + ": shape must have at least one dimension");
  numel_ = 1;
  for (std::int64_t d : options_.shape) {
    if (d < 1) {
      throw InvalidArgument(std::string(kWhere) + ": every dimension of shape must be at least 1, got " +
                            std::to_string(d));
    }
    numel_ *= d;
    if (numel_ > (std::int64_t{1} << 31)) {
      throw InvalidArgument(std::string(kWhere) + ": shape holds more than 2^31 values per input");
    }
  }
  if (options_.num_classes < 2) {
    throw InvalidArgument(std::string(kWhere) + ": num_classes must be at least 2, got " +
                          std::to_string(options_.num_classes));
  }
  auto teacher = std::make_shared<std::vector<float>>(static_cast<std::size_t>(options_.num_classes * numel_));
  SplitMix64 rng(stream_state(options_.seed, kTeacherStream));
  for (float& w : *teacher) w = rng.uniform();
  teacher_ = std::move(teacher);
}

torch::data::Example<> SyntheticClassification::get(std::size_t index) {
  if (index >= static_cast<std::size_t>(options_.size)) {
    throw InvalidArgument(std::string(kWhere) + "::get: index " + std::to_string(index) + " is out of range for " +
                          std::to_string(options_.size) + " samples");
  }
  at::Tensor input = at::empty(options_.shape, at::TensorOptions().dtype(at::kFloat));
  float* x = input.data_ptr<float>();
  SplitMix64 rng(stream_state(options_.seed, index));
  for (std::int64_t k = 0; k < numel_; ++k) x[k] = rng.uniform();
  // The label: the teacher's argmax (sums in double, in a fixed order: the same everywhere).
  const float* w = teacher_->data();
  std::int64_t label = 0;
  double best = -std::numeric_limits<double>::infinity();
  for (std::int64_t c = 0; c < options_.num_classes; ++c) {
    double score = 0;
    for (std::int64_t k = 0; k < numel_; ++k) score += static_cast<double>(w[c * numel_ + k]) * x[k];
    if (score > best) {
      best = score;
      label = c;
    }
  }
  return {input, at::scalar_tensor(label, at::TensorOptions().dtype(at::kLong))};
}

torch::optional<std::size_t> SyntheticClassification::size() const { return static_cast<std::size_t>(options_.size); }

}  // namespace ddp::data
