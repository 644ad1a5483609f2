// What a process says when it is about to end abnormally (an exception no thread can catch, such
// as an assertion in Gloo's network thread): each group's note for its peers (so that their errors
// name this rank's failure, not only its death) and the flight recorder's dump.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace ddp::detail {

// A group's way to leave `message` where its peers' diagnoses read it (FailureHandler::record).
// Returns the id that removes it. Thread-safe.
std::uint64_t add_last_words(std::function<void(const std::string& message)> note);
void remove_last_words(std::uint64_t id);

// Logs `message`, publishes every group's progress record (publish_progress_now), hands the
// message to every note and writes the flight recorder's dump with it as the reason; returns
// after `within` even if a note still waits (on a store that does not answer: the process is
// ending anyway). Never throws.
void say_last_words(const std::string& message, std::chrono::milliseconds within) noexcept;

}  // namespace ddp::detail
