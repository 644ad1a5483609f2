// Rethrowing a ddp::Error with context prepended, keeping its type.
#pragma once

#include <exception>
#include <string>

namespace ddp::detail {

// Call inside a catch block: rethrows the current ddp error (or std::exception, as ddp::Error)
// with `context` and ": " in front of its message.
[[noreturn]] void rethrow_with_context(const std::string& context);

}  // namespace ddp::detail
