#include "state_dict/element_type.h"

#include <iterator>

namespace ddp::detail::weights {
namespace {

struct Row {
  ElementType type;
  std::size_t size;
  std::string_view name, storage, safetensors;
};

constexpr Row kRows[] = {
    {ElementType::Float32, 4, "float32", "FloatStorage", "F32"},
    {ElementType::Float64, 8, "float64", "DoubleStorage", "F64"},
    {ElementType::Float16, 2, "float16", "HalfStorage", "F16"},
    {ElementType::BFloat16, 2, "bfloat16", "BFloat16Storage", "BF16"},
    {ElementType::Int8, 1, "int8", "CharStorage", "I8"},
    {ElementType::UInt8, 1, "uint8", "ByteStorage", "U8"},
    {ElementType::Int16, 2, "int16", "ShortStorage", "I16"},
    {ElementType::Int32, 4, "int32", "IntStorage", "I32"},
    {ElementType::Int64, 8, "int64", "LongStorage", "I64"},
    {ElementType::Bool, 1, "bool", "BoolStorage", "BOOL"},
};

const Row& row(ElementType type) { return kRows[static_cast<std::size_t>(type)]; }

}  // namespace

std::size_t element_size(ElementType type) { return row(type).size; }
std::string_view name(ElementType type) { return row(type).name; }
std::string_view storage_class(ElementType type) { return row(type).storage; }
std::string_view safetensors_name(ElementType type) { return row(type).safetensors; }

std::optional<ElementType> from_storage_class(std::string_view name) {
  for (const auto& r : kRows) {
    if (r.storage == name) return r.type;
  }
  return std::nullopt;
}

std::optional<ElementType> from_safetensors_name(std::string_view name) {
  for (const auto& r : kRows) {
    if (r.safetensors == name) return r.type;
  }
  return std::nullopt;
}

constexpr bool rows_in_order() {
  for (std::size_t i = 0; i < std::size(kRows); ++i) {
    if (static_cast<std::size_t>(kRows[i].type) != i) return false;
  }
  return std::size(kRows) == static_cast<std::size_t>(ElementType::Bool) + 1;
}
static_assert(rows_in_order(), "one row per ElementType, in the enum's order");

}  // namespace ddp::detail::weights
