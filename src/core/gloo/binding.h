// Where ddp's calls into Gloo land. ddp is built against one Gloo: Debian's shared libgloo, or a
// private copy compiled into ddp with hidden symbols (cmake/gloo.cmake). A process that also holds
// another Gloo (every upstream LibTorch carries one) must never have ddp's calls bound into it: the
// copies differ in their classes' layouts and virtual tables, and a wrong binding corrupts memory
// far from its cause. The check runs once a process, before the first Gloo call (docs/GLOO.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ddp::detail {

// One of ddp's Gloo entry points and the object file (library or executable) it resolved into.
struct ResolvedGlooSymbol {
  std::string symbol;  // e.g. "gloo::allreduce"
  std::string object;  // the file dladdr names
};

// The verdict, pure: nullopt when every symbol is where this build expects it (PRIVATE: in
// `ddp_object`, the file that holds ddp's own code; SYSTEM: in a libgloo.so*), else the message
// of the error to raise: which symbol resolved into which file, and what to do.
std::optional<std::string> gloo_binding_problem(const std::vector<ResolvedGlooSymbol>& resolved, bool private_gloo,
                                                const std::string& ddp_object);

// Resolves ddp's Gloo entry points in this process and throws ddp::Error with the message above
// when one lands in the wrong library. The first call decides; later calls repeat its verdict.
void check_gloo_binding();

}  // namespace ddp::detail
