// PowerSGD's decompression on plain arrays (no LibTorch: compiled at -O3 like the core's kernels,
// where the row loops vectorize).
#pragma once

#include <cstdint>

namespace ddp::detail {

// Rows [from, to) of matrix = P Q^T and, where `error` is not null, error = the matrix's values
// before minus P Q^T, in one pass over the matrix (each row of P Q^T is made in `row`, m elements,
// in cache). P is n x r and `qt` Q^T, r x m; matrix and error n x m; all row-major.
template <typename T>
void decompress_rows(const T* p, const T* qt, T* matrix, T* error, T* row, std::int64_t from, std::int64_t to,
                     std::int64_t m, std::int64_t r);

extern template void decompress_rows<float>(const float*, const float*, float*, float*, float*, std::int64_t,
                                            std::int64_t, std::int64_t, std::int64_t);
extern template void decompress_rows<double>(const double*, const double*, double*, double*, double*, std::int64_t,
                                             std::int64_t, std::int64_t, std::int64_t);

}  // namespace ddp::detail
