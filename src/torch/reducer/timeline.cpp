#include "reducer/timeline.h"

#include <cstring>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::detail {

std::unique_ptr<Timeline> Timeline::open(const std::string& setting, int rank) {
  if (setting.empty()) return nullptr;
  std::string path = setting;
  const auto at = path.find("{rank}");
  if (at != std::string::npos) {
    path.replace(at, 6, std::to_string(rank));
  } else {
    path += ".rank" + std::to_string(rank) + ".json";
  }
  return std::make_unique<Timeline>(path, rank);
}

Timeline::Timeline(const std::string& path, int rank) : path_(path), rank_(rank), origin_(Clock::now()) {
  file_ = std::fopen(path.c_str(), "w");
  if (!file_) throw IOError(cat("DDP_TIMELINE: cannot write ", quote(path, 512), ": ", std::strerror(errno)));
  std::fprintf(file_, "[\n");
  for (int lane : {kCompute, kCommunication}) {
    std::fprintf(
        file_, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"%s\"}},\n",
        rank_, lane, lane == kCompute ? "compute (forward, backward)" : "communication (bucket all-reduce)");
  }
  std::fprintf(file_, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}},\n",
               rank_, rank_);
  std::fflush(file_);
}

Timeline::~Timeline() {
  std::lock_guard lock(mutex_);
  std::fprintf(file_, "{}]\n");
  std::fclose(file_);
}

void Timeline::span(const std::string& name, Lane lane, Clock::time_point start, Clock::time_point end,
                    const std::string& args) {
  using std::chrono::duration;
  const double ts = duration<double, std::micro>(start - origin_).count();
  const double dur = duration<double, std::micro>(end - start).count();
  std::lock_guard lock(mutex_);
  std::fprintf(
      file_,
      "{\"name\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {%s}},\n",
      name.c_str(), rank_, static_cast<int>(lane), ts, dur, args.c_str());
  std::fflush(file_);
}

}  // namespace ddp::detail
