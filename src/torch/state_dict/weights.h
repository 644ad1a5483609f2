// What a weight file holds, without LibTorch: named tensors as views (type, sizes, strides,
// offset) into storages of raw little-endian bytes. The readers (PyTorch's zip and legacy
// formats, safetensors) produce it from untrusted bytes, the writers consume it, and the LibTorch
// front turns it into tensors and back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "state_dict/element_type.h"

namespace ddp::detail::weights {

// A view into storages[storage]: PyTorch's (sizes, strides, storage offset), all in elements.
struct TensorRecord {
  ElementType type = ElementType::Float32;
  std::vector<std::int64_t> sizes, strides;
  std::int64_t offset = 0;
  std::size_t storage = 0;
};

struct StorageRecord {
  ElementType type = ElementType::Float32;
  std::uint64_t numel = 0;
  std::string bytes;  // numel * element_size(type) bytes, little-endian
};

struct Weights {
  std::string format;  // how the file was read: "PyTorch zip", "PyTorch legacy", "safetensors"
  std::vector<std::pair<std::string, TensorRecord>> tensors;  // in the file's order
  std::vector<StorageRecord> storages;
  std::vector<std::pair<std::string, std::string>> metadata;  // safetensors' __metadata__
  std::vector<std::string> notes;                             // what the reader skipped or changed
};

// Most dimensions a tensor of a file may have (PyTorch's own limit is 64 as well, for CUDA).
inline constexpr std::size_t kMaxDims = 64;

// Why `t` does not fit in a storage of `numel` elements (negative sizes or strides, more than
// kMaxDims dimensions, an element past the end, an overflow), or nullopt when it fits.
std::optional<std::string> view_error(const TensorRecord& t, std::uint64_t numel);

// The number of elements of `sizes`, or nullopt when it overflows 2^62 or a size is negative.
std::optional<std::uint64_t> element_count(const std::vector<std::int64_t>& sizes);

// Row-major strides of `sizes`.
std::vector<std::int64_t> contiguous_strides(const std::vector<std::int64_t>& sizes);

// Bool storages hold 0 or 1 per byte: any other byte becomes 1 (reading a bool that is neither
// is undefined behaviour in C++).
void normalize_bools(StorageRecord& storage);

// Whether `text` is valid UTF-8 (no overlong forms, no surrogates); its code points go to
// `points` when given.
bool decode_utf8(std::string_view text, std::vector<std::uint32_t>* points = nullptr);

// "[3, 4]".
std::string shape_string(const std::vector<std::int64_t>& sizes);

}  // namespace ddp::detail::weights
