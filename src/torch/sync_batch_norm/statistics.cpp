#include "sync_batch_norm/statistics.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <vector>

namespace ddp::detail {
namespace {

// [C] reshaped to broadcast over [N, C, *].
at::Tensor per_channel(const at::Tensor& values, const at::Tensor& input) {
  std::vector<std::int64_t> shape(static_cast<std::size_t>(input.dim()), 1);
  shape[1] = values.numel();
  return values.view(shape);
}

// (c + x * b) + dy * a per channel, as the two addcmuls below compute it, in one pass over
// contiguous CPU tensors of float or double (they take two, the second rereading the first's
// output: a pass over the activations per layer in every backward). Undefined when it does not apply.
template <typename T>
void affine_pass(const T* dy, const T* x, T* out, const T* a, const T* b, const T* c, std::int64_t planes,
                 std::int64_t channels, std::int64_t inner) {
  at::parallel_for(0, planes, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const std::int64_t ch = plane % channels, first = plane * inner;
      const T ac = a[ch], bc = b[ch], cc = c[ch];
      for (std::int64_t i = 0; i < inner; ++i) out[first + i] = (cc + x[first + i] * bc) + dy[first + i] * ac;
    }
  });
}

at::Tensor fused_input_gradient(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& a,
                                const at::Tensor& b, const at::Tensor& c) {
  const auto t = input.scalar_type();
  if (input.is_cuda() || (t != at::kFloat && t != at::kDouble) || grad_output.scalar_type() != t ||
      !input.is_contiguous() || !grad_output.is_contiguous() || a.scalar_type() != t) {
    return {};
  }
  at::Tensor out = at::empty_like(input, at::MemoryFormat::Contiguous);
  const std::int64_t channels = input.size(1), planes = input.size(0) * channels;
  const std::int64_t inner = planes == 0 ? 0 : input.numel() / planes;
  AT_DISPATCH_FLOATING_TYPES(t, "SyncBatchNorm input gradient", [&] {
    affine_pass<scalar_t>(grad_output.data_ptr<scalar_t>(), input.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
                          a.contiguous().data_ptr<scalar_t>(), b.contiguous().data_ptr<scalar_t>(),
                          c.contiguous().data_ptr<scalar_t>(), planes, channels, inner);
  });
  return out;
}

}  // namespace

at::ScalarType statistics_dtype(const at::Tensor& input) {
  const auto t = input.scalar_type();
  return t == at::kHalf || t == at::kBFloat16 ? at::kFloat : t;
}

at::Tensor local_statistics(const at::Tensor& input) {
  const std::int64_t channels = input.size(1);
  at::Tensor out = at::zeros({2 * channels + 1}, input.options().dtype(at::kDouble));
  if (input.numel() == 0) return out;
  // Batch norm's own statistics kernel (one pass per channel, on the CPU and CUDA; the CPU one
  // has no float16): the mean and the biased variance.
  const at::Tensor x = input.scalar_type() == at::kHalf && !input.is_cuda() ? input.to(at::kFloat) : input;
  auto [mean, var] = at::batch_norm_update_stats(x, /*running_mean=*/{}, /*running_var=*/{}, /*momentum=*/0.0);
  out.narrow(0, 0, channels).copy_(mean);
  out.narrow(0, channels, channels).copy_(var);
  out.narrow(0, 2 * channels, 1).fill_(static_cast<double>(input.numel() / channels));
  return out;
}

GroupStatistics combine_statistics(const at::Tensor& gathered, at::ScalarType dtype) {
  const at::Tensor g = gathered.to(at::kDouble);
  const std::int64_t channels = (g.size(1) - 1) / 2;
  const at::Tensor means = g.narrow(1, 0, channels), vars = g.narrow(1, channels, channels);
  const at::Tensor counts = g.narrow(1, 2 * channels, 1);  // [ranks, 1]
  const double total = counts.sum().item<double>();
  GroupStatistics stats;
  stats.count = static_cast<std::int64_t>(total + 0.5);
  if (stats.count == 0) {
    stats.mean = at::zeros({channels}, g.options().dtype(dtype));
    stats.var = at::zeros({channels}, g.options().dtype(dtype));
    return stats;
  }
  const at::Tensor weights = counts / total;
  const at::Tensor mean = (weights * means).sum(0);
  const at::Tensor var = (weights * (vars + (means - mean).square())).sum(0);
  stats.mean = mean.to(dtype);
  stats.var = var.to(dtype);
  return stats;
}

