// Reading train_fashion_mnist's --sample-log: which samples the job trained on in each epoch,
// counting only work that was kept. Each round of a ddprun job (a process that resumed from the
// last checkpoint) writes round-<R>-rank-<K>.ids, a line per batch: "EPOCH STEP: ID ID ...". A
// later round resumes from a checkpoint at the step before its first: what earlier rounds did
// after that step was lost with them (and is done again), so it does not count.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace ddp::test {

struct SampleLogLine {
  int round = 0;
  int epoch = 0;
  long step = 0;
  std::vector<long> ids;
};

inline std::vector<SampleLogLine> read_sample_log(const std::filesystem::path& dir) {
  std::vector<SampleLogLine> lines;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    int round = 0, rank = 0;
    if (std::sscanf(name.c_str(), "round-%d-rank-%d.ids", &round, &rank) != 2) continue;
    std::ifstream in(entry.path());
    for (std::string text; std::getline(in, text);) {
      SampleLogLine line;
      line.round = round;
      std::istringstream fields(text);
      char colon = 0;
      fields >> line.epoch >> line.step >> colon;
      for (long id; fields >> id;) line.ids.push_back(id);
      lines.push_back(std::move(line));
    }
  }
  return lines;
}

// Epoch -> how many times the job trained on each sample id in it, keeping only the work that
// counted: a round's lines after the step the next round (that wrote any) resumed from are dropped.
inline std::map<int, std::map<long, int>> samples_per_epoch(const std::vector<SampleLogLine>& lines) {
  std::map<int, long> first_step;  // round -> its first step
  for (const auto& l : lines) {
    auto it = first_step.find(l.round);
    if (it == first_step.end() || l.step < it->second) first_step[l.round] = l.step;
  }
  std::map<int, std::map<long, int>> seen;
  for (const auto& l : lines) {
    auto next = first_step.upper_bound(l.round);
    if (next != first_step.end() && l.step >= next->second) continue;  // lost with its round
    for (long id : l.ids) ++seen[l.epoch][id];
  }
  return seen;
}

}  // namespace ddp::test
