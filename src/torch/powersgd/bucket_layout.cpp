#include "powersgd/bucket_layout.h"

#include "ddp/error.h"
#include "util/strings.h"
#include "powersgd/powersgd_access.h"

namespace ddp::comm_hooks {
namespace {

using detail::cat;

at::Tensor encode_shapes(const Shapes& shapes) {
  std::vector<std::int64_t> flat;
  for (const auto& shape : shapes) {
    flat.push_back(static_cast<std::int64_t>(shape.size()));
    flat.insert(flat.end(), shape.begin(), shape.end());
  }
  return at::tensor(flat, at::kLong);
}

// The inverse of encode_shapes, for a tensor that may come from a damaged checkpoint.
Shapes decode_shapes(const at::Tensor& encoded, std::size_t bucket) {
  at::Tensor flat = encoded.to(at::kLong).contiguous().view({-1});
  const auto* v = flat.data_ptr<std::int64_t>();
  const std::int64_t total = flat.numel();
  Shapes shapes;
  for (std::int64_t at = 0; at < total;) {
    const std::int64_t dims = v[at++];
    if (dims < 0 || dims > total - at) {
      throw Error(cat("powersgd: the memorized layout of bucket ", bucket,
                      " is damaged; load a checkpoint written by PowerSGDState::save"));
    }
    shapes.emplace_back(v + at, v + at + dims);
    at += dims;
  }
  return shapes;
}

std::string describe_shapes(const Shapes& shapes) {
  std::string out;
  for (const auto& shape : shapes) out += cat(out.empty() ? "" : " ", at::IntArrayRef(shape));
  return out;
}

// For each parameter of `now`, the position in `before` of the one it continues: equal shapes,
// same-shaped parameters in their order. Throws when the shapes differ.
std::vector<std::size_t> match_shapes(const Shapes& before, const Shapes& now, std::size_t bucket) {
  std::vector<bool> taken(before.size(), false);
  std::vector<std::size_t> from;
  for (const auto& shape : now) {
    std::size_t k = 0;
    while (k < before.size() && (taken[k] || before[k] != shape)) ++k;
    if (k == before.size() || before.size() != now.size()) {
      throw Error(cat("powersgd: bucket ", bucket, " holds parameters of shapes ", describe_shapes(now),
                      " but its memorized error and Q are for ", describe_shapes(before),
                      "; the buckets changed since they were memorized (a checkpoint's PowerSGD state from another "
                      "model or bucket_cap_mb?)"));
    }
    taken[k] = true;
    from.push_back(k);
  }
  return from;
}

// Where each parameter's Q lies in a bucket's Q memory ({offset, numel}; numel 0: not compressed):
// the order of split() and lay_out(), same-shaped matrices grouped where the shape first appears.
std::vector<std::pair<std::int64_t, std::int64_t>> q_slots(const Shapes& shapes, const PowerSGDOptions& options) {
  std::vector<std::pair<std::int64_t, std::int64_t>> slots(shapes.size(), {0, 0});
  auto matrix = [&](std::size_t k) {  // n x m, as split() views it
    return std::pair{shapes[k][0], c10::multiply_integers(shapes[k]) / shapes[k][0]};
  };
  std::vector<bool> placed(shapes.size(), false);
  std::int64_t offset = 0;
  for (std::size_t first = 0; first < shapes.size(); ++first) {
    if (placed[first] || compression_rank(shapes[first], options) == 0) continue;
    for (std::size_t k = first; k < shapes.size(); ++k) {
      if (placed[k] || compression_rank(shapes[k], options) == 0 || matrix(k) != matrix(first)) continue;
      placed[k] = true;
      slots[k] = {offset, matrix(k).second * compression_rank(shapes[k], options)};
      offset += slots[k].second;
    }
  }
  return slots;
}

}  // namespace

Shapes shapes_of(const GradBucket& bucket) {
  Shapes shapes;
  for (const auto& p : bucket.parameters()) shapes.emplace_back(p.sizes().begin(), p.sizes().end());
  return shapes;
}

void follow_layout(PowerSGDState& state, std::size_t index, const Shapes& now) {
  auto& layouts = PowerSGDAccess::layout(state);
  auto found = layouts.find(index);
  if (found != layouts.end()) {
    const Shapes before = decode_shapes(found->second, index);
    if (before != now) {
      const std::vector<std::size_t> from = match_shapes(before, now, index);
      auto& errors = PowerSGDAccess::error(state);
      if (auto e = errors.find(index); e != errors.end()) {
        std::vector<std::int64_t> offsets{0};
        for (const auto& shape : before) offsets.push_back(offsets.back() + c10::multiply_integers(shape));
        if (e->second.numel() == offsets.back()) {
          std::vector<at::Tensor> parts;
          for (std::size_t k : from) parts.push_back(e->second.narrow(0, offsets[k], offsets[k + 1] - offsets[k]));
          e->second = at::cat(parts);
        }
      }
      auto& qs = PowerSGDAccess::q(state);
      if (auto q = qs.find(index); q != qs.end()) {
        const auto old_slots = q_slots(before, state.options()), new_slots = q_slots(now, state.options());
        const std::int64_t total = old_slots.empty() ? 0 : q->second.numel();
        at::Tensor moved = at::empty_like(q->second);
        bool fits = true;
        for (std::size_t k = 0; k < now.size(); ++k) {
          const auto [to_at, size] = new_slots[k];
          const auto [from_at, from_size] = old_slots[from[k]];
          fits = fits && from_at + from_size <= total && to_at + size <= total;
          if (size > 0 && fits) moved.narrow(0, to_at, size).copy_(q->second.narrow(0, from_at, size));
        }
        if (fits) q->second = moved;  // otherwise the size check names the misfit
      }
    }
  }
  layouts[index] = encode_shapes(now);
}

}  // namespace ddp::comm_hooks
