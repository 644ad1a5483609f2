#include "flight/last_words.h"

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "flight/recorder.h"
#include "group/progress.h"
#include "util/log.h"

namespace ddp::detail {
namespace {

struct Notes {
  std::mutex mutex;
  std::uint64_t next = 1;
  std::map<std::uint64_t, std::function<void(const std::string&)>> notes;
};

Notes& notes() {
  static auto* n = new Notes;  // never destroyed: a thread may end the process during static destruction
  return *n;
}

}  // namespace

std::uint64_t add_last_words(std::function<void(const std::string&)> note) {
  auto& n = notes();
  std::lock_guard lock(n.mutex);
  n.notes.emplace(n.next, std::move(note));
  return n.next++;
}

void remove_last_words(std::uint64_t id) {
  auto& n = notes();
  std::lock_guard lock(n.mutex);
  n.notes.erase(id);
}

void say_last_words(const std::string& message, std::chrono::milliseconds within) noexcept {
  try {
    log(LogLevel::Error, message);
    std::vector<std::function<void(const std::string&)>> taken;
    {
      auto& n = notes();
      std::lock_guard lock(n.mutex);
      for (const auto& [id, note] : n.notes) taken.push_back(note);
    }
    // On a thread of its own, so that a store that does not answer bounds the wait, not the end.
    struct Done {
      std::mutex mutex;
      std::condition_variable cv;
      bool done = false;
    };
    auto done = std::make_shared<Done>();
    std::thread([done, taken = std::move(taken), message] {
      // Where this rank was goes first: a peer that reads the note, or sees the death, reads it too.
      try {
        publish_progress_now();
      } catch (...) {
      }
      for (const auto& note : taken) {
        try {
          note(message);
        } catch (...) {
        }
      }
      try {
        FlightRecorder::instance().dump(message);
      } catch (...) {
      }
      std::lock_guard lock(done->mutex);
      done->done = true;
      done->cv.notify_all();
    }).detach();
    std::unique_lock lock(done->mutex);
    done->cv.wait_for(lock, within, [&] { return done->done; });
  } catch (...) {
  }
}

}  // namespace ddp::detail
