#include "weights_round_trip.h"

#include <cstdlib>

#include "state_dict/pytorch_file.h"
#include "state_dict/safetensors_file.h"

namespace ddp::fuzz {
namespace {

namespace weights = detail::weights;

#define CHECK(condition) \
  if (!(condition)) __builtin_trap()

// The elements of tensor `t` of `w`, in row-major order, as bytes.
std::string elements(const weights::Weights& w, const weights::TensorRecord& t) {
  const auto& storage = w.storages[t.storage];
  const auto size = weights::element_size(t.type);
  const auto count = weights::element_count(t.sizes);
  CHECK(count.has_value());
  std::string out;
  if (*count == 0) return out;
  std::vector<std::int64_t> index(t.sizes.size(), 0);
  for (std::uint64_t n = 0; n < *count; ++n) {
    std::int64_t at = t.offset;
    for (std::size_t d = 0; d < index.size(); ++d) at += index[d] * t.strides[d];
    CHECK(static_cast<std::uint64_t>(at) < storage.numel);
    out.append(storage.bytes, static_cast<std::size_t>(at) * size, size);
    for (std::size_t d = index.size(); d-- > 0;) {
      if (++index[d] < t.sizes[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

void expect_same(const weights::Weights& a, const weights::Weights& b) {
  CHECK(a.tensors.size() == b.tensors.size());
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    CHECK(a.tensors[i].first == b.tensors[i].first);
    CHECK(a.tensors[i].second.type == b.tensors[i].second.type);
    CHECK(a.tensors[i].second.sizes == b.tensors[i].second.sizes);
    CHECK(elements(a, a.tensors[i].second) == elements(b, b.tensors[i].second));
  }
}

}  // namespace

void check_round_trip(const weights::Weights& w) {
  // Reading bounds the elements a tensor may reach; a fuzzed view can still name 2^62 of them
  // (strides of 0), more than is worth copying.
  std::uint64_t total = 0;
  for (const auto& [name, t] : w.tensors) total += *weights::element_count(t.sizes);
  if (total > (1u << 20)) return;

  const auto zip = weights::read_pytorch_zip(weights::write_pytorch(w), "");
  expect_same(w, zip);

  weights::Weights contiguous;  // safetensors holds each tensor whole, in a storage of its own
  for (const auto& [name, t] : w.tensors) {
    if (name == "__metadata__") return;  // the one name safetensors reserves
    const auto bytes = elements(w, t);
    contiguous.storages.push_back({t.type, bytes.size() / weights::element_size(t.type), bytes});
    contiguous.tensors.emplace_back(name, weights::TensorRecord{t.type, t.sizes, weights::contiguous_strides(t.sizes),
                                                                0, contiguous.storages.size() - 1});
  }
  contiguous.metadata = w.metadata;
  const auto st = weights::read_safetensors(weights::write_safetensors(contiguous));
  CHECK(st.metadata == w.metadata);
  // safetensors keeps data order, which is the order written.
  expect_same(contiguous, st);
}

}  // namespace ddp::fuzz
