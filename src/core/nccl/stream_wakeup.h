// A Wakeup (util/wakeup.h) that CUDA notifies once a stream has passed the work queued on it so
// far, so that a wait for that work sleeps until then rather than until its next poll.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "util/wakeup.h"

namespace ddp::detail {

// Queues a host function (cudaLaunchHostFunc) on `stream` that notifies the returned Wakeup.
// Null when CUDA does not take it: the waits then poll alone. The stream's later work waits for
// the host function, which does nothing but notify.
std::shared_ptr<Wakeup> wakeup_when_reached(cudaStream_t stream);

}  // namespace ddp::detail
