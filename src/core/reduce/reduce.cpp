#include "reduce/reduce.h"

#include <algorithm>
#include <cstdint>

#include "reduce/half.h"

namespace ddp::detail {
namespace {

template <typename T, typename F>
void apply(void* out, const void* a, const void* b, std::size_t n, F f) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (std::size_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
}

template <typename T>
void reduce_typed(void* out, const void* a, const void* b, std::size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG: return apply<T>(out, a, b, n, [](T x, T y) { return static_cast<T>(x + y); });
    case ReduceOp::PRODUCT: return apply<T>(out, a, b, n, [](T x, T y) { return static_cast<T>(x * y); });
    case ReduceOp::MIN: return apply<T>(out, a, b, n, [](T x, T y) { return std::min(x, y); });
    case ReduceOp::MAX: return apply<T>(out, a, b, n, [](T x, T y) { return std::max(x, y); });
    case ReduceOp::BAND:
      if constexpr (std::is_integral_v<T>)
        return apply<T>(out, a, b, n, [](T x, T y) { return static_cast<T>(x & y); });
      break;
    case ReduceOp::BOR:
      if constexpr (std::is_integral_v<T>)
        return apply<T>(out, a, b, n, [](T x, T y) { return static_cast<T>(x | y); });
      break;
    case ReduceOp::BXOR:
      if constexpr (std::is_integral_v<T>)
        return apply<T>(out, a, b, n, [](T x, T y) { return static_cast<T>(x ^ y); });
      break;
  }
}

// 16-bit floats: widen a block to float32, reduce there, narrow once.
template <float (*Widen)(std::uint16_t), std::uint16_t (*Narrow)(float)>
void reduce_half(void* out, const void* a, const void* b, std::size_t n, ReduceOp op) {
  constexpr std::size_t kBlock = 1024;
  float fa[kBlock], fb[kBlock];
  auto* o = static_cast<std::uint16_t*>(out);
  const auto* x = static_cast<const std::uint16_t*>(a);
  const auto* y = static_cast<const std::uint16_t*>(b);
  for (std::size_t start = 0; start < n; start += kBlock) {
    const std::size_t m = std::min(kBlock, n - start);
    for (std::size_t i = 0; i < m; ++i) {
      fa[i] = Widen(x[start + i]);
      fb[i] = Widen(y[start + i]);
    }
    reduce_typed<float>(fa, fa, fb, m, op);
    for (std::size_t i = 0; i < m; ++i) o[start + i] = Narrow(fa[i]);
  }
}

template <typename T>
void divide_typed(void* data, std::size_t n, std::int64_t divisor) {
  auto* p = static_cast<T*>(data);
  if constexpr (std::is_floating_point_v<T>) {
    const T d = static_cast<T>(divisor);
    for (std::size_t i = 0; i < n; ++i) p[i] /= d;
  } else {
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / divisor);
  }
}

}  // namespace

void reduce(void* out, const void* a, const void* b, std::size_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::Float32: return reduce_typed<float>(out, a, b, count, op);
    case DataType::Float64: return reduce_typed<double>(out, a, b, count, op);
    case DataType::Float16: return reduce_half<fp16_to_float, float_to_fp16>(out, a, b, count, op);
    case DataType::BFloat16: return reduce_half<bf16_to_float, float_to_bf16>(out, a, b, count, op);
    case DataType::Int8: return reduce_typed<std::int8_t>(out, a, b, count, op);
    case DataType::UInt8: return reduce_typed<std::uint8_t>(out, a, b, count, op);
    case DataType::Int32: return reduce_typed<std::int32_t>(out, a, b, count, op);
    case DataType::Int64: return reduce_typed<std::int64_t>(out, a, b, count, op);
  }
}

void divide(void* data, std::size_t count, DataType dtype, std::int64_t divisor) {
  switch (dtype) {
    case DataType::Float32: return divide_typed<float>(data, count, divisor);
    case DataType::Float64: return divide_typed<double>(data, count, divisor);
    case DataType::Int8: return divide_typed<std::int8_t>(data, count, divisor);
    case DataType::UInt8: return divide_typed<std::uint8_t>(data, count, divisor);
    case DataType::Int32: return divide_typed<std::int32_t>(data, count, divisor);
    case DataType::Int64: return divide_typed<std::int64_t>(data, count, divisor);
    case DataType::Float16:
    case DataType::BFloat16: {
      auto* p = static_cast<std::uint16_t*>(data);
      const float d = static_cast<float>(divisor);
      const bool bf = dtype == DataType::BFloat16;
      for (std::size_t i = 0; i < count; ++i) {
        p[i] = bf ? float_to_bf16(bf16_to_float(p[i]) / d) : float_to_fp16(fp16_to_float(p[i]) / d);
      }
      return;
    }
  }
}

void widen_to_float32(const void* in, float* out, std::size_t count, DataType dtype) {
  const auto* p = static_cast<const std::uint16_t*>(in);
  if (dtype == DataType::BFloat16) {
    for (std::size_t i = 0; i < count; ++i) out[i] = bf16_to_float(p[i]);
  } else {
    for (std::size_t i = 0; i < count; ++i) out[i] = fp16_to_float(p[i]);
  }
}

void narrow_from_float32(const float* in, void* out, std::size_t count, DataType dtype) {
  auto* p = static_cast<std::uint16_t*>(out);
  if (dtype == DataType::BFloat16) {
    for (std::size_t i = 0; i < count; ++i) p[i] = float_to_bf16(in[i]);
  } else {
    for (std::size_t i = 0; i < count; ++i) p[i] = float_to_fp16(in[i]);
  }
}

bool op_is_valid(DataType dtype, ReduceOp op) {
  const bool bitwise = op == ReduceOp::BAND || op == ReduceOp::BOR || op == ReduceOp::BXOR;
  return !bitwise || !is_floating_point(dtype);
}

}  // namespace ddp::detail
