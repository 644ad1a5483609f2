// The words of Python's pickle that ddp's reader knows: the globals a state dict's pickle refers
// to (all of them data: the reader refuses any other, which would be code) and the names of the
// opcodes it reads or refuses, for its messages. Pure; no LibTorch.
#pragma once

#include <string_view>

namespace ddp::detail::pickle {

inline constexpr std::string_view kOrderedDict = "collections.OrderedDict";
inline constexpr std::string_view kRebuildTensorV2 = "torch._utils._rebuild_tensor_v2";
inline constexpr std::string_view kRebuildTensor = "torch._utils._rebuild_tensor";
inline constexpr std::string_view kRebuildParameter = "torch._utils._rebuild_parameter";
inline constexpr std::string_view kRebuildParameterWithState = "torch._utils._rebuild_parameter_with_state";
inline constexpr std::string_view kSize = "torch.Size";
inline constexpr std::string_view kEncode = "_codecs.encode";  // bytes, as protocol 2 writes them

// Whether `name` ("module.name") is one of the globals above or a storage class (torch.FloatStorage, ...).
bool allowed_global(std::string_view name);

// "MARK", "BININT1", ... for the opcodes a message may name; nullptr for a byte that is none of them.
const char* opcode_name(char op);

}  // namespace ddp::detail::pickle
