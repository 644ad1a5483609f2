#include "state_dict/pytorch_file.h"

#include <functional>
#include <map>
#include <optional>

#include "ddp/error.h"
#include "state_dict/pickle_reader.h"
#include "state_dict/pickle_writer.h"
#include "state_dict/zip_archive.h"
#include "util/strings.h"

namespace ddp::detail::weights {
namespace {

using pickle::Pickle;
using Kind = pickle::Value::Kind;

// The legacy format's first pickle: torch.serialization.MAGIC_NUMBER, 0x1950a86a20f9469cfc6c,
// in LONG1's little-endian bytes.
constexpr std::string_view kLegacyMagic = "\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19";
constexpr std::int64_t kLegacyProtocol = 1001;

// The string-keyed entries of dict `value`, the last of equal keys winning at the place of the first (as in Python).
std::vector<std::pair<std::string, std::size_t>> string_entries(const Pickle& p, std::size_t value,
                                                                std::vector<std::string>& notes) {
  std::vector<std::pair<std::string, std::size_t>> out;
  std::map<std::string, std::size_t> position;
  const auto& items = p.values[value].items;
  for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
    const auto& key = p.values[items[i]];
    if (key.kind != Kind::String) {
      notes.push_back(cat("skipped an entry whose key is ", pickle::describe(p, items[i]), ", not a string"));
      continue;
    }
    auto [it, fresh] = position.try_emplace(key.text, out.size());
    if (fresh) out.emplace_back(key.text, items[i + 1]);
    else out[it->second].second = items[i + 1];
  }
  return out;
}

bool holds_tensors(const Pickle& p, std::size_t value) {
  const auto& v = p.values[value];
  if (v.kind != Kind::Dict) return false;
  for (std::size_t i = 1; i < v.items.size(); i += 2) {
    if (p.values[v.items[i]].kind == Kind::Tensor) return true;
  }
  return false;
}

std::string key_list(const std::vector<std::pair<std::string, std::size_t>>& entries) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : entries) {
    if (keys.size() == 10) {
      keys.push_back(cat("... (", entries.size(), " in all)"));
      break;
    }
    keys.push_back(quote(key));
  }
  return join(keys, ", ");
}

// The state dict in the pickle: its root, or the root's entry `key`; its tensors with the
// storages they use, each read by `storage_bytes`.
Weights select(const Pickle& p, const std::string& key,
               const std::function<std::string(const pickle::StorageRef&)>& storage_bytes) {
  Weights out;
  std::size_t dict = p.root;
  if (p.values[dict].kind != Kind::Dict) {
    throw IOError(cat("the file holds ", pickle::describe(p, dict), ", not a state dict (a dict of tensors)"));
  }
  if (!key.empty()) {
    const auto entries = string_entries(p, dict, out.notes);
    std::optional<std::size_t> found;
    for (const auto& [k, v] : entries) {
      if (k == key) found = v;
    }
    if (!found) throw IOError(cat("the file's dict has no key ", quote(key), "; its keys are ", key_list(entries)));
    if (p.values[*found].kind != Kind::Dict) {
      throw IOError(cat("the file's entry ", quote(key), " is ", pickle::describe(p, *found), ", not a state dict"));
    }
    dict = *found;
  }
  const auto entries = string_entries(p, dict, out.notes);
  std::vector<std::string> skipped, candidates;
  std::map<std::size_t, std::size_t> storage_of;  // the pickle's storage -> out.storages
  for (const auto& [name, value] : entries) {
    const auto& v = p.values[value];
    if (v.kind != Kind::Tensor) {
      skipped.push_back(cat(quote(name), " (", pickle::describe(p, value), ")"));
      if (holds_tensors(p, value)) candidates.push_back(quote(name));
      continue;
    }
    TensorRecord t = p.tensors[static_cast<std::size_t>(v.number)];
    auto [it, fresh] = storage_of.try_emplace(t.storage, out.storages.size());
    if (fresh) {
      const auto& ref = p.storages[t.storage];
      StorageRecord storage{ref.type, ref.numel, storage_bytes(ref)};
      normalize_bools(storage);
      out.storages.push_back(std::move(storage));
    }
    t.storage = it->second;
    out.tensors.emplace_back(name, std::move(t));
  }
  if (out.tensors.empty() && !candidates.empty()) {
    throw IOError(
        cat("the file holds a checkpoint dict (keys ", key_list(entries), ") whose entr",
            candidates.size() == 1 ? "y " : "ies ", join(candidates, ", "), candidates.size() == 1 ? " holds" : " hold",
            " tensors: name the state dict with LoadOptions::key (for example .key = ", candidates.front(), ")"));
  }
  if (!skipped.empty()) {
    if (out.tensors.empty()) throw IOError(cat("the file's dict holds no tensors: ", join(skipped, ", ")));
    out.notes.push_back(cat("skipped what is not a tensor: ", join(skipped, ", ")));
  }
  return out;
}

