// A bounded reader of the part of Python's pickle format that torch.save uses for state dicts
// and checkpoints: protocols 2 to 5; None, bools, ints, floats, strings, bytes, tuples, lists,
// dicts and collections.OrderedDict; tensors rebuilt by torch._utils._rebuild_tensor_v2 over
// storages named by persistent ids. It never runs or imports anything: a Python global outside
// that list (a pickled nn.Module, a NumPy scalar, anything that is code) is refused with the way
// to re-save the file. Every length is checked against the bytes that are left, so nothing is
// read past the input; memory is linear in the input's size. No LibTorch (it is fuzzed alone).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "state_dict/weights.h"

namespace ddp::detail::pickle {

// One value of the pickled object. Containers refer to their items by index into
// Pickle::values, so that a value referenced twice (the memo) is stored once.
struct Value {
  enum class Kind : std::uint8_t {
    None,
    Bool,
    Int,
    BigInt,
    Float,
    String,
    Bytes,
    Tuple,
    List,
    Dict,
    Tensor,
    Storage,
    Global
  };
  Kind kind = Kind::None;
  std::int64_t number = 0;         // Bool, Int; Tensor and Storage: the index into Pickle::tensors / ::storages
  double real = 0;                 // Float
  std::string text;                // String (UTF-8), Bytes, Global ("module.name"), BigInt (little-endian bytes)
  std::vector<std::size_t> items;  // Tuple, List; Dict: key, value, key, value, ... in insertion order
};

// A storage named by a persistent id: ('storage', torch.FloatStorage, key, location, numel).
struct StorageRef {
  std::string key;
  weights::ElementType type = weights::ElementType::Float32;
  std::uint64_t numel = 0;
  std::string location;  // "cpu", "cuda:0", ...
};

struct Pickle {
  std::vector<Value> values;
  std::size_t root = 0;                        // the pickled object
  std::vector<weights::TensorRecord> tensors;  // their .storage indexes `storages`
  std::vector<StorageRef> storages;
  std::size_t size = 0;  // bytes the pickle took, its STOP opcode included
};

// The persistent ids a pickle may hold: torch.save's zip format names a storage with 5 fields,
// its legacy format with 6 (the last, a view into another storage, must be None); the legacy
// format's header pickles hold none.
enum class PersistentIds : std::uint8_t { None, Zip, Legacy };

// Reads the pickle at the start of `bytes` (bytes after its STOP are not looked at). Throws
// IOError saying what is wrong and at which byte: truncated, damaged, an opcode or a global
// outside the subset (with the hint to save `model.state_dict()` rather than the model).
Pickle read(std::string_view bytes, PersistentIds ids);

// "an OrderedDict", "a str", "an int", ... for messages.
std::string describe(const Pickle& pickle, std::size_t value);

}  // namespace ddp::detail::pickle
