// What a torch::save to a file and a torch::load from it would give, in memory: `out`'s bytes
// read back as an InputArchive (the tensors are read in full, so nothing outlives the call).
#pragma once

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <sstream>
#include <string>

namespace ddp::test {

inline torch::serialize::InputArchive reopened(torch::serialize::OutputArchive& out) {
  std::ostringstream bytes;
  out.save_to(bytes);
  const std::string saved = bytes.str();
  torch::serialize::InputArchive in;
  in.load_from(saved.data(), saved.size());
  return in;
}

}  // namespace ddp::test
