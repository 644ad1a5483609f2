// PowerSGD's one-pass decompression (powersgd/low_rank.h) against the definition: matrix = P Q^T
// and error = the values before minus P Q^T, for float and double, only the rows asked for.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "powersgd/low_rank.h"

namespace ddp::test {
namespace {

template <typename T>
void check(std::int64_t n, std::int64_t m, std::int64_t r, bool with_error, std::int64_t from, std::int64_t to) {
  std::vector<T> p(n * r), q(m * r), qt(r * m), matrix(n * m), error(n * m, T(-7)), row(m);
  for (std::int64_t i = 0; i < n * r; ++i) p[i] = static_cast<T>(std::sin(0.3 * i + 1));
  for (std::int64_t i = 0; i < m * r; ++i) q[i] = static_cast<T>(std::cos(0.7 * i));
  for (std::int64_t j = 0; j < m; ++j) {
    for (std::int64_t k = 0; k < r; ++k) qt[k * m + j] = q[j * r + k];
  }
  for (std::int64_t i = 0; i < n * m; ++i) matrix[i] = static_cast<T>(0.01 * i - 3);
  const std::vector<T> before = matrix;
  detail::decompress_rows(p.data(), qt.data(), matrix.data(), with_error ? error.data() : nullptr, row.data(), from, to,
                          m, r);
  const double tolerance = sizeof(T) == 4 ? 1e-5 : 1e-12;
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < m; ++j) {
      const std::int64_t at = i * m + j;
      if (i < from || i >= to) {
        ASSERT_EQ(matrix[at], before[at]) << "row " << i << " is outside [" << from << ", " << to << ")";
        ASSERT_EQ(error[at], T(-7)) << "row " << i;
        continue;
      }
      double pq = 0;
      for (std::int64_t k = 0; k < r; ++k) pq += static_cast<double>(p[i * r + k]) * q[j * r + k];
      ASSERT_NEAR(matrix[at], pq, tolerance * std::max(1.0, std::abs(pq))) << "(" << i << ", " << j << ")";
      if (with_error) {
        ASSERT_NEAR(error[at], before[at] - pq, tolerance * std::max(1.0, std::abs(static_cast<double>(before[at]))))
            << i << ", " << j;
      } else {
        ASSERT_EQ(error[at], T(-7)) << "no error asked for";
      }
    }
  }
}

TEST(PowerSgdLowRank, DecompressesEveryRowWithItsError) {
  check<float>(13, 37, 4, true, 0, 13);
  check<double>(13, 37, 3, true, 0, 13);
  check<float>(5, 1024, 1, true, 0, 5);
}

TEST(PowerSgdLowRank, WithoutAnErrorOnlyTheMatrixIsWritten) {
  check<float>(9, 17, 2, false, 0, 9);
  check<double>(9, 17, 4, false, 0, 9);
}

TEST(PowerSgdLowRank, OnlyTheRowsOfItsRangeAreTouched) {
  check<float>(20, 33, 4, true, 5, 12);
  check<double>(20, 33, 2, false, 19, 20);
}

}  // namespace
}  // namespace ddp::test
