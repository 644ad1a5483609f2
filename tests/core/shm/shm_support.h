// Helpers for the shared-memory tests: what this process has mapped, what /dev/shm holds.
#pragma once

#include <dirent.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace ddp::test {

// The lines of /proc/self/maps that map a ddp shared-memory segment (or, with "ddp-shared", memory
// of allocate_shared_memory).
inline std::vector<std::string> shm_mappings(const std::string& name = "ddp-shm") {
  std::vector<std::string> lines;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/memfd:" + name + " ") != std::string::npos) lines.push_back(line);
  }
  return lines;
}

// The names in /dev/shm.
inline std::set<std::string> dev_shm_entries() {
  std::set<std::string> names;
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.insert(name);
    }
    ::closedir(dir);
  }
  return names;
}

}  // namespace ddp::test
