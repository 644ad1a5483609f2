// Element-wise reduction kernels over untyped buffers, shared by every CPU backend. Written as
// plain loops that the compiler vectorizes.
#pragma once

#include <cstddef>

#include "ddp/types.h"

namespace ddp::detail {

// out[i] = a[i] (op) b[i] for i < count. `out` may alias `a` or `b`. float16 and bfloat16 are
// computed in float32 and rounded once. AVG is not an element-wise op: reduce with SUM, then
// call divide(). Requires op_is_valid(dtype, op).
void reduce(void* out, const void* a, const void* b, std::size_t count, DataType dtype, ReduceOp op);

// data[i] /= divisor (integers: truncated toward zero, as torch does for AVG).
void divide(void* data, std::size_t count, DataType dtype, std::int64_t divisor);

// float16/bfloat16 -> float32 and back (round to nearest even).
void widen_to_float32(const void* in, float* out, std::size_t count, DataType dtype);
void narrow_from_float32(const float* in, void* out, std::size_t count, DataType dtype);

// Whether `op` is defined for `dtype` (bitwise ops need integers).
bool op_is_valid(DataType dtype, ReduceOp op);

}  // namespace ddp::detail
