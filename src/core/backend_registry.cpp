// The table of backends by name. Backends register themselves (or their stubs) from a static
// initializer in their own folder, so shared code never asks which backends exist.
#include <map>
#include <mutex>

#include "backend_registry.h"
#include "ddp/error.h"
#include "util/strings.h"

namespace ddp {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, BackendFactory> factories;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

}  // namespace

void register_backend(const std::string& name, BackendFactory factory) {
  std::lock_guard lock(registry().mutex);
  registry().factories[name] = std::move(factory);
}

bool is_backend_registered(const std::string& name) {
  std::lock_guard lock(registry().mutex);
  return registry().factories.count(name) > 0;
}

namespace detail {

BackendFactory find_backend(const std::string& name) {
  register_builtin_backends();
  std::lock_guard lock(registry().mutex);
  auto it = registry().factories.find(name);
  if (it == registry().factories.end()) {
    std::vector<std::string> known;
    for (const auto& [key, value] : registry().factories) known.push_back(detail::quote(key));
    throw InvalidArgument(cat("unknown backend ", detail::quote(name), "; the registered backends are ", join(known),
                              ". Use \"gloo\" for CPU tensors and \"nccl\" for CUDA tensors."));
  }
  return it->second;
}

}  // namespace detail
}  // namespace ddp
