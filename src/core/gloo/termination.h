// When Gloo throws in its network thread, nothing can catch it: the exception leaves the thread
// and std::terminate ends the process with Gloo's assertion text. The one such assertion a program
// can trigger is a peer's message larger than the receive posted for it, when ranks call
// collectives of different sizes (recursive doubling checks its partners' calls first; Gloo's own
// algorithms cannot). This explains it before the process ends: the ops in flight, what the
// assertion means and what to do, to the log, the peers (flight/last_words) and the flight dump.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ddp::detail {

// The explanation of Gloo's exception text `what` in a process whose operations in flight are
// `in_flight` ("all_reduce #7 (float32 x 256, SUM) in group 'world' on rank 1"). Pure.
std::string explain_gloo_termination(std::string_view what, const std::vector<std::string>& in_flight);

// Installs the process's terminate handler, once: for an exception of Gloo's it says the
// explanation's last words (bounded to a few seconds), then calls the handler it replaced.
void explain_gloo_terminations();

}  // namespace ddp::detail
