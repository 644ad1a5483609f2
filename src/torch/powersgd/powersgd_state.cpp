// PowerSGDState: option checks, statistics, and its save/load with a checkpoint.
#include <ATen/ATen.h>

#include <algorithm>
#include <sstream>

#include "ddp/error.h"
#include "ddp/torch/powersgd.h"
#include "util/strings.h"

namespace ddp::comm_hooks {
namespace {

using detail::cat;

const PowerSGDOptions& checked(const PowerSGDOptions& o) {
  auto bad = [](const std::string& what) { throw InvalidArgument(cat("PowerSGDState: ", what)); };
  if (o.matrix_approximation_rank < 1) {
    bad(cat("matrix_approximation_rank is ", o.matrix_approximation_rank, "; it must be at least 1 (1-4 is typical)"));
  }
  if (o.start_powerSGD_iter < 0) bad(cat("start_powerSGD_iter is ", o.start_powerSGD_iter, "; it must be >= 0"));
  if ((o.use_error_feedback || o.warm_start) && o.start_powerSGD_iter <= 1) {
    bad(cat("start_powerSGD_iter is ", o.start_powerSGD_iter,
            "; with use_error_feedback or warm_start it must be > 1, "
            "because DDP rebuilds its buckets after the first iteration, which invalidates what PowerSGD memorized"));
  }
  if (!(o.min_compression_rate >= 0)) {
    bad(cat("min_compression_rate is ", o.min_compression_rate, "; it must be >= 0 (2 is the default)"));
  }
  if (!(o.orthogonalization_epsilon >= 0)) {
    bad(cat("orthogonalization_epsilon is ", o.orthogonalization_epsilon, "; it must be >= 0 (e.g. 1e-8)"));
  }
  return o;
}

void write_tensors(torch::serialize::OutputArchive& archive, const char* key,
                   const std::map<std::size_t, at::Tensor>& tensors) {
  torch::serialize::OutputArchive sub(archive.compilation_unit());
  for (const auto& [bucket, tensor] : tensors) sub.write(std::to_string(bucket), tensor, /*is_buffer=*/true);
  archive.write(key, sub);
}

// Reads what the archive holds under `key`, of the kind `is` accepts, or throws naming the key.
c10::IValue read_value(torch::serialize::InputArchive& archive, const char* key, bool (c10::IValue::*is)() const,
                       const char* kind) {
  c10::IValue value;
  if (!archive.try_read(key, value)) {
    throw Error(cat("PowerSGDState::load: the archive has no '", key,
                    "'; it holds no PowerSGD state (write one with PowerSGDState::save)"));
  }
  if (!(value.*is)()) throw Error(cat("PowerSGDState::load: '", key, "' is a ", value.tagKind(), ", not ", kind));
  return value;
}

std::map<std::size_t, at::Tensor> read_tensors(torch::serialize::InputArchive& archive, const char* key) {
  torch::serialize::InputArchive sub;
  if (!archive.try_read(key, sub)) {
    throw Error(cat("PowerSGDState::load: the archive has no '", key,
                    "'; it holds no PowerSGD state (write one with PowerSGDState::save)"));
  }
  std::map<std::size_t, at::Tensor> tensors;
  for (const auto& name : sub.keys()) {
    std::size_t bucket = 0, used = 0;
    try {
      bucket = std::stoul(name, &used);
    } catch (const std::exception&) {
    }
    if (used == 0 || used != name.size()) {
      throw Error(cat("PowerSGDState::load: '", key, "' holds '", name, "', which is not a bucket index"));
    }
    at::Tensor tensor;
    sub.read(name, tensor, /*is_buffer=*/true);
    tensors[bucket] = tensor;
  }
  return tensors;
}

}  // namespace

PowerSGDState::PowerSGDState(PowerSGDOptions options) : options_(checked(options)), rng_(options.random_seed) {}

double PowerSGDState::compression_rate() const {
  return numel_after_ > 0 ? static_cast<double>(numel_before_) / static_cast<double>(numel_after_) : 0.0;
}

void PowerSGDState::save(torch::serialize::OutputArchive& archive) const {
  const PowerSGDOptions& o = options_;
  archive.write("matrix_approximation_rank", c10::IValue(static_cast<std::int64_t>(o.matrix_approximation_rank)));
  archive.write("start_powerSGD_iter", c10::IValue(o.start_powerSGD_iter));
  archive.write("min_compression_rate", c10::IValue(o.min_compression_rate));
  archive.write("use_error_feedback", c10::IValue(o.use_error_feedback));
  archive.write("warm_start", c10::IValue(o.warm_start));
  archive.write("orthogonalization_epsilon", c10::IValue(o.orthogonalization_epsilon));
  archive.write("random_seed", c10::IValue(static_cast<std::int64_t>(o.random_seed)));
  archive.write("batch_tensors_with_same_shape", c10::IValue(o.batch_tensors_with_same_shape));
  archive.write("iter", c10::IValue(iter_));
  archive.write("total_numel_before_compression", c10::IValue(numel_before_));
  archive.write("total_numel_after_compression", c10::IValue(numel_after_));
  std::ostringstream rng;
  rng << rng_;  // the standard's text form of the whole MT19937 state
  archive.write("rng", c10::IValue(rng.str()));
  write_tensors(archive, "error_dict", error_);
  write_tensors(archive, "p_memory_dict", p_);
  write_tensors(archive, "q_memory_dict", q_);
  write_tensors(archive, "layout_dict", layout_);
}

void PowerSGDState::load(torch::serialize::InputArchive& archive) {
  using V = c10::IValue;
  auto integer = [&](const char* key) { return read_value(archive, key, &V::isInt, "an integer").toInt(); };
  auto real = [&](const char* key) { return read_value(archive, key, &V::isDouble, "a float").toDouble(); };
  auto boolean = [&](const char* key) { return read_value(archive, key, &V::isBool, "a bool").toBool(); };
  PowerSGDOptions o;
  const std::int64_t rank = integer("matrix_approximation_rank");
  o.matrix_approximation_rank = static_cast<int>(std::clamp<std::int64_t>(rank, -1, 1 << 30));
  o.start_powerSGD_iter = integer("start_powerSGD_iter");
  o.min_compression_rate = real("min_compression_rate");
  o.use_error_feedback = boolean("use_error_feedback");
  o.warm_start = boolean("warm_start");
  o.orthogonalization_epsilon = real("orthogonalization_epsilon");
  const std::int64_t seed = integer("random_seed");
  if (seed < 0 || seed > 0xFFFFFFFFLL)
    throw Error(cat("PowerSGDState::load: 'random_seed' is ", seed, ", not a 32-bit seed"));
  o.random_seed = static_cast<std::uint32_t>(seed);
  o.batch_tensors_with_same_shape = boolean("batch_tensors_with_same_shape");
  checked(o);
  const std::int64_t iter = integer("iter");
  const std::int64_t before = integer("total_numel_before_compression");
  const std::int64_t after = integer("total_numel_after_compression");
  std::mt19937 rng;
  std::istringstream text(read_value(archive, "rng", &V::isString, "a string").toStringRef());
  text >> rng;
  if (text.fail()) throw Error("PowerSGDState::load: 'rng' is not the text of an MT19937 state (std::mt19937's <<)");
  auto error = read_tensors(archive, "error_dict");
  auto p = read_tensors(archive, "p_memory_dict");
  auto q = read_tensors(archive, "q_memory_dict");
  auto layout = read_tensors(archive, "layout_dict");
  // Everything read: now replace the state as a whole.
  options_ = o;
  iter_ = iter;
  numel_before_ = before;
  numel_after_ = after;
  rng_ = rng;
  error_ = std::move(error);
  p_ = std::move(p);
  q_ = std::move(q);
  layout_ = std::move(layout);
}

}  // namespace ddp::comm_hooks
