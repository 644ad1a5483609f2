// metrics.svg's pure parts: round ticks, a layout in which no line crosses the legend, and a
// plot whose lines stay inside the frame that is drawn last.
#include "fashion_mnist/plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace {

// Mantissa of a positive step: 1, 2 or 5 for a nice one.
double mantissa(double step) { return step / std::pow(10.0, std::floor(std::log10(step) + 1e-9)); }

bool near(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b)); }

TEST(NiceTicks, TheReportedRangesGetRoundSteps) {
  // A loss from 0.337 to 0.61: labels 0.3, 0.4, ..., not 0.337, 0.405, ...
  Ticks loss = nice_ticks(0.337, 0.61);
  EXPECT_DOUBLE_EQ(loss.step, 0.1);
  EXPECT_EQ(loss.decimals, 1);
  std::vector<std::string> labels;
  for (double v : loss.values) labels.push_back(tick_label(v, loss.decimals));
  EXPECT_EQ(labels, (std::vector<std::string>{"0.3", "0.4", "0.5", "0.6", "0.7"}));
  EXPECT_DOUBLE_EQ(nice_ticks(0.337, 0.61, 10).step, 0.05) << "more ticks asked, a finer round step";
  // Accuracy 88.8% to 90.5%: halves, not 88.8, 89.2, ...
  Ticks accuracy = nice_ticks(88.8, 90.5);
  EXPECT_DOUBLE_EQ(accuracy.step, 0.5);
  EXPECT_EQ(tick_label(accuracy.values.front(), accuracy.decimals), "88.5");
  EXPECT_EQ(tick_label(accuracy.values.back(), accuracy.decimals), "90.5");
  // Whole numbers stay whole.
  Ticks big = nice_ticks(0, 1000);
  EXPECT_DOUBLE_EQ(big.step, 200);
  EXPECT_EQ(big.decimals, 0);
  EXPECT_EQ(tick_label(big.values.back(), big.decimals), "1000");
}

TEST(NiceTicks, CoverAnyRangeWithOneTwoOrFiveStepsAndAFewTicks) {
  std::mt19937 random(7);
  for (int trial = 0; trial < 5000; ++trial) {
    const double scale = std::pow(10.0, std::uniform_real_distribution<double>(-6, 6)(random));
    const double a = std::uniform_real_distribution<double>(-1, 1)(random) * scale;
    const double b = a + std::uniform_real_distribution<double>(0, 1)(random) * scale;
    const int target = 2 + static_cast<int>(random() % 8);
    SCOPED_TRACE("[" + std::to_string(a) + ", " + std::to_string(b) + "], target " + std::to_string(target));
    const Ticks t = nice_ticks(a, b, target);
    const double m = mantissa(t.step);
    EXPECT_TRUE(near(m, 1) || near(m, 2) || near(m, 5)) << t.step;
    EXPECT_LE(t.lo, a + t.step * 1e-6);
    EXPECT_GE(t.hi, b - t.step * 1e-6);
    ASSERT_GE(t.values.size(), 2u);
    EXPECT_LE(t.values.size(), static_cast<std::size_t>(2 * target + 2));
    for (std::size_t i = 0; i < t.values.size(); ++i) {
      EXPECT_TRUE(near(t.values[i], t.lo + static_cast<double>(i) * t.step)) << i;
      EXPECT_TRUE(near(t.values[i] / t.step, std::round(t.values[i] / t.step))) << "not a multiple of the step";
    }
    // The labels show each tick exactly, and no two alike.
    for (std::size_t i = 1; i < t.values.size(); ++i) {
      EXPECT_NE(tick_label(t.values[i - 1], t.decimals), tick_label(t.values[i], t.decimals));
    }
    EXPECT_TRUE(near(std::stod(tick_label(t.step, t.decimals)), t.step)) << tick_label(t.step, t.decimals);
  }
}

