#include "metrics.h"

#include <cstdio>
#include <sstream>

namespace {

constexpr int kFields = 7;

std::string fmt(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
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
