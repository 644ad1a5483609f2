#include "accelerator/settings.h"

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp {

MixedPrecision parse_mixed_precision(const std::string& text, const std::string& where) {
  if (text == "no") return MixedPrecision::kNo;
  if (text == "fp16") return MixedPrecision::kFP16;
  if (text == "bf16") return MixedPrecision::kBF16;
  throw InvalidArgument(where + " is '" + text + "'; expected no, fp16 or bf16" +
                        (text == "fp8" ? " (fp8 needs Transformer Engine, which ddp does not have)" : ""));
}

const char* to_string(MixedPrecision precision) {
  switch (precision) {
    case MixedPrecision::kNo: return "no";
    case MixedPrecision::kFP16: return "fp16";
    case MixedPrecision::kBF16: return "bf16";
  }
  return "?";
}

namespace detail {

namespace {

int parse_steps(const std::string& text, const std::string& where) {
  const auto value = parse_int(text);
  if (!value || *value < 1 || *value > 1'000'000) {
    throw InvalidArgument(where + " is '" + text + "'; expected a number of micro-steps per optimizer step, 1 or more");
  }
  return static_cast<int>(*value);
}

bool parse_flag(const std::string& text, const std::string& where) {
  const auto t = lower(text);
  if (t == "1" || t == "true" || t == "yes") return true;
  if (t == "0" || t == "false" || t == "no" || t.empty()) return false;
  throw InvalidArgument(where + " is '" + text + "'; expected true or false");
}

}  // namespace

AcceleratorSettings resolve_settings(const AcceleratorOptions& options, const EnvLookup& env) {
  AcceleratorSettings s;
  if (options.mixed_precision) {
    s.mixed_precision = *options.mixed_precision;
  } else if (auto v = env("ACCELERATE_MIXED_PRECISION")) {
    s.mixed_precision = parse_mixed_precision(lower(*v), "ACCELERATE_MIXED_PRECISION (ddprun --mixed_precision)");
  }
  if (options.gradient_accumulation_steps) {
    if (*options.gradient_accumulation_steps < 1) {
      throw InvalidArgument("AcceleratorOptions::gradient_accumulation_steps is " +
                            std::to_string(*options.gradient_accumulation_steps) + "; it must be 1 or more");
    }
    s.gradient_accumulation_steps = *options.gradient_accumulation_steps;
  } else if (auto v = env("ACCELERATE_GRADIENT_ACCUMULATION_STEPS")) {
    s.gradient_accumulation_steps =
        parse_steps(*v, "ACCELERATE_GRADIENT_ACCUMULATION_STEPS (ddprun --gradient_accumulation_steps)");
  }
  if (options.cpu) {
    s.cpu = *options.cpu;
  } else if (auto v = env("ACCELERATE_USE_CPU")) {
    s.cpu = parse_flag(*v, "ACCELERATE_USE_CPU (ddprun --cpu)");
  }
  return s;
}

std::vector<std::int64_t> real_rows(std::int64_t dataset_size, int world, std::int64_t start, std::int64_t batch,
                                    std::int64_t batch_size, std::int64_t rows) {
  std::vector<std::int64_t> kept;
  for (int r = 0; r < world; ++r) {
    for (std::int64_t i = 0; i < rows; ++i) {
      if (start + (batch * batch_size + i) * world + r < dataset_size) kept.push_back(r * rows + i);
    }
  }
  return kept;
}

}  // namespace detail
}  // namespace ddp