TEST(NiceTicks, OneValueMinimumStepsAndBadInput) {
  const Ticks one = nice_ticks(0.25, 0.25);
  EXPECT_LT(one.lo, 0.25);
  EXPECT_GT(one.hi, 0.25);
  const Ticks zero = nice_ticks(0, 0);
  EXPECT_LT(zero.lo, 0);
  EXPECT_GT(zero.hi, 0);
  // Epochs: never a step below one.
  const Ticks epochs = nice_ticks(1, 3, 8, 1);
  EXPECT_EQ(epochs.values, (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(nice_ticks(1, 1, 8, 1).step, 1);
  EXPECT_EQ(tick_label(-0.0001, 2), "0.00");
  EXPECT_EQ(tick_label(-0.5, 1), "-0.5");
  try {
    nice_ticks(2, 1);
    FAIL() << "min > max accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("min <= max"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nice_ticks(0, INFINITY), std::invalid_argument);
  EXPECT_THROW(nice_ticks(0, 1, 1), std::invalid_argument);
}

TEST(PanelLayout, TheLegendHasABandOfItsOwnAboveThePlot) {
  const Box panel{10, 12, 430, 340};
  const PanelLayout l = panel_layout(panel, {"train loss", "test loss"});
  EXPECT_FALSE(overlaps(l.legend, l.plot));
  EXPECT_FALSE(overlaps(l.title, l.legend));
  EXPECT_LE(l.legend.bottom(), l.plot.y);
  ASSERT_EQ(l.legend_entries.size(), 2u);
  EXPECT_FALSE(overlaps(l.legend_entries[0], l.legend_entries[1]));
  for (const Box& e : l.legend_entries) {
    EXPECT_GE(e.x, l.legend.x);
    EXPECT_LE(e.right(), l.legend.right());
    EXPECT_FALSE(overlaps(e, l.plot));
  }
  // Room for the value labels on the left and the epoch labels below, inside the panel.
  EXPECT_GE(l.plot.x - panel.x, 40);
  EXPECT_GE(panel.bottom() - l.plot.bottom(), 34);
  EXPECT_LE(l.plot.right(), panel.right());
}

TEST(PanelLayout, APanelTooSmallOrALegendTooWideIsSaid) {
  try {
    panel_layout({0, 0, 80, 60}, {"a"});
    FAIL() << "a tiny panel accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no room for the plot"), std::string::npos) << e.what();
  }
  try {
    panel_layout({0, 0, 200, 200}, {std::string(40, 'x')});
    FAIL() << "a legend wider than its panel accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("legend"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(overlaps({0, 0, 10, 10}, {10, 0, 10, 10})) << "sharing an edge is not overlapping";
  EXPECT_TRUE(overlaps({0, 0, 10, 10}, {9, 9, 10, 10}));
}

// The numbers of attribute `name` in every element of class `cls`, in document order.
std::vector<std::vector<double>> attributes(const std::string& svg, const std::string& cls,
                                            const std::vector<std::string>& names) {
  std::vector<std::vector<double>> out;
  const std::regex element("<[a-z]+ class='" + cls + "'[^>]*>");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), element); it != std::sregex_iterator(); ++it) {
    const std::string tag = it->str();
    std::vector<double> values;
    for (const auto& name : names) {
      std::smatch m;
      if (std::regex_search(tag, m, std::regex(" " + name + "='([-0-9.e]+)'"))) values.push_back(std::stod(m[1]));
    }
    out.push_back(values);
  }
  return out;
}

