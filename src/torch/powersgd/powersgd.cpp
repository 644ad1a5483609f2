// The PowerSGD hook: PyTorch 1.13's powerSGD_hook step for step (the same tensor operations in the
// same order, so that its results match PyTorch's to rounding and its random Qs to the bit).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "powersgd/bucket_layout.h"
#include "powersgd/low_rank.h"
#include "powersgd/powersgd_access.h"
#include "ddp/error.h"
#include "ddp/torch/collectives.h"
#include "ddp/torch/powersgd.h"
#include "util/strings.h"

namespace ddp::comm_hooks {
namespace {

using detail::cat;

// PyTorch's _orthogonalize: Gram-Schmidt on each matrix's columns for rank <= 2 or 16-bit
// floats, QR otherwise. `matrices` is batch x rows x rank, orthogonalized in place.
void orthogonalize(const at::Tensor& matrices, double epsilon) {
  const std::int64_t cols = matrices.size(2);
  const bool half = matrices.scalar_type() == at::kHalf || matrices.scalar_type() == at::kBFloat16;
  if (cols > 2 && !half) {
    matrices.copy_(std::get<0>(at::linalg_qr(matrices)));
    return;
  }
  for (std::int64_t i = 0; i < cols; ++i) {
    at::Tensor col = matrices.narrow(2, i, 1);
    at::Tensor norm = at::frobenius_norm(col, {1}, true);
    if (epsilon != 0) norm = norm + epsilon;
    col.div_(norm);  // a zero column becomes NaN with epsilon 0, as in PyTorch
    if (i + 1 < cols) {
      at::Tensor rest = matrices.narrow(2, i + 1, cols - i - 1);
      rest.sub_(at::sum(col * rest, {1}, true) * col);
    }
  }
}

// matrix = P Q^T and, with an error, error = the matrix's values before minus P Q^T: one pass
// over the matrix (low_rank.h) where a copy of the bucket before, a bmm and the subtraction after
// make six. `matrix` (n x m) is a view of the bucket, `error` its place in the error memory or
// undefined, `p` n x r, `q` m x r. ATen off the CPU and for other types.
void decompress(const at::Tensor& p, const at::Tensor& q, const at::Tensor& matrix, const at::Tensor& error) {
  const auto type = matrix.scalar_type();
  const bool loop = matrix.device().is_cpu() && (type == at::kFloat || type == at::kDouble) && matrix.is_contiguous() &&
                    p.is_contiguous() && q.is_contiguous() && (!error.defined() || error.is_contiguous());
  if (!loop) {
    at::Tensor pq = at::mm(p, q.t());
    if (error.defined()) {
      at::Tensor e = error;
      at::sub_out(e, matrix, pq);
    }
    matrix.copy_(pq);
    return;
  }
  const std::int64_t n = matrix.size(0), m = matrix.size(1);
  AT_DISPATCH_FLOATING_TYPES(type, "powersgd decompress", [&] {
    const at::Tensor qt = q.t().contiguous();  // the row loops run along m
    scalar_t* e = error.defined() ? error.data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, n, std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(m, 1)),
                     [&](std::int64_t from, std::int64_t to) {
      std::vector<scalar_t> row(static_cast<std::size_t>(m));
      detail::decompress_rows(p.data_ptr<scalar_t>(), qt.data_ptr<scalar_t>(), matrix.data_ptr<scalar_t>(), e,
                              row.data(), from, to, m, p.size(1));
    });
  });
}

