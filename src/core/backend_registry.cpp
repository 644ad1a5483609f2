// The table of backends by name. builtin_backends.cpp registers the ones that ship with ddp (a
// missing dependency's stub among them), so nothing else asks which backends exist.
#include <map>
#include <mutex>

#include "backend_registry.h"
#include "ddp/error.h"
#include "ddp/detail/strings.h"

namespace ddp {
namespace {

struct Entry {
  BackendFactory factory;
  DeviceFilter accepts;
};

struct Registry {
  std::mutex mutex;
  std::map<std::string, Entry> entries;
};

bool cpu_only(const Device& device) { return device.is_cpu(); }

Registry& registry() {
  static Registry instance;
  return instance;
}

}  // namespace

void register_backend(const std::string& name, BackendFactory factory, DeviceFilter accepts) {
  std::lock_guard lock(registry().mutex);
  registry().entries[name] = {std::move(factory), accepts ? std::move(accepts) : DeviceFilter(cpu_only)};
}

bool is_backend_registered(const std::string& name) {
  std::lock_guard lock(registry().mutex);
  return registry().entries.count(name) > 0;
}

namespace detail {

namespace {

Entry find_entry(const std::string& name) {
  register_builtin_backends();
  std::lock_guard lock(registry().mutex);
  auto it = registry().entries.find(name);
  if (it == registry().entries.end()) {
    std::vector<std::string> known;
    for (const auto& [key, value] : registry().entries) known.push_back(detail::quote(key));
    throw InvalidArgument(cat("unknown backend ", detail::quote(name), "; the registered backends are ", join(known),
                              ". Use \"gloo\" for CPU tensors and \"nccl\" for CUDA tensors."));
  }
  return it->second;  // a copy: a concurrent registration may replace it
}

}  // namespace

BackendFactory find_backend(const std::string& name) { return find_entry(name).factory; }

DeviceFilter accepted_devices(const std::string& name) { return find_entry(name).accepts; }

}  // namespace detail
}  // namespace ddp
