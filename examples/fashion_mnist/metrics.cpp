#include "metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>

namespace {

constexpr int kFields = 7;

std::string fmt(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

// One chart: polylines of `series` (value per epoch) in a box at (x0, y0) of w x h.
void chart(std::ostringstream& svg, double x0, double y0, double w, double h, const std::string& title,
           const std::vector<std::pair<std::string, std::vector<double>>>& series, const char* tick_format,
           const std::vector<std::string>& colors) {
  double lo = INFINITY, hi = -INFINITY;
  std::size_t n = 0;
  for (const auto& [name, values] : series) {
    for (double v : values) lo = std::min(lo, v), hi = std::max(hi, v);
    n = std::max(n, values.size());
  }
  if (n == 0) return;
  if (hi - lo < 1e-9) lo -= 0.5, hi += 0.5;
  const double pad = (hi - lo) * 0.08;
  lo -= pad, hi += pad;
  auto px = [&](std::size_t i) { return x0 + (n == 1 ? w / 2 : w * static_cast<double>(i) / static_cast<double>(n - 1)); };
  auto py = [&](double v) { return y0 + h - h * (v - lo) / (hi - lo); };
  svg << "<text x='" << x0 + w / 2 << "' y='" << y0 - 14 << "' text-anchor='middle' font-size='15'>" << title << "</text>\n";
  svg << "<rect x='" << x0 << "' y='" << y0 << "' width='" << w << "' height='" << h
      << "' fill='none' stroke='#999'/>\n";
  for (int t = 0; t <= 4; ++t) {
    const double v = lo + (hi - lo) * t / 4.0;
    svg << "<line x1='" << x0 << "' x2='" << x0 + w << "' y1='" << py(v) << "' y2='" << py(v)
        << "' stroke='#eee'/><text x='" << x0 - 6 << "' y='" << py(v) + 4 << "' text-anchor='end' font-size='11'>"
        << fmt(tick_format, v) << "</text>\n";
  }
  for (std::size_t i = 0; i < n; ++i) {
    svg << "<text x='" << px(i) << "' y='" << y0 + h + 16 << "' text-anchor='middle' font-size='11'>" << i + 1
        << "</text>\n";
  }
  svg << "<text x='" << x0 + w / 2 << "' y='" << y0 + h + 34 << "' text-anchor='middle' font-size='12'>epoch</text>\n";
  for (std::size_t s = 0; s < series.size(); ++s) {
    const auto& [name, values] = series[s];
    svg << "<polyline fill='none' stroke-width='2' stroke='" << colors[s] << "' points='";
    for (std::size_t i = 0; i < values.size(); ++i) svg << px(i) << "," << py(values[i]) << " ";
    svg << "'/>\n";
    for (std::size_t i = 0; i < values.size(); ++i) {
      svg << "<circle r='3' fill='" << colors[s] << "' cx='" << px(i) << "' cy='" << py(values[i]) << "'/>\n";
    }
    svg << "<text x='" << x0 + 10 << "' y='" << y0 + 18 + 16 * static_cast<double>(s) << "' font-size='12' fill='"
        << colors[s] << "'>" << name << "</text>\n";
  }
}

}  // namespace

std::string to_csv(const std::vector<EpochMetrics>& rows) {
  std::ostringstream out;
  out << "epoch,train_loss,test_loss,test_accuracy,lr,seconds,samples_per_second\n";
  for (const auto& r : rows) {
    out << r.epoch << "," << fmt("%.6f", r.train_loss) << "," << fmt("%.6f", r.test_loss) << ","
        << fmt("%.6f", r.test_accuracy) << "," << fmt("%.6g", r.lr) << "," << fmt("%.3f", r.seconds) << ","
        << fmt("%.1f", r.samples_per_second) << "\n";
  }
  return out.str();
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
  chart(svg, 70, 50, 330, 240, "Loss", {{"train loss", train}, {"test loss", test}}, "%.3f", {"#1f77b4", "#d62728"});
  chart(svg, 540, 50, 330, 240, "Test accuracy (%)", {{"test accuracy", accuracy}}, "%.1f", {"#2ca02c"});
  svg << "</svg>\n";
  return svg.str();
}

std::vector<double> flatten(const std::vector<EpochMetrics>& rows) {
  std::vector<double> v;
  for (const auto& r : rows) {
    v.insert(v.end(), {static_cast<double>(r.epoch), r.train_loss, r.test_loss, r.test_accuracy, r.lr, r.seconds,
                       r.samples_per_second});
  }
  return v;
}

std::vector<EpochMetrics> unflatten(const std::vector<double>& v) {
  std::vector<EpochMetrics> rows;
  for (std::size_t i = 0; i + kFields <= v.size(); i += kFields) {
    rows.push_back({static_cast<int>(v[i]), v[i + 1], v[i + 2], v[i + 3], v[i + 4], v[i + 5], v[i + 6]});
  }
  return rows;
}
