// The reduction kernel of the shared-memory collectives: many sources in one pass, so that each
// byte is read once and the result written once (pairwise reduction would re-read and re-write
// the accumulator for every rank). Plain loops over L1-sized blocks that the compiler vectorizes;
// float16 goes through F16C when the CPU has it.
#pragma once

#include <cstddef>

#include "ddp/types.h"

namespace ddp::detail::shm {

// For i < count: r = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i], folded in that order (so
// every rank that reduces the same sources gets the same bits); written to dst[i] and to
// dst2[i] (either may be null). float16 and bfloat16 are accumulated in float32 and rounded once.
// AVG sums and divides by `n` (integers truncate toward zero, as torch does). A destination may
// alias a source. Requires n >= 1 and an op valid for dtype.
void reduce(void* dst, void* dst2, const void* const* srcs, int n, std::size_t count, DataType dtype, ReduceOp op);

}  // namespace ddp::detail::shm
