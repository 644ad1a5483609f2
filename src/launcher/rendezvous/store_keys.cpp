#include "rendezvous/store_keys.h"

#include <algorithm>

#include "ddp/error.h"
#include "ddp/store.h"

namespace ddp::launcher {

using namespace std::chrono_literals;

bool wait_for_keys(Store& store, const std::vector<std::string>& keys, std::chrono::steady_clock::time_point deadline,
                   const std::function<void()>& check_interrupt) {
  for (;;) {
    if (check_interrupt) check_interrupt();
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left <= 0ms) return store.check(keys);
    try {
      store.wait(keys, std::min<std::chrono::milliseconds>(left, 200ms));
      return true;
    } catch (const TimeoutError&) {
    }
  }
}

}  // namespace ddp::launcher
