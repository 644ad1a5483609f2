#include "plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace {

// 1, 2 or 5 times a power of ten near `x` (> 0): the nearest when `round`, else the next up.
double nice_number(double x, bool round) {
  const double power = std::pow(10.0, std::floor(std::log10(x)));
  const double f = x / power;
  double nice;
  if (round) nice = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
  else nice = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
  return nice * power;
}

constexpr double kTitleHeight = 20, kLegendHeight = 18, kGap = 8;
constexpr double kLeftMargin = 54, kRightMargin = 12, kBottomMargin = 40;  // value labels; epoch labels
constexpr double kSwatch = 22, kEntryGap = 18;

struct Series {
  std::string name;
  std::vector<double> values;
  std::string color;
};

// One chart in `panel`: title, legend, grid with value labels, epoch labels, lines, frame last.
void chart(std::ostringstream& svg, const Box& panel, const std::string& title, const std::vector<Series>& series) {
  std::vector<std::string> names;
  double lo = INFINITY, hi = -INFINITY;
  std::size_t n = 0;
  for (const auto& s : series) {
    names.push_back(s.name);
    for (double v : s.values) lo = std::min(lo, v), hi = std::max(hi, v);
    n = std::max(n, s.values.size());
  }
  const PanelLayout layout = panel_layout(panel, names);
  const Box& area = layout.plot;
  svg << "<text class='title' x='" << area.x + area.w / 2 << "' y='" << layout.title.bottom() - 4
      << "' text-anchor='middle' font-size='15'>" << title << "</text>\n";
  for (std::size_t s = 0; s < series.size(); ++s) {
    const Box& e = layout.legend_entries[s];
    const double mid = e.y + e.h / 2;
    svg << "<g class='legend'><line x1='" << e.x << "' x2='" << e.x + kSwatch - 6 << "' y1='" << mid << "' y2='" << mid
        << "' stroke-width='2' stroke='" << series[s].color << "'/><text x='" << e.x + kSwatch << "' y='" << mid + 4
        << "' font-size='12'>" << series[s].name << "</text></g>\n";
  }
  if (n > 0) {
    const double pad = (hi - lo) * 0.04;  // keeps the points off the frame
    const Ticks y = nice_ticks(lo - pad, hi + pad, 5);
    const Ticks x = nice_ticks(1, static_cast<double>(n), 8, 1);
    const double inset = 12;  // the first and last epochs' points off the frame's sides
    auto px = [&](double epoch) { return area.x + inset + (area.w - 2 * inset) * (epoch - x.lo) / (x.hi - x.lo); };
    auto py = [&](double v) { return area.bottom() - area.h * (v - y.lo) / (y.hi - y.lo); };
    for (double v : y.values) {
      svg << "<line class='grid' x1='" << area.x << "' x2='" << area.right() << "' y1='" << py(v) << "' y2='" << py(v)
          << "' stroke='#e4e4e4'/><text class='value' x='" << area.x - 6 << "' y='" << py(v) + 4
          << "' text-anchor='end' font-size='11'>" << tick_label(v, y.decimals) << "</text>\n";
    }
    for (double e : x.values) {
      svg << "<text class='epoch' x='" << px(e) << "' y='" << area.bottom() + 16
          << "' text-anchor='middle' font-size='11'>" << tick_label(e, x.decimals) << "</text>\n";
    }
    for (const auto& s : series) {
      svg << "<polyline class='series' fill='none' stroke-width='2' stroke='" << s.color << "' points='";
      for (std::size_t i = 0; i < s.values.size(); ++i)
        svg << px(static_cast<double>(i + 1)) << "," << py(s.values[i]) << " ";
      svg << "'/>\n";
      for (std::size_t i = 0; i < s.values.size(); ++i) {
        svg << "<circle r='3' fill='" << s.color << "' cx='" << px(static_cast<double>(i + 1)) << "' cy='"
            << py(s.values[i]) << "'/>\n";
      }
    }
  }
  svg << "<text x='" << area.x + area.w / 2 << "' y='" << area.bottom() + 34
      << "' text-anchor='middle' font-size='12'>epoch</text>\n";
  svg << "<rect class='frame' x='" << area.x << "' y='" << area.y << "' width='" << area.w << "' height='" << area.h
      << "' fill='none' stroke='#888'/>\n";
}

}  // namespace

