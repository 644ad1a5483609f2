#include "support/exec_image.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace ddp::test {
namespace {

std::string on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, end - start);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return name;  // execve fails, and says so
}

}  // namespace

ExecImage::ExecImage(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env)
    : path_(on_path(argv.at(0))), argv_(argv) {
  for (char** e = environ; *e; ++e) {
    const std::string item = *e;
    if (!env.count(item.substr(0, item.find('=')))) envp_.push_back(item);
  }
  for (const auto& [key, value] : env) {
    if (value != kUnset) envp_.push_back(key + "=" + value);
  }
  for (auto& a : argv_) argv_ptrs_.push_back(a.data());
  argv_ptrs_.push_back(nullptr);
  for (auto& e : envp_) envp_ptrs_.push_back(e.data());
  envp_ptrs_.push_back(nullptr);
  failure_ = "exec " + path_ + " failed: ";
}

void ExecImage::exec() const {
  ::execve(path_.c_str(), argv_ptrs_.data(), envp_ptrs_.data());
  const char* why = std::strerror(errno);  // glibc's table: no allocation for a known errno
  [[maybe_unused]] ssize_t ignored = ::write(STDERR_FILENO, failure_.data(), failure_.size());
  ignored = ::write(STDERR_FILENO, why, std::strlen(why));
  ignored = ::write(STDERR_FILENO, "\n", 1);
  ::_exit(127);
}

}  // namespace ddp::test
