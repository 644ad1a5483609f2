// The numbers the example prints: thousands separated as in "sample 21,504 of 60,000".
#include <gtest/gtest.h>

#include <limits>

#include "fashion_mnist/progress.h"

namespace {

TEST(WithThousands, GroupsOfThree) {
  EXPECT_EQ(with_thousands(0), "0");
  EXPECT_EQ(with_thousands(999), "999");
  EXPECT_EQ(with_thousands(1000), "1,000");
  EXPECT_EQ(with_thousands(21504), "21,504");
  EXPECT_EQ(with_thousands(60000), "60,000");
  EXPECT_EQ(with_thousands(1234567), "1,234,567");
  EXPECT_EQ(with_thousands(-1234), "-1,234");
  EXPECT_EQ(with_thousands(std::numeric_limits<std::int64_t>::min()), "-9,223,372,036,854,775,808");
}

}  // namespace