TEST(Plot, LinesStayInsideTheFrameWhichIsDrawnLastAndTheLegendIsOutsideIt) {
  // The run of the report: the train loss starts above the test loss, where a legend in the
  // corner of the plot sat.
  const std::vector<EpochMetrics> rows = {{1, 0.61, 0.42, 0.848, 0.04, 30, 2000},
                                          {2, 0.39, 0.36, 0.872, 0.02, 30, 2000},
                                          {3, 0.337, 0.30, 0.905, 0.0025, 30, 2000}};
  const std::string svg = render_svg(rows);
  const auto frames = attributes(svg, "frame", {"x", "y", "width", "height"});
  ASSERT_EQ(frames.size(), 2u) << svg;
  // Each panel draws its frame after its grid and its lines.
  const auto second_panel = svg.find("Test accuracy");
  ASSERT_NE(second_panel, std::string::npos);
  const auto first_frame = svg.find("class='frame'");
  EXPECT_GT(first_frame, svg.rfind("class='grid'", second_panel));
  EXPECT_GT(first_frame, svg.rfind("class='series'", second_panel));
  EXPECT_LT(first_frame, second_panel);
  EXPECT_GT(svg.rfind("class='frame'"), svg.rfind("class='grid'"));
  EXPECT_GT(svg.rfind("class='frame'"), svg.rfind("class='series'"));
  // Every point of every line is inside its panel's frame.
  std::size_t lines = 0;
  const std::regex polyline("<polyline class='series'[^>]*points='([^']*)'");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), polyline); it != std::sregex_iterator(); ++it, ++lines) {
    const auto& f = frames[static_cast<std::size_t>(it->position()) < second_panel ? 0 : 1];
    std::istringstream points((*it)[1].str());
    for (std::string point; points >> point;) {
      const double x = std::stod(point.substr(0, point.find(','))), y = std::stod(point.substr(point.find(',') + 1));
      EXPECT_GT(x, f[0]) << point << ": on or left of the frame";
      EXPECT_LT(x, f[0] + f[2]) << point << ": on or right of the frame";
      EXPECT_GT(y, f[1]) << point << ": on or above the frame's top";
      EXPECT_LT(y, f[1] + f[3]) << point << ": on or below the frame's bottom";
    }
  }
  EXPECT_EQ(lines, 3u);
  // The legends' texts are above the frames (in their band), not inside.
  const std::regex legend("<g class='legend'>.*?<text x='([-0-9.e]+)' y='([-0-9.e]+)'[^>]*>([^<]*)</text>");
  std::size_t entries = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), legend); it != std::sregex_iterator(); ++it, ++entries) {
    const auto& f = frames[static_cast<std::size_t>(it->position()) < second_panel ? 0 : 1];
    EXPECT_LT(std::stod((*it)[2]), f[1]) << (*it)[3] << " is inside the plot";
  }
  EXPECT_EQ(entries, 3u);
  // Value labels are round: equal steps of 1, 2 or 5 times a power of ten, in each panel.
  for (int panel = 0; panel < 2; ++panel) {
    const std::string part = panel == 0 ? svg.substr(0, second_panel) : svg.substr(second_panel);
    std::vector<double> values;
    const std::regex label("<text class='value'[^>]*>([-0-9.]+)</text>");
    for (auto it = std::sregex_iterator(part.begin(), part.end(), label); it != std::sregex_iterator(); ++it) {
      values.push_back(std::stod((*it)[1]));
    }
    ASSERT_GE(values.size(), 3u) << part;
    const double step = values[1] - values[0];
    const double m = mantissa(step);
    EXPECT_TRUE(near(m, 1) || near(m, 2) || near(m, 5)) << step;
    for (std::size_t i = 1; i < values.size(); ++i) EXPECT_NEAR(values[i] - values[i - 1], step, 1e-9);
  }
}

TEST(Plot, OneEpochIsAPointInTheMiddle) {
  const std::string svg = render_svg({{1, 0.5, 0.4, 0.8, 0.05, 10, 100}});
  const auto frames = attributes(svg, "frame", {"x", "width"});
  ASSERT_EQ(frames.size(), 2u);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex("<circle r='3' fill='[^']*' cx='([-0-9.e]+)'")));
  EXPECT_NEAR(std::stod(m[1]), frames[0][0] + frames[0][1] / 2, 1e-6);
  EXPECT_NE(svg.find("class='epoch'"), std::string::npos);
}

}  // namespace
