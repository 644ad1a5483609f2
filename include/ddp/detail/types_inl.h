// Implementation details of ddp/types.h.
#pragma once

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
