// Reading IDX files (the MNIST family's format), gzip'd or plain, with every length checked.
// No LibTorch here: the result is raw bytes and dimensions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddp::detail {

// The magic numbers of unsigned-byte IDX files: 0x00000801 (1 dimension: labels) and
// 0x00000803 (3 dimensions: images).
inline constexpr std::uint32_t kIdxLabelsMagic = 2049;
inline constexpr std::uint32_t kIdxImagesMagic = 2051;

struct IdxArray {
  std::vector<std::int64_t> dims;  // from the header, e.g. {60000, 28, 28}
  std::vector<std::uint8_t> data;  // the product of dims bytes, row-major
};

// Reads the IDX file at `path` (gzip'd or not: zlib reads both) whose magic number must be
// `magic` (kIdxLabelsMagic or kIdxImagesMagic, which fix the number of dimensions).
// `context` prefixes every message (e.g. "FashionMNIST"). Throws IOError when the file cannot be
// opened, is not gzip-decodable, has another magic number, is shorter or longer than its header
// announces, or announces an absurd size (over 4 GiB). Never reads past what it allocated.
IdxArray read_idx_ubyte(const std::string& path, std::uint32_t magic, const std::string& context);

}  // namespace ddp::detail
