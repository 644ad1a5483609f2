// The table of backends by name. builtin.cpp registers the ones that ship with ddp (a
// missing dependency's stub among them), so nothing else asks which backends exist.
#include <cstring>
#include <map>
#include <mutex>

#include "backends/registry.h"
#include "ddp/error.h"
#include "util/strings.h"
#include "group/local_backend.h"

namespace ddp {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, BackendRegistration> entries;
};

bool cpu_only(const Device& device) { return device.is_cpu(); }

void host_copy(const Buffer& from, const Buffer& to) {
  if (!from.device.is_cpu() || !to.device.is_cpu()) {
    throw InvalidArgument(
        "a copy of device buffers in a group of one: the backend registered no copy for them "
        "(BackendRegistration::copy)");
  }
  if (from.data != to.data && to.bytes() > 0) std::memmove(to.data, from.data, to.bytes());
}

Registry& registry() {
  static Registry instance;
  return instance;
}

}  // namespace

void register_backend(const std::string& name, BackendRegistration registration) {
  if (!registration.factory)
    throw InvalidArgument(detail::cat("register_backend(", detail::quote(name), "): no factory"));
  if (!registration.accepts) registration.accepts = cpu_only;
  if (!registration.check_usable) registration.check_usable = [] {};
  if (!registration.copy) registration.copy = host_copy;
  std::lock_guard lock(registry().mutex);
  registry().entries[name] = std::move(registration);
}

void register_backend(const std::string& name, BackendFactory factory, DeviceFilter accepts) {
  register_backend(name, BackendRegistration{.factory = std::move(factory), .accepts = std::move(accepts)});
}

bool is_backend_registered(const std::string& name) {
  std::lock_guard lock(registry().mutex);
  return registry().entries.count(name) > 0;
}

namespace detail {

namespace {

BackendRegistration find_entry(const std::string& name) {
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

void check_backend_usable(const std::string& name) { find_entry(name).check_usable(); }

std::unique_ptr<Backend> make_local_backend(const std::string& name) {
  auto entry = find_entry(name);
  return make_local_backend(name, std::move(entry.accepts), std::move(entry.copy));
}

}  // namespace detail
}  // namespace ddp
