#include "state_dict/pickle_writer.h"

#include <cstdint>
#include <string_view>

namespace ddp::detail::pickle {
namespace {

class Writer {
 public:
  std::string take() { return std::move(out_); }

  void op(char c) { out_.push_back(c); }
  void little(std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  }
  void string(std::string_view s) {
    op('X');  // BINUNICODE
    little(s.size(), 4);
    out_.append(s);
  }
  void integer(std::int64_t v) {
    if (v >= 0 && v < 0x100) {
      op('K');
      little(static_cast<std::uint64_t>(v), 1);
    } else if (v >= 0 && v < 0x10000) {
      op('M');
      little(static_cast<std::uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      op('J');
      little(static_cast<std::uint32_t>(static_cast<std::int32_t>(v)), 4);
    } else {
      op('\x8a');  // LONG1: 8 bytes of two's complement always hold an int64
      little(8, 1);
      little(static_cast<std::uint64_t>(v), 8);
    }
  }
  // GLOBAL, the first time; BINGET of its memo entry after that (as Python's pickler does).
  void global(std::string_view module, std::string_view name) {
    const std::string key = std::string(module) + "\n" + std::string(name);
    for (std::size_t i = 0; i < globals_.size(); ++i) {
      if (globals_[i] == key) return get(i);
    }
    op('c');
    out_ += key + "\n";
    put();
    globals_.push_back(key);
    memo_of_global_.push_back(memo_ - 1);
  }
  void ints(const std::vector<std::int64_t>& values) {
    if (values.empty()) return op(')');
    if (values.size() > 3) op('(');
    for (auto v : values) integer(v);
    op(values.size() == 1 ? '\x85' : values.size() == 2 ? '\x86' : values.size() == 3 ? '\x87' : 't');
  }

 private:
  void put() { memo('q', 'r', memo_++); }                                    // BINPUT, LONG_BINPUT
  void get(std::size_t global) { memo('h', 'j', memo_of_global_[global]); }  // BINGET, LONG_BINGET
  // A memo opcode with a 1-byte index, or its long form with 4.
  void memo(char short_op, char long_op, std::uint64_t index) {
    if (index < 0x100) {
      op(short_op);
      little(index, 1);
    } else {
      op(long_op);
      little(index, 4);
    }
  }

  std::string out_;
  std::uint64_t memo_ = 0;
  std::vector<std::string> globals_;
  std::vector<std::uint64_t> memo_of_global_;
};

}  // namespace

std::string write_state_dict(const weights::Weights& weights) {
  Writer w;
  w.op('\x80');  // PROTO 2
  w.little(2, 1);
  w.global("collections", "OrderedDict");
  w.op(')');
  w.op('R');
  if (!weights.tensors.empty()) w.op('(');
  for (const auto& [name, t] : weights.tensors) {
    const auto& storage = weights.storages[t.storage];
    w.string(name);
    w.global("torch._utils", "_rebuild_tensor_v2");
    w.op('(');
    w.op('(');  // the persistent id
    w.string("storage");
    w.global("torch", weights::storage_class(storage.type));
    w.string(std::to_string(t.storage));
    w.string("cpu");
    w.integer(static_cast<std::int64_t>(storage.numel));
    w.op('t');
    w.op('Q');  // BINPERSID
    w.integer(t.offset);
    w.ints(t.sizes);
    w.ints(t.strides);
    w.op('\x89');                            // requires_grad = False
    w.global("collections", "OrderedDict");  // backward hooks: none
    w.op(')');
    w.op('R');
    w.op('t');
    w.op('R');
  }
  if (!weights.tensors.empty()) w.op('u');  // SETITEMS
  w.op('.');
  return w.take();
}

}  // namespace ddp::detail::pickle
