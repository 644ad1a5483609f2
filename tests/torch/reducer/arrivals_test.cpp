// How often gradients arrive, against how often they should, without processes.
#include <gtest/gtest.h>

#include "reducer/arrivals.h"

namespace ddp::detail {
namespace {

using V = Arrivals::Verdict;

TEST(Arrivals, WithoutStaticGraphEachGradientArrivesOnce) {
  Arrivals a(3, /*static_graph=*/false);
  EXPECT_FALSE(a.learning());
  EXPECT_EQ(a.arrive(2), V::Ready);
  EXPECT_EQ(a.arrive(0), V::Ready);
  EXPECT_EQ(a.arrive(2), V::TooMany);
  EXPECT_EQ(a.first_arrivals(), (std::vector<std::size_t>{2, 0}));
  EXPECT_EQ(a.short_of_expected(), (std::vector<std::size_t>{1}));
  a.reset();
  EXPECT_EQ(a.arrive(2), V::Ready);
  EXPECT_TRUE(a.never_expected().empty());
}

TEST(Arrivals, StaticGraphCountsTheFirstBackwardThenExpectsTheSame) {
  Arrivals a(3, /*static_graph=*/true);
  EXPECT_TRUE(a.learning());
  EXPECT_EQ(a.arrive(1), V::Counted);
  EXPECT_EQ(a.arrive(0), V::Counted);
  EXPECT_EQ(a.arrive(1), V::Counted);  // a parameter in two re-entrant backward passes
  EXPECT_TRUE(a.short_of_expected().empty());
  EXPECT_EQ(a.arrived(), (std::vector<int>{1, 2, 0}));
  a.learn(a.arrived());
  EXPECT_FALSE(a.learning());
  EXPECT_EQ(a.never_expected(), (std::vector<std::size_t>{2}));  // unused: complete at once
  a.reset();
  EXPECT_EQ(a.arrive(1), V::Waiting);
  EXPECT_EQ(a.short_of_expected(), (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(a.arrive(1), V::Ready);
  EXPECT_EQ(a.arrive(0), V::Ready);
  EXPECT_TRUE(a.short_of_expected().empty());
  EXPECT_EQ(a.arrive(1), V::TooMany);  // the graph changed
  EXPECT_EQ(a.arrive(2), V::TooMany);  // an unused parameter is used now
}

}  // namespace
}  // namespace ddp::detail