std::string expect_size(std::string bytes, const pickle::StorageRef& ref, const std::string& where) {
  const std::uint64_t needed = ref.numel * element_size(ref.type);
  if (bytes.size() != needed) {
    throw IOError(cat("damaged: ", where, " holds ", bytes.size(), " bytes, but its storage of ", ref.numel, " ",
                      name(ref.type), " needs ", needed));
  }
  return bytes;
}

}  // namespace

Weights read_pytorch_zip(std::string_view bytes, const std::string& key) {
  ZipReader zip(bytes);
  if (zip.entries() == 0) throw IOError("an empty zip archive, not a torch.save file");
  const std::string first = zip.name(0);
  const auto slash = first.find('/');
  if (slash == std::string::npos || slash == 0) {
    throw IOError(cat("a zip archive whose entry ", quote(first),
                      " is not in a folder, as torch.save writes them: "
                      "not a torch.save file"));
  }
  const std::string folder = first.substr(0, slash + 1);
  if (zip.find(folder + "constants.pkl") || zip.find(folder + "code/")) {
    throw IOError(
        "a TorchScript archive (torch.jit.save, or LibTorch's torch::save), not a state dict: in Python, "
        "torch.save(torch.jit.load(path).state_dict(), \"model.pt\") writes one");
  }
  const auto data = zip.find(folder + "data.pkl");
  if (!data) throw IOError(cat("a zip archive without ", folder, "data.pkl: not a torch.save file"));
  if (const auto order = zip.find(folder + "byteorder")) {
    const auto mark = zip.read(*order);
    if (mark != "little") {
      throw IOError(cat("written with byte order ", quote(mark),
                        "; ddp reads little-endian files (load it in Python "
                        "on a little-endian machine and save it again)"));
    }
  }
  Pickle p;
  try {
    p = pickle::read(zip.read(*data), pickle::PersistentIds::Zip);
  } catch (const IOError& e) {
    throw IOError(cat(folder, "data.pkl: ", e.what()));
  }
  auto out = select(p, key, [&](const pickle::StorageRef& ref) {
    const std::string entry = folder + "data/" + ref.key;
    const auto index = zip.find(entry);
    if (!index) throw IOError(cat("damaged: no entry ", quote(entry), " for storage ", quote(ref.key)));
    return expect_size(zip.read(*index), ref, "entry " + quote(entry));
  });
  out.format = "PyTorch zip";
  return out;
}

