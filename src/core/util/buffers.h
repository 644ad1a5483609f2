// Small helpers over ddp::Buffer for backends that stage data on the host: a copy of a buffer's
// bytes, a buffer of the same type over scratch storage, a sub-range of a buffer, and a memcpy
// that may be handed empty or in-place ranges.
#pragma once

#include <cstddef>
#include <cstring>
#include <vector>

#include "ddp/types.h"

namespace ddp::detail {

inline std::vector<char> copy_of(const Buffer& b) {
  const auto* bytes = static_cast<const char*>(b.data);
  return std::vector<char>(bytes, bytes + b.bytes());
}

// `count` elements of `like`'s type at `data`, or in `storage`.
inline Buffer over(void* data, Buffer like, std::size_t count) {
  like.data = data;
  like.count = count;
  return like;
}
inline Buffer over(std::vector<char>& storage, Buffer like, std::size_t count) {
  return over(storage.data(), like, count);
}

// memcpy, except that nothing is copied for no bytes (whose pointers may be null) or onto itself.
inline void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

// Elements [begin, begin + length) of `data`.
inline Buffer part(Buffer data, std::size_t begin, std::size_t length) {
  data.data = static_cast<char*>(data.data) + begin * element_size(data.dtype);
  data.count = length;
  return data;
}

}  // namespace ddp::detail
