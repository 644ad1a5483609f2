// The numbers the example prints: thousands separated as in "sample 21,504 of 60,000".
#include <gtest/gtest.h>

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
}

}  // namespace
