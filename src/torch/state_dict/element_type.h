// The element types a weight file can hold, with their names in each format: PyTorch's storage
// classes (torch.FloatStorage), safetensors' dtype strings ("F32") and PyTorch's dtype names.
// No LibTorch here: the file readers that use it are fuzzed without it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ddp::detail::weights {

enum class ElementType : std::uint8_t { Float32, Float64, Float16, BFloat16, Int8, UInt8, Int16, Int32, Int64, Bool };

std::size_t element_size(ElementType type);
// "float32", as PyTorch writes torch.float32.
std::string_view name(ElementType type);
// "FloatStorage" (the class in torch.save's persistent ids).
std::string_view storage_class(ElementType type);
// "F32".
std::string_view safetensors_name(ElementType type);

std::optional<ElementType> from_storage_class(std::string_view name);
std::optional<ElementType> from_safetensors_name(std::string_view name);

}  // namespace ddp::detail::weights
