#include "flight/caller.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace ddp::detail {
namespace {

std::string hex(std::uintptr_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%zx", static_cast<std::size_t>(value));
  return text;
}

std::string program_path() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<std::size_t>(n)) : "?";
}

}  // namespace

// The return address points after the call: the call is at pc - 1.
std::string caller_name(const void* pc) {
  if (!pc) return "";
  const auto at = reinterpret_cast<std::uintptr_t>(pc) - 1;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<const void*>(at), &info) == 0) return hex(at);
  if (info.dli_sname && info.dli_saddr) {
    int status = 0;
    char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    std::string name = status == 0 && demangled ? demangled : info.dli_sname;
    std::free(demangled);
    if (auto paren = name.find('('); paren != std::string::npos) name.resize(paren);  // the arguments: long, and known
    return name + "+" + hex(at - reinterpret_cast<std::uintptr_t>(info.dli_saddr));
  }
  std::string module = info.dli_fname ? info.dli_fname : "?";
  if (module.rfind("/proc/", 0) == 0 || module.empty()) module = program_path();  // started as /proc/self/exe
  if (auto slash = module.rfind('/'); slash != std::string::npos) module.erase(0, slash + 1);
  return module + "+" + hex(at - reinterpret_cast<std::uintptr_t>(info.dli_fbase));
}

}  // namespace ddp::detail
