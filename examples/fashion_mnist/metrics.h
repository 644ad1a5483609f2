// Per-epoch metrics: the CSV a user can load anywhere, and an SVG plot a browser opens.
#pragma once

#include <string>
#include <vector>

struct EpochMetrics {
  int epoch = 0;               // 1-based
  double train_loss = 0;       // mean over the epoch's batches and every rank
  double test_loss = 0;
  double test_accuracy = 0;    // in [0, 1]
  double lr = 0;               // at the end of the epoch
  double seconds = 0;          // wall time of the epoch (training and test)
  double samples_per_second = 0;  // training images per second, all ranks together
};

std::string to_csv(const std::vector<EpochMetrics>& rows);

// Two panels: training and test loss per epoch; test accuracy per epoch.
std::string render_svg(const std::vector<EpochMetrics>& rows);

// Rows as numbers (for a checkpoint) and back.
std::vector<double> flatten(const std::vector<EpochMetrics>& rows);
std::vector<EpochMetrics> unflatten(const std::vector<double>& values);