Ticks nice_ticks(double min, double max, int target, double min_step) {
  if (!std::isfinite(min) || !std::isfinite(max) || min > max || target < 2) {
    throw std::invalid_argument("nice_ticks: needs finite min <= max and target >= 2, not [" + std::to_string(min) +
                                ", " + std::to_string(max) + "] with target " + std::to_string(target));
  }
  if (max - min <= 1e-12 * std::max(1.0, std::abs(max))) {  // one value: a range around it
    const double half = min == 0 ? 1 : std::abs(min) * 0.05;
    min -= half, max += half;
  }
  const double range = nice_number(max - min, false);
  Ticks t;
  t.step = std::max(nice_number(range / (target - 1), true), min_step);
  const double first = std::floor(min / t.step + 1e-9), last = std::ceil(max / t.step - 1e-9);
  for (double k = first; k <= last; ++k) t.values.push_back(k * t.step);
  t.lo = t.values.front();
  t.hi = t.values.back();
  t.decimals = std::max(0, static_cast<int>(-std::floor(std::log10(t.step) + 1e-9)));
  return t;
}

std::string tick_label(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  std::string s = text;
  if (s.find_first_not_of("-0.") == std::string::npos && s[0] == '-') s.erase(0, 1);  // "-0.00" -> "0.00"
  return s;
}

bool overlaps(const Box& a, const Box& b) {
  return a.x < b.right() && b.x < a.right() && a.y < b.bottom() && b.y < a.bottom();
}

PanelLayout panel_layout(const Box& panel, const std::vector<std::string>& series_names, double char_width) {
  PanelLayout l;
  l.title = {panel.x, panel.y, panel.w, kTitleHeight};
  const double left = panel.x + kLeftMargin, width = panel.w - kLeftMargin - kRightMargin;
  l.legend = {left, l.title.bottom() + kGap / 2, width, kLegendHeight};
  const double top = l.legend.bottom() + kGap;
  l.plot = {left, top, width, panel.bottom() - kBottomMargin - top};
  if (l.plot.w < 40 || l.plot.h < 40) {
    throw std::invalid_argument("panel_layout: a panel of " + std::to_string(panel.w) + " x " +
                                std::to_string(panel.h) + " leaves no room for the plot");
  }
  double x = l.legend.x;
  for (const auto& name : series_names) {
    const double w = kSwatch + char_width * static_cast<double>(name.size());
    l.legend_entries.push_back({x, l.legend.y, w, l.legend.h});
    x += w + kEntryGap;
  }
  if (!l.legend_entries.empty() && l.legend_entries.back().right() > l.legend.right()) {
    throw std::invalid_argument("panel_layout: the legend's entries need " +
                                std::to_string(l.legend_entries.back().right() - l.legend.x) + " px, the panel has " +
                                std::to_string(l.legend.w));
  }
  return l;
}

std::string render_svg(const std::vector<EpochMetrics>& rows) {
  std::vector<double> train, test, accuracy;
  for (const auto& r : rows) {
    train.push_back(r.train_loss);
    test.push_back(r.test_loss);
    accuracy.push_back(100 * r.test_accuracy);
  }
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='900' height='360' font-family='sans-serif'>\n"
      << "<rect width='900' height='360' fill='white'/>\n";
  chart(svg, {10, 12, 430, 340}, "Loss", {{"train loss", train, "#1f77b4"}, {"test loss", test, "#d62728"}});
  chart(svg, {460, 12, 430, 340}, "Test accuracy (%)", {{"test accuracy", accuracy, "#2ca02c"}});
  svg << "</svg>\n";
  return svg.str();
}
