// The training loss one rank has seen, as sums: the window since the last progress report, and
// the epoch's earlier windows. Every rank keeps its own; the reported mean is their sum over ranks.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

struct LossSums {
  double window_sum = 0, window_count = 0;  // since the last report
  double epoch_sum = 0, epoch_count = 0;    // this epoch's closed windows

  void add(double loss) {
    window_sum += loss;
    window_count += 1;
  }
  // At a progress report (every rank at the same steps): the window joins the epoch's sums.
  void close_window() {
    epoch_sum += window_sum;
    epoch_count += window_count;
    window_sum = window_count = 0;
  }

  // For a checkpoint, which keeps every rank's own sums: a resumed epoch then adds the same
  // numbers in the same order as an uninterrupted one, and reports the same mean to the last bit.
  std::vector<double> values() const { return {window_sum, window_count, epoch_sum, epoch_count}; }
  static LossSums from_values(const std::vector<double>& v) {
    if (v.size() != 4) throw std::invalid_argument("loss sums hold 4 numbers, not " + std::to_string(v.size()));
    return {v[0], v[1], v[2], v[3]};
  }
};