// Views of the bucket's buffer shaped like its parameters (the reducer lays the gradients out one
// after another in parameter order: reducer/bucket.cpp), as PyTorch's GradBucket.gradients().
std::vector<at::Tensor> gradients(const GradBucket& bucket) {
  std::vector<at::Tensor> views;
  std::int64_t offset = 0;
  for (const auto& p : bucket.parameters()) {
    views.push_back(bucket.buffer().narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
  return views;
}

// One matrix (or a stack of same-shaped ones) to compress, with its P and Q in the bucket's memory.
struct Compressed {
  at::Tensor matrices;              // batch x n x m: a view of the bucket, or a stack of copies
  std::vector<at::Tensor> stacked;  // with a stack: the bucket's views it was copied from
  at::Tensor p, q;                  // batch x n x r, batch x m x r
};

// The bucket's gradients split as PyTorch's hook splits them, in its order: matrices to compress
// grouped by shape (in the order each shape first appears), the rest in bucket order.
struct Split {
  std::vector<std::vector<at::Tensor>> by_shape;
  std::vector<at::Tensor> uncompressed;
  std::int64_t p_size = 0, q_size = 0, numel_before = 0, numel_after = 0;
};

Split split(const std::vector<at::Tensor>& gradients, const PowerSGDOptions& options) {
  Split s;
  for (const auto& g : gradients) {
    const std::int64_t numel = g.numel();
    s.numel_before += numel;
    if (const std::int64_t r = compression_rank(g.sizes(), options)) {
      const std::int64_t n = g.size(0), m = numel / n;
      at::Tensor matrix = g.view({n, m});
      auto same = std::find_if(s.by_shape.begin(), s.by_shape.end(),
                               [&](const auto& group) { return group.front().sizes() == matrix.sizes(); });
      if (same == s.by_shape.end()) {
        s.by_shape.push_back({matrix});
      } else {
        same->push_back(matrix);
      }
      s.p_size += n * r;
      s.q_size += m * r;
      s.numel_after += (n + m) * r;
      continue;
    }
    s.uncompressed.push_back(g);
    s.numel_after += numel;
  }
  return s;
}

// The compressed matrices with their P and Q carved out of `p_memory` and `q_memory` in order.
std::vector<Compressed> lay_out(const Split& s, bool batch, int rank, const at::Tensor& p_memory,
                                const at::Tensor& q_memory) {
  std::vector<Compressed> out;
  auto add = [&](at::Tensor matrices, std::vector<at::Tensor> stacked) {
    out.push_back({std::move(matrices), std::move(stacked), {}, {}});
  };
  for (const auto& group : s.by_shape) {
    if (batch && group.size() > 1) {
      add(at::stack(group), group);
    } else {
      for (const auto& m : group) add(m.unsqueeze(0), {});
    }
  }
  std::int64_t p_at = 0, q_at = 0;
  for (auto& c : out) {
    const std::int64_t b = c.matrices.size(0), n = c.matrices.size(1), m = c.matrices.size(2);
    const std::int64_t r = std::min<std::int64_t>({n, m, rank});
    c.p = p_memory.narrow(0, p_at, b * n * r).view({b, n, r});
    c.q = q_memory.narrow(0, q_at, b * m * r).view({b, m, r});
    p_at += b * n * r;
    q_at += b * m * r;
  }
  return out;
}

// A memorized tensor (perhaps from a checkpoint) on the bucket's device; it must fit the bucket.
at::Tensor& fitted(at::Tensor& memorized, std::int64_t numel, const at::Tensor& like, const char* what,
                   std::size_t bucket) {
  if (memorized.numel() != numel) {
    throw Error(cat("powersgd: the memorized ", what, " of bucket ", bucket, " has ", memorized.numel(),
                    " elements but the bucket needs ", numel,
                    "; the buckets changed since it was memorized (a "
                    "checkpoint's PowerSGD state from another model or bucket_cap_mb?)"));
  }
  if (memorized.device() != like.device() || memorized.scalar_type() != like.scalar_type()) {
    memorized = memorized.to(like.options());
  }
  return memorized;
}

void count_iteration(PowerSGDState& state, const GradBucket& bucket) {
  if (bucket.is_last()) ++PowerSGDAccess::iter(state);
}

std::shared_ptr<Future> compress(const std::shared_ptr<PowerSGDState>& state_ptr, GradBucket& bucket) {
  PowerSGDState& state = *state_ptr;
  const PowerSGDOptions& options = state.options();
  const std::size_t index = bucket.index();
  const auto& group = bucket.process_group();
  const int world = group->size();
  at::Tensor input = bucket.buffer();

  follow_layout(state, index, shapes_of(bucket));
  // With error feedback the bucket's error memory: read here, rewritten where finish decompresses.
  at::Tensor error;
  if (options.use_error_feedback) {
    auto& errors = PowerSGDAccess::error(state);
    auto found = errors.find(index);
    if (found != errors.end()) {
      input.add_(fitted(found->second, input.numel(), input, "error", index));
      if (!found->second.is_contiguous()) found->second = found->second.contiguous();
    } else {
      found = errors.emplace(index, at::zeros_like(input, at::MemoryFormat::Contiguous)).first;
    }
    error = found->second;
  }
  // Where a view of the bucket lies in the error memory, which has the bucket's layout.
  const auto error_of = [error, input](const at::Tensor& view) {
    return error.as_strided(view.sizes(), view.strides(),
                            error.storage_offset() + (view.storage_offset() - input.storage_offset()));
  };

  Split s = split(gradients(bucket), options);
  PowerSGDAccess::numel_before(state) += s.numel_before;
  PowerSGDAccess::numel_after(state) += s.numel_after;

  // The uncompressed values and P travel in one all-reduce: [uncompressed | P].
  std::int64_t uncompressed_numel = 0;
  for (const auto& t : s.uncompressed) uncompressed_numel += t.numel();
  at::Tensor carried = at::empty({uncompressed_numel + s.p_size}, input.options());
  {
    std::int64_t at = 0;
    for (const auto& t : s.uncompressed) {
      carried.narrow(0, at, t.numel()).view_as(t).copy_(t);
      at += t.numel();
    }
  }

  auto& ps = PowerSGDAccess::p(state);
  auto& qs = PowerSGDAccess::q(state);
  const bool fresh = !options.warm_start || ps.find(index) == ps.end();
  if (fresh) qs[index] = at::empty({s.q_size}, input.options());
  if (!fresh) fitted(ps[index], s.p_size, input, "P", index);  // P itself is recomputed: its size is checked
  at::Tensor p_memory = ps[index] = carried.narrow(0, uncompressed_numel, s.p_size);
  at::Tensor q_memory = fitted(qs[index], s.q_size, input, "Q", index);
  std::vector<Compressed> compressed =
      lay_out(s, options.batch_tensors_with_same_shape, options.matrix_approximation_rank, p_memory, q_memory);

  if (fresh) {
    // numpy's RandomState.randint(1_000_000_000): 30 masked bits, redrawn while >= 10^9.
    std::uint32_t seed;
    do seed = PowerSGDAccess::rng(state)() & ((1u << 30) - 1);
    while (seed >= 1000000000u);
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    for (auto& c : compressed) {
      c.q.copy_(at::randn(c.q.sizes(), generator, input.options().device(at::kCPU)));
      orthogonalize(c.q, options.orthogonalization_epsilon);
    }
  } else {
    for (auto& c : compressed) orthogonalize(c.q, options.orthogonalization_epsilon);
  }
  for (auto& c : compressed) at::bmm_out(c.p, c.matrices, c.q);

  // Every rank issues the same collectives in the same order: this bucket's uncompressed values
  // and P now, its Q when the end of backward waits for it (buckets in order). An empty part is
  // empty on every rank (the same bucket), so skipping it keeps the order.
  auto work = carried.numel() > 0 ? all_reduce_async(carried, ReduceOp::SUM, group)
                                  : Work::completed("powersgd: an empty bucket");
  auto finish = [state_ptr, bucket_is_last = bucket.is_last(), index, group, world, input, error, error_of, carried,
                 uncompressed_numel, unpack = std::move(s.uncompressed), compressed = std::move(compressed),
                 q_memory](at::Tensor /*carried, reduced*/) mutable {
    PowerSGDState& state = *state_ptr;
    const PowerSGDOptions& options = state.options();
    at::Tensor uncompressed = carried.narrow(0, 0, uncompressed_numel);
    uncompressed.div_(world);
    std::int64_t at = 0;
    for (auto& t : unpack) {
      const at::Tensor average = uncompressed.narrow(0, at, t.numel()).view_as(t);
      if (error.defined()) {
        at::Tensor e = error_of(t);
        at::sub_out(e, t, average);
      }
      t.copy_(average);
      at += t.numel();
    }
    // P is not divided by the world size: it is orthogonalized next.
    for (auto& c : compressed) orthogonalize(c.p, options.orthogonalization_epsilon);
    for (auto& c : compressed) at::bmm_out(c.q, c.matrices.transpose(1, 2), c.p);
    if (q_memory.numel() > 0) all_reduce(q_memory, ReduceOp::SUM, group);
    q_memory.div_(world);
    // Straight into the bucket (a stack's own matrices are not read again), the error beside.
    const auto none = at::Tensor();
    for (auto& c : compressed) {
      for (std::int64_t b = 0; b < c.matrices.size(0); ++b) {
        const at::Tensor target = c.stacked.empty() ? c.matrices[b] : c.stacked[static_cast<std::size_t>(b)];
        decompress(c.p[b], c.q[b], target, error.defined() ? error_of(target) : none);
      }
    }
    if (!options.warm_start) {
      PowerSGDAccess::p(state).clear();
      PowerSGDAccess::q(state).clear();
    }
    if (bucket_is_last) ++PowerSGDAccess::iter(state);
    return input;
  };
  return std::make_shared<Future>(work, carried, std::move(finish));
}

}  // namespace

CommHook powersgd(std::shared_ptr<PowerSGDState> state) {
  if (!state) throw InvalidArgument("powersgd: the state is null; pass std::make_shared<PowerSGDState>(options)");
  return [state = std::move(state), plain = allreduce()](GradBucket& bucket) {
    at::NoGradGuard no_grad;
    if (state->iter() < state->options().start_powerSGD_iter) {
      count_iteration(*state, bucket);
      return plain(bucket);
    }
    return compress(state, bucket);
  };
}

CommHook powersgd(PowerSGDOptions options) { return powersgd(std::make_shared<PowerSGDState>(options)); }

}  // namespace ddp::comm_hooks