void update_running_statistics(at::Tensor& running_mean, at::Tensor& running_var, const GroupStatistics& stats,
                               double momentum) {
  at::NoGradGuard no_grad;
  if (running_mean.defined()) {
    running_mean.mul_(1 - momentum).add_(stats.mean.to(running_mean.scalar_type()), momentum);
  }
  if (running_var.defined() && stats.count > 1) {
    const double unbias = static_cast<double>(stats.count) / static_cast<double>(stats.count - 1);
    running_var.mul_(1 - momentum).add_((stats.var.to(at::kDouble) * unbias).to(running_var.scalar_type()), momentum);
  }
}

at::Tensor normalize(const at::Tensor& input, const GroupStatistics& stats, const at::Tensor& weight,
                     const at::Tensor& bias, double eps) {
  if (input.numel() == 0) return at::empty_like(input);
  // Inference-mode batch norm with the group's statistics in place of the running ones: one
  // fused pass, on any device.
  return at::batch_norm(input, weight, bias, stats.mean, stats.var, /*training=*/false, /*momentum=*/0.0, eps,
                        /*cudnn_enabled=*/true);
}

at::Tensor local_gradient_sums(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean) {
  const std::int64_t channels = input.size(1);
  at::Tensor out = at::zeros({2 * channels}, input.options().dtype(at::kDouble));
  if (input.numel() == 0) return out;
  if (input.is_cuda()) {
    // CUDA: the reduction PyTorch's SyncBatchNorm uses (its native_batch_norm_backward kernel
    // needs a weight to shape its outputs): sum(dy) and sum(dy * (x - mean)) with an inverse
    // deviation of 1, any memory format, float16 inputs with float32 statistics.
    auto sums = at::batch_norm_backward_reduce(grad_output, input, mean, at::ones_like(mean), /*weight=*/{},
                                               /*input_g=*/true, /*weight_g=*/false, /*bias_g=*/false);
    out.narrow(0, 0, channels).copy_(std::get<0>(sums));
    out.narrow(0, channels, channels).copy_(std::get<1>(sums));
    return out;
  }
  // Batch norm's own backward computes both sums in one pass: with an inverse deviation of 1 its
  // weight gradient is sum(dy * (x - mean)), its bias gradient sum(dy).
  auto sums = at::native_batch_norm_backward(grad_output, input, /*weight=*/{}, /*running_mean=*/{},
                                             /*running_var=*/{}, mean, at::ones_like(mean), /*train=*/true,
                                             /*eps=*/0.0, {false, true, true});
  out.narrow(0, 0, channels).copy_(std::get<2>(sums));
  out.narrow(0, channels, channels).copy_(std::get<1>(sums));
  return out;
}

at::Tensor input_gradient(const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& mean,
                          const at::Tensor& invstd, const at::Tensor& weight, const at::Tensor& sums,
                          std::int64_t count) {
  if (input.numel() == 0) return at::zeros_like(input);
  const std::int64_t channels = input.size(1);
  // dy * a + x * b + c per channel, the coefficients in float64.
  const at::Tensor sum_dy = sums.narrow(0, 0, channels), sum_dy_xmu = sums.narrow(0, channels, channels);
  const at::Tensor inv = invstd.to(at::kDouble);
  const at::Tensor a = weight.defined() ? inv * weight.to(at::kDouble) : inv;
  const double n = static_cast<double>(count);
  const at::Tensor b = -a * inv * inv * sum_dy_xmu / n;
  const at::Tensor c = -a * sum_dy / n - b * mean.to(at::kDouble);
  const auto dtype = statistics_dtype(input);
  const at::Tensor at_a = a.to(dtype), at_b = b.to(dtype), at_c = c.to(dtype);
  if (const auto fused = fused_input_gradient(grad_output, input, at_a, at_b, at_c); fused.defined()) return fused;
  at::Tensor grad = at::addcmul(per_channel(at_c, input), input, per_channel(at_b, input));
  grad.addcmul_(grad_output, per_channel(at_a, input));
  return grad.to(input.scalar_type());
}

}  // namespace ddp::detail
