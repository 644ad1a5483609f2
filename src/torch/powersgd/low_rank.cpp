#include "powersgd/low_rank.h"

namespace ddp::detail {

template <typename T>
void decompress_rows(const T* p, const T* qt, T* matrix, T* error, T* row, std::int64_t from, std::int64_t to,
                     std::int64_t m, std::int64_t r) {
  T* __restrict out = row;
  for (std::int64_t i = from; i < to; ++i) {
    const T* pi = p + i * r;
    const T* __restrict q0 = qt;
    const T p0 = pi[0];
    for (std::int64_t j = 0; j < m; ++j) out[j] = p0 * q0[j];
    for (std::int64_t k = 1; k < r; ++k) {
      const T pk = pi[k];
      const T* __restrict qk = qt + k * m;
      for (std::int64_t j = 0; j < m; ++j) out[j] += pk * qk[j];
    }
    T* __restrict mi = matrix + i * m;
    if (error) {
      T* __restrict ei = error + i * m;
      for (std::int64_t j = 0; j < m; ++j) {
        ei[j] = mi[j] - out[j];
        mi[j] = out[j];
      }
    } else {
      for (std::int64_t j = 0; j < m; ++j) mi[j] = out[j];
    }
  }
}

template void decompress_rows<float>(const float*, const float*, float*, float*, float*, std::int64_t, std::int64_t,
                                     std::int64_t, std::int64_t);
template void decompress_rows<double>(const double*, const double*, double*, double*, double*, std::int64_t,
                                      std::int64_t, std::int64_t, std::int64_t);

}  // namespace ddp::detail
