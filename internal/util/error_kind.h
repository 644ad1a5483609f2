// The kinds of ddp::Error as a value, so that code which catches an error, adds what it knows and
// throws it on keeps its type: the process group (an op's failure, with the peers' diagnosis), the
// backends (a library's exception, sorted by what it says) and the front (context for the user).
#pragma once

#include <exception>
#include <string>

namespace ddp::detail {

enum class ErrorKind { InvalidArgument, Timeout, PeerLost, Mismatch, IO, Other };

struct ErrorInfo {
  ErrorKind kind = ErrorKind::Other;
  std::string message;
};

// The kind and message of `error` (a ddp::Error subclass, another std::exception: Other, or
// anything else: Other, "an unknown exception").
ErrorInfo classify(const std::exception_ptr& error);

// A ddp::Error of `kind` (Other: ddp::Error itself) with `message`.
std::exception_ptr make_error(ErrorKind kind, const std::string& message);
[[noreturn]] void throw_error(ErrorKind kind, const std::string& message);

// Call inside a catch block: rethrows the current exception as the ddp::Error of its kind with
// `context` and ": " in front of its message.
[[noreturn]] void rethrow_with_context(const std::string& context);

}  // namespace ddp::detail
