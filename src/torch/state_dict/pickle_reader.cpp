#include "state_dict/pickle_reader.h"

#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "ddp/error.h"
#include "util/strings.h"
#include "state_dict/pickle_vocabulary.h"

namespace ddp::detail::pickle {
namespace {

using Kind = Value::Kind;
using weights::ElementType;

constexpr std::string_view kResaveHint =
    "ddp reads only tensors, containers and numbers from a pickle, never code. A file written by "
    "torch.save(model) holds the whole pickled model (its classes are code); save the weights alone in Python, "
    "torch.save(model.state_dict(), \"model.pt\"), and load that";

class Reader {
 public:
  Reader(std::string_view in, PersistentIds ids) : in_(in), ids_(ids) {}

  Pickle run() {
    while (true) {
      if (pos_ >= in_.size()) fail("truncated: the pickle ends without its STOP opcode");
      op_pos_ = pos_;
      op_ = in_[pos_++];
      if (op_ == '.') {
        if (stack_.empty()) fail("damaged: STOP with nothing on the stack");
        out_.root = stack_.back();
        out_.size = pos_;
        return std::move(out_);
      }
      step();
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw IOError(cat(what, " (pickle byte ", op_pos_, ")")); }
  // What a state dict does not need: refused, with the way to re-save the file.
  [[noreturn]] void refuse(const std::string& what) const {
    throw IOError(cat(what, " (pickle byte ", op_pos_, "). ", kResaveHint));
  }

  std::string op_text() const {
    const char* n = opcode_name(op_);
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned>(static_cast<unsigned char>(op_)));
    return n ? cat(n, " (", hex, ")") : std::string(hex);
  }

