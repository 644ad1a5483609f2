#include "state_dict/weights_file.h"

#include <algorithm>
#include <cstdio>

#include "ddp/error.h"
#include "state_dict/pytorch_file.h"
#include "state_dict/safetensors_file.h"
#include "util/strings.h"

namespace ddp::detail::weights {
namespace {

std::string first_bytes(std::string_view bytes) {
  std::string out;
  for (std::size_t i = 0; i < std::min<std::size_t>(bytes.size(), 16); ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned>(static_cast<unsigned char>(bytes[i])));
    out += (i ? " " : "") + std::string(hex);
  }
  return out;
}

}  // namespace

Weights read_weights(std::string_view bytes, const std::string& key) {
  if (bytes.substr(0, 4) == std::string_view("PK\x03\x04", 4) ||
      bytes.substr(0, 4) == std::string_view("PK\x05\x06", 4)) {
    return read_pytorch_zip(bytes, key);
  }
  // Before the pickle: a header length can begin with 0x80 too, and no pickle has '{' at byte 8.
  if (bytes.size() >= 9 && bytes[8] == '{') {
    if (!key.empty()) {
      throw InvalidArgument(cat("LoadOptions::key (", quote(key),
                                ") names an entry of a pickled checkpoint dict, but "
                                "this is a safetensors file, which holds tensors only: leave key empty"));
    }
    return read_safetensors(bytes);
  }
  if (bytes.size() >= 2 && bytes[0] == '\x80' && bytes[1] >= 2 && bytes[1] <= 5) return read_pytorch_legacy(bytes, key);
  if (bytes.substr(0, 8) == "DDPCKPT1") {
    throw IOError(
        "a ddp::Checkpoints file, not a state dict: read it with Checkpoints::load_latest (to share weights "
        "with Python, write them with ddp::save_state_dict)");
  }
  if (bytes.empty()) throw IOError("the file is empty");
  throw IOError(
      cat("not a weight file: neither a zip archive (torch.save), a legacy torch.save pickle nor safetensors; "
          "its first bytes are ",
          first_bytes(bytes)));
}

}  // namespace ddp::detail::weights
