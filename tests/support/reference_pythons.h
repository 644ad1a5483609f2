// The Pythons with PyTorch that the compatibility tests compare ddp with, as the build found them
// (DDP_REFERENCE_PYTHONS, a ':'-separated list: tests/CMakeLists.txt): Debian's /usr/bin/python3 (PyTorch 1.13) and every
// PyTorch in ddp's cache (PyPI's 2.15: scripts/upstream_torch.sh). A test over them is one
// instance per Python:
//
//   class StateDictPeer : public ::testing::TestWithParam<ReferencePython> {};
//   INSTANTIATE_TEST_SUITE_P(PyTorch, StateDictPeer, ::testing::ValuesIn(reference_pythons()), reference_name);
//
// A listed Python that cannot import torch fails its tests: it was configured as a peer.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#ifndef DDP_REFERENCE_PYTHONS
#define DDP_REFERENCE_PYTHONS "/usr/bin/python3"
#endif

namespace ddp::test {

struct ReferencePython {
  std::string path;  // the interpreter
  std::string name;  // for test names: "Debian" (/usr/bin/python3) or "PyPI_2_15_0" (a cache's torch-2.15.0)
};

inline std::vector<ReferencePython> reference_pythons() {
  std::vector<ReferencePython> out;
  const std::string list = DDP_REFERENCE_PYTHONS;
  std::size_t start = 0;
  while (start <= list.size()) {
    const auto end = std::min(list.find(':', start), list.size());
    const std::string path = list.substr(start, end - start);
    start = end + 1;
    if (path.empty()) continue;
    std::string name = "Debian";
    if (const auto at = path.find("/torch-"); at != std::string::npos) {
      name = "PyPI_" + path.substr(at + 7, path.find('/', at + 7) - at - 7);
      for (char& c : name)
        if (c == '.' || c == '-' || c == '+') c = '_';
    }
    out.push_back({path, name});
  }
  return out;
}

inline std::string reference_name(const ::testing::TestParamInfo<ReferencePython>& info) { return info.param.name; }

inline void PrintTo(const ReferencePython& python, std::ostream* os) { *os << python.path; }

}  // namespace ddp::test
