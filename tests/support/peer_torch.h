// The PyTorch that a peer script ran (the line "PyTorch VERSION" it prints) against the LibTorch these
// tests link: the same release runs the same CPU kernels, so a comparison of floating-point results
// can demand every bit; another release's kernels (matmul, convolution) may round differently in the
// last bits, and the comparison states its tolerance. Header-only: for the tests that link LibTorch.
#pragma once

#include <torch/version.h>

#include <cctype>
#include <sstream>
#include <string>

namespace ddp::test {

// "2.15.0+cu132" and "1.13.0a0" -> "2.15.0" and "1.13.0": the release, without build tags.
inline std::string torch_release(const std::string& version) {
  std::string out;
  int dots = 0;
  for (char c : version) {
    if (c == '.' && ++dots < 3) {
      out += c;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      out += c;
    } else {
      break;
    }
  }
  return out;
}

// The version on the peer's line "PyTorch VERSION" ("" when it printed none).
inline std::string peer_torch_version(const std::string& peer_output) {
  std::istringstream lines(peer_output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("PyTorch ", 0) == 0) return line.substr(8);
  }
  return "";
}

// Whether that peer's PyTorch is the release of the linked LibTorch.
inline bool runs_linked_kernels(const std::string& peer_output) {
  return torch_release(peer_torch_version(peer_output)) == torch_release(TORCH_VERSION);
}

}  // namespace ddp::test
