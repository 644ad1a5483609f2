#include "cpu/pipeline.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

namespace ddp::detail {

void run_pipelined(std::size_t chunks, const ChunkStage& first, const ChunkStage& second, const ChunkStage& third,
                   std::size_t window) {
  if (chunks <= 1) {
    for (std::size_t k = 0; k < chunks; ++k) {
      first(k);
      second(k);
      third(k);
    }
    return;
  }
  std::mutex mutex;
  std::condition_variable changed;
  std::size_t firsts = 0, seconds = 0;  // chunks through each stage
  bool stop = false;                    // the calling thread failed: the helper starts nothing new
  std::exception_ptr helper_error;
  std::thread helper([&] {
    try {
      for (std::size_t k = 0; k < chunks; ++k) {
        {
          std::unique_lock lock(mutex);
          changed.wait(lock, [&] { return firsts > k || stop; });
          if (stop) return;
        }
        second(k);
        {
          std::lock_guard lock(mutex);
          ++seconds;
        }
        changed.notify_all();
      }
    } catch (...) {
      std::lock_guard lock(mutex);
      helper_error = std::current_exception();
      changed.notify_all();
    }
  });
  const auto join = [&] {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    changed.notify_all();
    helper.join();
  };
  try {
    // The calling thread's order is fixed, so that every rank runs its host collectives alike:
    // every first, then the thirds; with a window, third(k - W) before first(k), which also
    // keeps second(k), run after first(k), behind third(k - W).
    const auto third_once_second = [&](std::size_t k) {
      {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return seconds > k || helper_error; });
        if (seconds <= k) std::rethrow_exception(helper_error);
      }
      third(k);
    };
    std::size_t thirds = 0;
    for (std::size_t k = 0; k < chunks; ++k) {
      if (window > 0 && k >= window) third_once_second(thirds++);
      first(k);
      {
        std::lock_guard lock(mutex);
        ++firsts;
      }
      changed.notify_all();
    }
    while (thirds < chunks) third_once_second(thirds++);
  } catch (...) {
    join();
    throw;
  }
  join();
}

std::size_t chunk_count(std::size_t count, std::size_t element_bytes, std::size_t chunk_bytes) {
  if (count == 0) return 0;
  if (chunk_bytes == 0) return 1;
  const std::size_t bytes = count * element_bytes;
  return std::min(count, (bytes + chunk_bytes - 1) / chunk_bytes);
}

ChunkRange chunk_range(std::size_t count, std::size_t chunks, std::size_t k) {
  const std::size_t base = count / chunks, extra = count % chunks;
  const std::size_t begin = k * base + (k < extra ? k : extra);
  return {begin, begin + base + (k < extra ? 1 : 0)};
}

}  // namespace ddp::detail
