#include "state_dict/weights.h"

#include <algorithm>

#include "util/strings.h"

namespace ddp::detail::weights {

namespace {
constexpr std::uint64_t kLimit = std::uint64_t{1} << 62;
}

std::optional<std::uint64_t> element_count(const std::vector<std::int64_t>& sizes) {
  std::uint64_t count = 1;
  for (const auto size : sizes) {
    if (size < 0) return std::nullopt;
    if (size == 0) count = 0;
  }
  if (count == 0) return 0;
  for (const auto size : sizes) {
    if (static_cast<std::uint64_t>(size) > kLimit / count) return std::nullopt;
    count *= static_cast<std::uint64_t>(size);
  }
  return count;
}

std::optional<std::string> view_error(const TensorRecord& t, std::uint64_t numel) {
  if (t.sizes.size() != t.strides.size()) {
    return cat(t.sizes.size(), " sizes but ", t.strides.size(), " strides");
  }
  if (t.sizes.size() > kMaxDims) return cat(t.sizes.size(), " dimensions, more than ", kMaxDims);
  if (t.offset < 0 || static_cast<std::uint64_t>(t.offset) > kLimit) return cat("a storage offset of ", t.offset);
  const auto count = element_count(t.sizes);
  if (!count) return cat("sizes ", shape_string(t.sizes), " that are negative or too large");
  for (const auto stride : t.strides) {
    if (stride < 0) return cat("a negative stride (strides ", shape_string(t.strides), ")");
  }
  if (*count == 0) {
    if (static_cast<std::uint64_t>(t.offset) > numel) {
      return cat("a storage offset of ", t.offset, " in a storage of ", numel, " elements");
    }
    return std::nullopt;
  }
  // The last element: offset + sum((size - 1) * stride), each term checked against overflow.
  std::uint64_t last = static_cast<std::uint64_t>(t.offset);
  for (std::size_t d = 0; d < t.sizes.size(); ++d) {
    const auto span = static_cast<std::uint64_t>(t.sizes[d] - 1);
    const auto stride = static_cast<std::uint64_t>(t.strides[d]);
    if (stride != 0 && span > (kLimit - last) / stride) return std::string("strides that overflow");
    last += span * stride;
  }
  if (last >= numel) {
    return cat("sizes ", shape_string(t.sizes), ", strides ", shape_string(t.strides), " and offset ", t.offset,
               " that reach element ", last, " of a storage of ", numel, " elements");
  }
  return std::nullopt;
}

std::vector<std::int64_t> contiguous_strides(const std::vector<std::int64_t>& sizes) {
  std::vector<std::int64_t> strides(sizes.size(), 1);
  for (std::size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * std::max<std::int64_t>(sizes[d], 1);
  return strides;
}

void normalize_bools(StorageRecord& storage) {
  if (storage.type != ElementType::Bool) return;
  for (auto& byte : storage.bytes) byte = byte != 0 ? 1 : 0;
}

bool decode_utf8(std::string_view text, std::vector<std::uint32_t>* points) {
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const int extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
    if (extra < 0 || text.size() - i <= static_cast<std::size_t>(extra)) return false;
    std::uint32_t point = extra == 0 ? c : c & (0x3Fu >> extra);
    for (int k = 1; k <= extra; ++k) {
      const auto next = static_cast<unsigned char>(text[i + static_cast<std::size_t>(k)]);
      if ((next >> 6) != 0x2) return false;
      point = (point << 6) | (next & 0x3Fu);
    }
    static constexpr std::uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (point < kMin[extra] || point > 0x10FFFF || (point >= 0xD800 && point <= 0xDFFF)) return false;
    if (points) points->push_back(point);
    i += static_cast<std::size_t>(extra) + 1;
  }
  return true;
}

std::string shape_string(const std::vector<std::int64_t>& sizes) {
  std::string out = "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

}  // namespace ddp::detail::weights