  std::string_view take(std::uint64_t n) {
    if (n > in_.size() - pos_) {
      fail(cat("truncated: opcode ", op_text(), " needs ", n, " more bytes, ", in_.size() - pos_, " are left"));
    }
    auto out = in_.substr(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return out;
  }

  std::uint64_t little(std::size_t n) {
    const auto bytes = take(n);
    std::uint64_t v = 0;
    for (std::size_t i = n; i-- > 0;) v = (v << 8) | static_cast<unsigned char>(bytes[i]);
    return v;
  }

  std::size_t add(Value v) {
    out_.values.push_back(std::move(v));
    return out_.values.size() - 1;
  }
  void push(Value v) { stack_.push_back(add(std::move(v))); }
  void push_int(std::int64_t n) { push({.kind = Kind::Int, .number = n}); }

  std::size_t pop() {
    if (stack_.size() <= floor()) fail(cat("damaged: ", op_text(), " with nothing on the stack to take"));
    const auto v = stack_.back();
    stack_.pop_back();
    return v;
  }
  std::size_t top() {
    if (stack_.size() <= floor()) fail(cat("damaged: ", op_text(), " with nothing on the stack"));
    return stack_.back();
  }
  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  // The items above the last MARK, which is removed.
  std::vector<std::size_t> pop_mark() {
    if (marks_.empty()) fail(cat("damaged: ", op_text(), " without a MARK before it"));
    std::vector<std::size_t> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }

  Value& at(std::size_t index) { return out_.values[index]; }

  std::string text(std::string_view bytes) {
    if (!weights::decode_utf8(bytes, nullptr))
      fail(cat("damaged: opcode ", op_text(), " holds a string that is not UTF-8"));
    return std::string(bytes);
  }

  void memo_put(std::uint64_t index) { memo_[index] = top(); }
  void memo_get(std::uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail(cat("damaged: ", op_text(), " of memo entry ", index, ", which was never stored"));
    stack_.push_back(it->second);
  }

  void global(std::string module, std::string name) {
    if (module.find('\n') != std::string::npos || name.find('\n') != std::string::npos)
      fail("damaged: a global's name");
    std::string full = module + "." + name;
    if (!allowed_global(full)) {
      refuse(cat("the pickle needs the Python object ", quote(full, 200), ", which is code, not data"));
    }
    push({.kind = Kind::Global, .text = std::move(full)});
  }

  std::string line() {
    const auto end = in_.find('\n', pos_);
    if (end == std::string_view::npos) fail(cat("truncated: opcode ", op_text(), " without the end of its line"));
    std::string out(in_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return out;
  }

  std::int64_t int_of(std::size_t index, const char* what) {
    const auto& v = at(index);
    if (v.kind != Kind::Int && v.kind != Kind::Bool)
      fail(cat("damaged: ", what, " is ", describe(out_, index), ", not an int"));
    return v.number;
  }

  std::vector<std::int64_t> ints_of(std::size_t index, const char* what) {
    const auto& v = at(index);
    if (v.kind != Kind::Tuple && v.kind != Kind::List)
      fail(cat("damaged: ", what, " is ", describe(out_, index), ", not a tuple"));
    if (v.items.size() > weights::kMaxDims) fail(cat("damaged: ", what, " has ", v.items.size(), " dimensions"));
    std::vector<std::int64_t> out;
    for (auto item : v.items) out.push_back(int_of(item, what));
    return out;
  }

  void persistent_id() {
    const auto pid = pop();
    if (ids_ == PersistentIds::None) fail("damaged: a persistent id (a storage) where none belongs");
    const auto& v = at(pid);
    const std::size_t fields = ids_ == PersistentIds::Zip ? 5 : 6;
    if (v.kind != Kind::Tuple || v.items.size() != fields || at(v.items[0]).kind != Kind::String ||
        at(v.items[0]).text != "storage") {
      fail(cat("damaged: a persistent id that is not ('storage', type, key, location, size",
               fields == 6 ? ", view)" : ")", " but ", describe(out_, pid)));
    }
    const auto items = v.items;
    const auto& type = at(items[1]);
    if (type.kind != Kind::Global || type.text.substr(0, 6) != "torch.") fail("damaged: a storage without its type");
    const auto element = weights::from_storage_class(std::string_view(type.text).substr(6));
    if (!element) fail(cat("damaged: storage type ", type.text));
    if (at(items[2]).kind != Kind::String || at(items[3]).kind != Kind::String) {
      fail("damaged: a storage's key or location is not a string");
    }
    const auto numel = int_of(items[4], "a storage's size");
    if (numel < 0 || static_cast<std::uint64_t>(numel) > (std::uint64_t{1} << 62) / weights::element_size(*element)) {
      fail(cat("damaged: a storage of ", numel, " elements"));
    }
    if (fields == 6 && at(items[5]).kind != Kind::None) {
      fail(
          "the file holds a view into another storage, which PyTorch wrote before version 1.0; load it in Python "
          "and save it again with torch.save(state_dict, path)");
    }
    const std::string& key = at(items[2]).text;
    auto [it, fresh] = storage_index_.try_emplace(key, out_.storages.size());
    if (fresh) {
      out_.storages.push_back({key, *element, static_cast<std::uint64_t>(numel), at(items[3]).text});
    } else {
      const auto& known = out_.storages[it->second];
      if (known.type != *element || known.numel != static_cast<std::uint64_t>(numel)) {
        fail(cat("damaged: storage ", quote(key), " appears as ", known.numel, " x ", weights::name(known.type),
                 " and as ", numel, " x ", weights::name(*element)));
      }
    }
    push({.kind = Kind::Storage, .number = static_cast<std::int64_t>(it->second)});
  }

  void rebuild_tensor(const std::vector<std::size_t>& args, bool v2) {
    if (v2 ? (args.size() != 6 && args.size() != 7) : args.size() != 4) {
      fail(cat("damaged: ", v2 ? kRebuildTensorV2 : kRebuildTensor, " with ", args.size(), " arguments"));
    }
    const auto& storage = at(args[0]);
    if (storage.kind != Kind::Storage) fail(cat("damaged: a tensor over ", describe(out_, args[0]), ", not a storage"));
    weights::TensorRecord t;
    t.storage = static_cast<std::size_t>(storage.number);
    t.type = out_.storages[t.storage].type;
    t.offset = int_of(args[1], "a tensor's storage offset");
    t.sizes = ints_of(args[2], "a tensor's size");
    t.strides = ints_of(args[3], "a tensor's stride");
    if (auto error = weights::view_error(t, out_.storages[t.storage].numel)) {
      fail(cat("damaged: a tensor with ", *error, " (storage ", quote(out_.storages[t.storage].key), ")"));
    }
    out_.tensors.push_back(std::move(t));
    push({.kind = Kind::Tensor, .number = static_cast<std::int64_t>(out_.tensors.size() - 1)});
  }

  void reduce() {
    const auto args_index = pop();
    const auto callable = pop();
    if (at(callable).kind != Kind::Global) fail(cat("damaged: REDUCE of ", describe(out_, callable)));
    if (at(args_index).kind != Kind::Tuple)
      fail(cat("damaged: REDUCE with ", describe(out_, args_index), " as arguments"));
    const std::string name = at(callable).text;
    const std::vector<std::size_t> args = at(args_index).items;
    if (name == kOrderedDict) {
      if (!args.empty()) fail("damaged: OrderedDict called with arguments");
      push({.kind = Kind::Dict, .text = "OrderedDict"});
    } else if (name == kRebuildTensorV2 || name == kRebuildTensor) {
      rebuild_tensor(args, name == kRebuildTensorV2);
    } else if (name == kRebuildParameter || name == kRebuildParameterWithState) {
      if (args.size() != (name == kRebuildParameter ? 3u : 4u) || at(args[0]).kind != Kind::Tensor) {
        fail(cat("damaged: ", name, " without a tensor"));
      }
      stack_.push_back(args[0]);  // the parameter's data: a state dict holds tensors
    } else if (name == kSize) {
      if (args.size() != 1) fail("damaged: torch.Size with other than one argument");
      ints_of(args[0], "a torch.Size");
      stack_.push_back(args[0]);
    } else if (name == kEncode) {
      // _codecs.encode(text, "latin1"): bytes, one per code point below 256.
      std::vector<std::uint32_t> points;
      if (args.size() != 2 || at(args[0]).kind != Kind::String || at(args[1]).kind != Kind::String ||
          (at(args[1]).text != "latin1" && at(args[1]).text != "latin-1") ||
          !weights::decode_utf8(at(args[0]).text, &points)) {
        fail("damaged: _codecs.encode other than of a string to latin1");
      }
      std::string bytes;
      for (auto p : points) {
        if (p > 0xFF) fail("damaged: _codecs.encode of a character outside latin1");
        bytes.push_back(static_cast<char>(p));
      }
      push({.kind = Kind::Bytes, .text = std::move(bytes)});
    } else {
      fail(cat("damaged: ", name, " called"));  // a storage class: only a persistent id names it
    }
  }

  void step() {
    switch (op_) {
      case '\x80': {
        const unsigned version = static_cast<unsigned char>(take(1)[0]);
        if (version < 2 || version > 5)
          fail(cat("pickle protocol ", version, " (torch.save writes 2; 2 to 5 are read)"));
        return;
      }
      case '\x95': take(8); return;  // FRAME: a length, for buffering readers
      case '(': marks_.push_back(stack_.size()); return;
      case '0': pop(); return;
      case '1': pop_mark(); return;
      case '2': stack_.push_back(top()); return;
      case 'N': push({}); return;
      case '\x88': push({.kind = Kind::Bool, .number = 1}); return;
      case '\x89': push({.kind = Kind::Bool, .number = 0}); return;
      case 'J': push_int(static_cast<std::int32_t>(static_cast<std::uint32_t>(little(4)))); return;
      case 'K': push_int(static_cast<std::int64_t>(little(1))); return;
      case 'M': push_int(static_cast<std::int64_t>(little(2))); return;
      case '\x8a':
      case '\x8b': {
        const auto n = little(op_ == '\x8a' ? 1 : 4);
        const auto bytes = take(n);
        if (n <= 8) {
          std::uint64_t v = 0;
          for (std::size_t i = bytes.size(); i-- > 0;) v = (v << 8) | static_cast<unsigned char>(bytes[i]);
          if (n > 0 && n < 8 && (static_cast<unsigned char>(bytes[n - 1]) & 0x80)) v |= ~std::uint64_t{0} << (8 * n);
          push_int(static_cast<std::int64_t>(v));
        } else {
          push({.kind = Kind::BigInt, .text = std::string(bytes)});
        }
        return;
      }
      case 'G': {
        const auto bytes = take(8);
        std::uint64_t bits = 0;
        for (char c : bytes) bits = (bits << 8) | static_cast<unsigned char>(c);  // big-endian
        double real;
        std::memcpy(&real, &bits, 8);
        push({.kind = Kind::Float, .real = real});
        return;
      }
      case 'X': push({.kind = Kind::String, .text = text(take(little(4)))}); return;
      case '\x8c': push({.kind = Kind::String, .text = text(take(little(1)))}); return;
      case '\x8d': push({.kind = Kind::String, .text = text(take(little(8)))}); return;
      case 'T': push({.kind = Kind::String, .text = text(take(little(4)))}); return;
      case 'U': push({.kind = Kind::String, .text = text(take(little(1)))}); return;
      case 'B': push({.kind = Kind::Bytes, .text = std::string(take(little(4)))}); return;
      case 'C': push({.kind = Kind::Bytes, .text = std::string(take(little(1)))}); return;
      case '\x8e':
      case '\x96': push({.kind = Kind::Bytes, .text = std::string(take(little(8)))}); return;
      case ')': push({.kind = Kind::Tuple}); return;
      case 't': push({.kind = Kind::Tuple, .items = pop_mark()}); return;
      case '\x85':
      case '\x86':
      case '\x87': {
        const std::size_t n = static_cast<std::size_t>(op_ - '\x85') + 1;
        std::vector<std::size_t> items(n);
        for (std::size_t i = n; i-- > 0;) items[i] = pop();
        push({.kind = Kind::Tuple, .items = std::move(items)});
        return;
      }
      case ']': push({.kind = Kind::List}); return;
      case 'l': push({.kind = Kind::List, .items = pop_mark()}); return;
      case 'a': {
        const auto item = pop();
        list_at(top()).items.push_back(item);
        return;
      }
      case 'e': {
        auto items = pop_mark();
        auto& list = list_at(top());
        list.items.insert(list.items.end(), items.begin(), items.end());
        return;
      }
      case '}': push({.kind = Kind::Dict}); return;
      case 'd': {
        auto items = pop_mark();
        if (items.size() % 2) fail("damaged: DICT with an odd number of items");
        push({.kind = Kind::Dict, .items = std::move(items)});
        return;
      }
      case 's': {
        const auto value = pop();
        const auto key = pop();
        auto& dict = dict_at(top());
        dict.items.push_back(key);
        dict.items.push_back(value);
        return;
      }
      case 'u': {
        auto items = pop_mark();
        if (items.size() % 2) fail("damaged: SETITEMS with an odd number of items");
        auto& dict = dict_at(top());
        dict.items.insert(dict.items.end(), items.begin(), items.end());
        return;
      }
      case 'c': {
        auto module = line();
        auto name = line();
        global(std::move(module), std::move(name));
        return;
      }
      case '\x93': {
        const auto name = pop();
        const auto module = pop();
        if (at(module).kind != Kind::String || at(name).kind != Kind::String)
          fail("damaged: STACK_GLOBAL of non-strings");
        global(at(module).text, at(name).text);
        return;
      }
      case 'R': reduce(); return;
      case 'b': {
        const auto state = pop();
        const auto target = top();
        // An OrderedDict's attributes: Python's state dicts carry `_metadata` (module versions).
        if (at(target).kind != Kind::Dict || at(state).kind != Kind::Dict) {
          refuse(cat("BUILD of ", describe(out_, target), " with ", describe(out_, state),
                     ": only a state dict's attributes are read"));
        }
        return;
      }
      case 'Q': persistent_id(); return;
      case 'q': memo_put(little(1)); return;
      case 'r': memo_put(little(4)); return;
      case '\x94': memo_put(memo_.size()); return;
      case 'h': memo_get(little(1)); return;
      case 'j': memo_get(little(4)); return;
      default: break;
    }
    const char* known = opcode_name(op_);
    if (!known) fail(cat("damaged: ", op_text(), " is not a pickle opcode"));
    refuse(cat("the pickle uses opcode ", op_text(), ", which state dicts do not need (", known,
               op_ == 'i' || op_ == 'o' || op_ == '\x81' || op_ == '\x92' ? " builds an arbitrary object)"
                                                                          : " is outside the subset)"));
  }

  Value& list_at(std::size_t index) {
    if (at(index).kind != Kind::List)
      fail(cat("damaged: ", op_text(), " onto ", describe(out_, index), ", not a list"));
    return at(index);
  }
  Value& dict_at(std::size_t index) {
    if (at(index).kind != Kind::Dict)
      fail(cat("damaged: ", op_text(), " into ", describe(out_, index), ", not a dict"));
    return at(index);
  }

  std::string_view in_;
  PersistentIds ids_;
  std::size_t pos_ = 0, op_pos_ = 0;
  char op_ = 0;
  std::vector<std::size_t> stack_, marks_;
  std::unordered_map<std::uint64_t, std::size_t> memo_;
  std::unordered_map<std::string, std::size_t> storage_index_;
  Pickle out_;
};

}  // namespace

Pickle read(std::string_view bytes, PersistentIds ids) { return Reader(bytes, ids).run(); }

std::string describe(const Pickle& pickle, std::size_t value) {
  const auto& v = pickle.values[value];
  switch (v.kind) {
    case Kind::None: return "None";
    case Kind::Bool: return "a bool";
    case Kind::Int:
    case Kind::BigInt: return "an int";
    case Kind::Float: return "a float";
    case Kind::String: return "a str";
    case Kind::Bytes: return "bytes";
    case Kind::Tuple: return "a tuple";
    case Kind::List: return "a list";
    case Kind::Dict: return v.text.empty() ? "a dict" : "an " + v.text;
    case Kind::Tensor: return "a tensor";
    case Kind::Storage: return "a storage";
    case Kind::Global: return "the Python object " + v.text;
  }
  return "a value";
}

}  // namespace ddp::detail::pickle
