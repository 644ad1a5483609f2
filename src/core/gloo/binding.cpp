#include "gloo/binding.h"

#include <dlfcn.h>
#include <gloo/allreduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <cstring>
#include <mutex>

#include "ddp/error.h"
#include "util/strings.h"

namespace ddp::detail {
namespace {

#ifdef DDP_GLOO_PRIVATE
constexpr bool kPrivateGloo = true;
#else
constexpr bool kPrivateGloo = false;
#endif

std::string object_of(const void* address) {
  Dl_info info{};
  if (address == nullptr || ::dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "(no object)";
  return info.dli_fname;
}

// A non-virtual member function's address (the Itanium ABI's pointer to member holds it first).
template <typename Member>
const void* member_address(Member member) {
  const void* address = nullptr;
  std::memcpy(&address, &member, sizeof address);
  return address;
}

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::optional<std::string> gloo_binding_problem(const std::vector<ResolvedGlooSymbol>& resolved, bool private_gloo,
                                                const std::string& ddp_object) {
  for (const auto& r : resolved) {
    const bool expected = private_gloo ? r.object == ddp_object : base_name(r.object).rfind("libgloo.so", 0) == 0;
    if (expected) continue;
    const std::string built_with = private_gloo ? cat("its own private Gloo, compiled into ", ddp_object)
                                                : std::string("Debian's shared libgloo (libgloo.so.0)");
    return cat("ddp's calls into Gloo resolve into ", r.object, " (", r.symbol, "), not into ", built_with,
               ", which ddp was built against: this process holds a second Gloo (an upstream LibTorch carries one "
               "of its own), and the two must never bind into each other. Build ddp against the LibTorch this "
               "program links (cmake -DCMAKE_PREFIX_PATH=<its prefix>; ddp then compiles a private Gloo, "
               "scripts/private_gloo.sh fetches its source), and do not LD_PRELOAD a Gloo (docs/GLOO.md).");
  }
  return std::nullopt;
}

void check_gloo_binding() {
  static std::once_flag once;
  static std::optional<std::string> problem;
  std::call_once(once, [] {
    const std::vector<ResolvedGlooSymbol> resolved = {
        {"gloo::transport::tcp::CreateDevice",
         object_of(reinterpret_cast<const void*>(&gloo::transport::tcp::CreateDevice))},
        {"gloo::allreduce", object_of(reinterpret_cast<const void*>(&gloo::allreduce))},
        {"gloo::rendezvous::Context::connectFullMesh",
         object_of(member_address(&gloo::rendezvous::Context::connectFullMesh))},
    };
    problem =
        gloo_binding_problem(resolved, kPrivateGloo, object_of(reinterpret_cast<const void*>(&check_gloo_binding)));
  });
  if (problem) throw Error(*problem);
}

}  // namespace ddp::detail
