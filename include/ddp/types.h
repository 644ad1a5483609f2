// Plain value types shared by every layer: element types, reduction operators, devices and the
// untyped buffers that backends move. No LibTorch types appear here.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ddp {

// Element types a collective can carry. float16 and bfloat16 are reduced with float32 arithmetic.
enum class DataType : std::uint8_t {
  Float32,
  Float64,
  Float16,
  BFloat16,
  Int8,
  UInt8,
  Int32,
  Int64,
};

// Bytes per element of `type`.
std::size_t element_size(DataType type);
// "float32", "int64", ...
std::string_view to_string(DataType type);
bool is_floating_point(DataType type);

// Reduction operators, as torch.distributed.ReduceOp. AVG is SUM divided by the group size
// (integers: truncated). BAND, BOR and BXOR are valid for integer types only.
enum class ReduceOp : std::uint8_t { SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR };

// "SUM", "AVG", ...
std::string_view to_string(ReduceOp op);

// Where a buffer lives.
struct Device {
  enum class Type : std::uint8_t { CPU, CUDA };
  Type type = Type::CPU;
  int index = -1;  // CUDA device ordinal; -1 for the CPU

  bool is_cpu() const { return type == Type::CPU; }
  bool is_cuda() const { return type == Type::CUDA; }
  bool operator==(const Device&) const = default;
};

// "cpu" or "cuda:N".
std::string to_string(const Device& device);

// A contiguous run of `count` elements of `dtype` at `data` on `device`. A view: it owns nothing,
// and the memory must stay valid until the operation that uses it has completed.
struct Buffer {
  void* data = nullptr;
  std::size_t count = 0;
  DataType dtype = DataType::Float32;
  Device device = {};
  // CUDA buffers only: when the data is ready. A cudaEvent_t recorded on the stream that produces
  // the data, at the point the operation must wait for (the LibTorch front records one on the
  // current stream as it issues the op); the op's device work is queued after it. It must stay
  // valid until the op's Work completes. Null: the op waits for the work queued on the device's
  // legacy default stream when it starts. A completed Work means the device work is done, so its
  // results can be used from any stream (docs/NCCL.md).
  void* ready = nullptr;

  std::size_t bytes() const { return count * element_size(dtype); }
};

// Builds a Buffer over an array of a C++ arithmetic type.
template <typename T>
Buffer buffer_of(T* data, std::size_t count);

// PyTorch's default collective timeout.
inline constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(30);

}  // namespace ddp

// Implementation details.
#include <cstdint>
#include <type_traits>

namespace ddp {
namespace detail {

template <typename T>
constexpr DataType data_type_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, float>) return DataType::Float32;
  else if constexpr (std::is_same_v<U, double>) return DataType::Float64;
  // Integers by width and sign, so that int, long and long long all find their type.
  else if constexpr (std::is_integral_v<U> && std::is_signed_v<U> && sizeof(U) == 1) return DataType::Int8;
  else if constexpr (std::is_integral_v<U> && std::is_unsigned_v<U> && sizeof(U) == 1 && !std::is_same_v<U, bool>)
    return DataType::UInt8;
  else if constexpr (std::is_integral_v<U> && std::is_signed_v<U> && sizeof(U) == 4) return DataType::Int32;
  else if constexpr (std::is_integral_v<U> && std::is_signed_v<U> && sizeof(U) == 8) return DataType::Int64;
  else static_assert(sizeof(U) == 0, "buffer_of: no ddp::DataType for this C++ type; build a Buffer by hand");
}

}  // namespace detail

template <typename T>
Buffer buffer_of(T* data, std::size_t count) {
  return Buffer{const_cast<std::remove_cv_t<T>*>(data), count, detail::data_type_of<T>(), Device{}};
}

}  // namespace ddp
