#include "workers/stopped_alone.h"

namespace ddp::launcher {

bool stopped_alone(int running, int running_stopped, bool other_nodes_exited, int world_size) {
  return running > 0 && running_stopped == running && running < world_size && other_nodes_exited;
}

StoppedAloneClock::Change StoppedAloneClock::observe(bool alone, std::chrono::steady_clock::time_point now) {
  if (!alone) {
    if (!since_) return Change::None;
    since_.reset();
    expired_ = false;
    return Change::Ended;
  }
  if (!since_) {
    since_ = now;
    return Change::Began;
  }
  if (!expired_ && now - *since_ >= bound_) {
    expired_ = true;
    return Change::Expired;
  }
  return Change::None;
}

}  // namespace ddp::launcher
