// PyTorch's torch.save format, without LibTorch: the zip archive that torch.save writes since
// PyTorch 1.6 (<folder>/data.pkl, <folder>/data/<key> per storage, <folder>/version) and, read
// only, the legacy stream of pickles that _use_new_zipfile_serialization=False still writes.
#pragma once

#include <string>
#include <string_view>

#include "state_dict/weights.h"

namespace ddp::detail::weights {

// The state dict in a torch.save zip archive: the pickled dict itself, or its entry `key` when
// the file holds a checkpoint dict. Throws IOError saying what is wrong.
Weights read_pytorch_zip(std::string_view bytes, const std::string& key);

// The same from the legacy format: the magic number, the protocol version and the system
// information (each a pickle), the object, the list of storage keys, then each storage's size
// and bytes.
Weights read_pytorch_legacy(std::string_view bytes, const std::string& key);

// The zip archive torch.save writes for an OrderedDict of these tensors, which Python's
// torch.load reads (1.13 and 2.x, weights_only=True included). The folder is "archive".
std::string write_pytorch(const Weights& weights);

}  // namespace ddp::detail::weights
