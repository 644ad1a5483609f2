// Naming the code that called a collective, for the flight recorder's entries.
#pragma once

#include <string>

namespace ddp::detail {

// "symbol+0x1f" when the caller's symbol is exported, else "module+0x4a2f1" (a file offset for
// addr2line -Cfe module); "" for a null `return_address`. `return_address` is what
// __builtin_return_address(0) gave the called function.
std::string caller_name(const void* return_address);

}  // namespace ddp::detail
