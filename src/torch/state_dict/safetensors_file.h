// The safetensors format (Hugging Face), without LibTorch: an 8-byte little-endian header length
// N, N bytes of JSON ({"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
// ..., "__metadata__": {"key": "value"}}, padded with spaces), then the tensors' little-endian
// bytes, which the offsets must cover exactly, without gaps or overlaps.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "state_dict/weights.h"

namespace ddp::detail::weights {

// The largest header read, as the safetensors library's own limit.
inline constexpr std::uint64_t kMaxSafetensorsHeader = 100'000'000;

// The tensors in data order, each in a storage of its own, and the __metadata__. Throws IOError
// naming the fault: a header length past the file or over the limit, bad JSON, an unknown dtype,
// offsets that lie outside the data, disagree with the shape, overlap or leave gaps.
Weights read_safetensors(std::string_view bytes);

// A safetensors file of these tensors, in their order, and `weights.metadata`. Each tensor must
// be the whole of its own storage, contiguous (throws InvalidArgument otherwise).
std::string write_safetensors(const Weights& weights);

}  // namespace ddp::detail::weights
