// DDP_TIMELINE: a Chrome trace per rank (open it in https://ui.perfetto.dev or chrome://tracing)
// with forward, backward, each bucket's fill and all-reduce from launch to completion, and the
// wait at the end of backward. Events are appended as they end, so a crashed run still leaves a
// readable trace (the trace format allows the closing bracket to be missing).
#pragma once

#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

namespace ddp::detail {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  enum Lane { kCompute = 1, kCommunication = 2 };

  // The timeline `setting` (the group's DDP_TIMELINE) asks for, or null when it is empty. "{rank}"
  // in the path is replaced by the rank; without it, ".rank<N>.json" is appended.
  static std::unique_ptr<Timeline> open(const std::string& setting, int rank);
  Timeline(const std::string& path, int rank);
  ~Timeline();

  // A span from `start` to `end` on `lane`; `args` is a JSON object body ("\"bytes\": 4") or empty.
  void span(const std::string& name, Lane lane, Clock::time_point start, Clock::time_point end,
            const std::string& args = "");
  const std::string& path() const { return path_; }

 private:
  std::mutex mutex_;
  std::FILE* file_ = nullptr;
  std::string path_;
  int rank_;
  Clock::time_point origin_;
};

}  // namespace ddp::detail
