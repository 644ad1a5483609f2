// Per-epoch metrics and the CSV a user can load anywhere (plot.h draws them).
#pragma once

#include <string>
#include <vector>

struct EpochMetrics {
  int epoch = 0;          // 1-based
  double train_loss = 0;  // mean over the epoch's batches and every rank
  double test_loss = 0;
  double test_accuracy = 0;       // in [0, 1]
  double lr = 0;                  // at the end of the epoch
  double seconds = 0;             // wall time of the epoch (training and test); a resumed epoch adds the
                                  // time its earlier runs spent up to the checkpoint it resumed from
  double samples_per_second = 0;  // the epoch's training images per second, all ranks together
};

std::string to_csv(const std::vector<EpochMetrics>& rows);

// Rows as numbers (for a checkpoint) and back.
std::vector<double> flatten(const std::vector<EpochMetrics>& rows);
std::vector<EpochMetrics> unflatten(const std::vector<double>& values);