Weights read_pytorch_legacy(std::string_view bytes, const std::string& key) {
  std::size_t pos = 0;
  auto next = [&](const char* what, pickle::PersistentIds ids) {
    try {
      auto p = pickle::read(bytes.substr(pos), ids);
      pos += p.size;
      return p;
    } catch (const IOError& e) {
      throw IOError(cat("legacy torch.save format, ", what, " at byte ", pos, ": ", e.what()));
    }
  };
  const auto magic = next("the magic number", pickle::PersistentIds::None);
  const auto& m = magic.values[magic.root];
  if (m.kind != Kind::BigInt || m.text != kLegacyMagic) {
    throw IOError(cat("a pickle that torch.save did not write (it starts with ", pickle::describe(magic, magic.root),
                      ", not torch.save's magic number); in Python, save the weights with "
                      "torch.save(model.state_dict(), \"model.pt\")"));
  }
  const auto protocol = next("the protocol version", pickle::PersistentIds::None);
  const auto& version = protocol.values[protocol.root];
  if (version.kind != Kind::Int || version.number != kLegacyProtocol) {
    throw IOError(
        cat("legacy torch.save format with protocol version ",
            version.kind == Kind::Int ? std::to_string(version.number) : pickle::describe(protocol, protocol.root),
            "; ddp reads ", kLegacyProtocol));
  }
  const auto info = next("the system information", pickle::PersistentIds::None);
  std::vector<std::string> ignored;
  if (info.values[info.root].kind == Kind::Dict) {
    for (const auto& [k, v] : string_entries(info, info.root, ignored)) {
      if (k == "little_endian" && info.values[v].kind == Kind::Bool && info.values[v].number == 0) {
        throw IOError(
            "written on a big-endian machine; ddp reads little-endian files (load it in Python on a "
            "little-endian machine and save it again)");
      }
    }
  }
  const auto object = next("the object", pickle::PersistentIds::Legacy);
  const auto keys = next("the list of storages", pickle::PersistentIds::None);
  const auto& list = keys.values[keys.root];
  if (list.kind != Kind::List) throw IOError("legacy torch.save format: damaged: the list of storages is not a list");
  // The storages follow in the list's order, each as its element count (int64) and its bytes.
  std::map<std::string, std::string> data;
  std::map<std::string, const pickle::StorageRef*> refs;
  for (const auto& ref : object.storages) refs[ref.key] = &ref;
  for (const auto item : list.items) {
    const auto& k = keys.values[item];
    if (k.kind != Kind::String) throw IOError("legacy torch.save format: damaged: a storage key is not a string");
    const auto ref = refs.find(k.text);
    if (ref == refs.end())
      throw IOError(cat("legacy torch.save format: damaged: storage ", quote(k.text), " is used by nothing"));
    if (bytes.size() - pos < 8) {
      throw IOError(cat("truncated: storage ", quote(k.text), " should start at byte ", pos, ", but the file ends at ",
                        bytes.size()));
    }
    std::uint64_t numel = 0;
    for (std::size_t i = 8; i-- > 0;) numel = (numel << 8) | static_cast<unsigned char>(bytes[pos + i]);
    pos += 8;
    if (numel != ref->second->numel) {
      throw IOError(
          cat("damaged: storage ", quote(k.text), " holds ", numel, " elements, its tensors say ", ref->second->numel));
    }
    const std::uint64_t size = numel * element_size(ref->second->type);
    if (size > bytes.size() - pos) {
      throw IOError(cat("truncated: storage ", quote(k.text), " needs ", size, " bytes at byte ", pos,
                        ", but the file ends at ", bytes.size()));
    }
    data[k.text] = std::string(bytes.substr(pos, static_cast<std::size_t>(size)));
    pos += static_cast<std::size_t>(size);
  }
  auto out = select(object, key, [&](const pickle::StorageRef& ref) {
    const auto it = data.find(ref.key);
    if (it == data.end()) throw IOError(cat("damaged: storage ", quote(ref.key), " is missing from the file"));
    return expect_size(std::move(it->second), ref, "storage " + quote(ref.key));
  });
  out.format = "PyTorch legacy";
  return out;
}

std::string write_pytorch(const Weights& weights) {
  const std::string pickled = pickle::write_state_dict(weights);
  std::vector<std::pair<std::string, std::string_view>> entries = {{"archive/data.pkl", pickled},
                                                                   {"archive/byteorder", "little"}};
  for (std::size_t i = 0; i < weights.storages.size(); ++i) {
    entries.emplace_back(cat("archive/data/", i), weights.storages[i].bytes);
  }
  entries.emplace_back("archive/version", "3\n");
  return write_zip(entries);
}

}  // namespace ddp::detail::weights
