#include "sampler/sampler_warnings.h"

#include <atomic>
#include <string>

#include "util/log.h"

namespace ddp::detail {
namespace {

std::atomic<bool> warned_epoch_not_advanced{false};

}  // namespace

void warn_epoch_not_advanced(std::int64_t epoch) {
  if (warned_epoch_not_advanced.exchange(true)) return;
  log(LogLevel::Warn, "DistributedSampler: a second pass over epoch ", epoch,
      " started without set_epoch(), so it sees the same order as the last one. Call "
      "sampler.set_epoch(epoch) before each epoch, with the same value on every rank, as with "
      "PyTorch's DistributedSampler. (Shown once per process.)");
}

void reset_sampler_warnings_for_testing() { warned_epoch_not_advanced.store(false); }

}  // namespace ddp::detail
