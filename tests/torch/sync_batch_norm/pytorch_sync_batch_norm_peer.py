#!/usr/bin/env python3
"""PyTorch's nn.SyncBatchNorm on 2 ranks (gloo, CPU), for sync_batch_norm_pytorch_test.cpp, which runs
the same cases through ddp::SyncBatchNorm.

    python pytorch_sync_batch_norm_peer.py --out PREFIX

PyTorch runs SyncBatchNorm on accelerators only, 2.x as 1.13: the module refuses a CPU input ("expected
input tensor to be on GPU"), and the five kernels its autograd function calls (batch_norm_stats,
batch_norm_gather_stats_with_counts, batch_norm_elemt, batch_norm_backward_reduce,
batch_norm_backward_elemt) have CUDA implementations only. So this script registers CPU kernels for
those five ops through torch.library, written from the CUDA kernels in aten/src/ATen/native/cuda/
Normalization.cuh (in float64, rounded to the input's dtype), and passes the module's device check
by naming the CPU as the PrivateUse1 backend (the check admits that backend). Everything else is
PyTorch's own: the module's momentum and num_batches_tracked, the autograd function's all_gather of
(mean, invstd, count), its masking of empty ranks, its all_reduce of the gradient sums, and its
unbiased running variance. PyTorch 1.13 checks input.is_cuda instead, which nothing passes on the CPU
(and has no PrivateUse1 backend): the script exits with status 3 there, saying so.

Inputs are exact in float32 on both sides (integers mod a prime over a power of two), so that no
transcendental function's last bit can differ. Each rank writes PREFIX.CASE.RANK.bin: for each step
the output, the input's gradient, the weight's and bias's gradients (affine only), then the running
mean and variance and num_batches_tracked (as float32).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from peer_ranks import run_ranks  # noqa: E402

# name, channels, rows per rank, the shape after [N, C], affine, momentum (None: cumulative), steps.
# As kCases in sync_batch_norm_pytorch_test.cpp.
CASES = [
    ("affine_2d", 3, [3, 5], [4, 2], True, 0.1, 3),
    ("plain_1d", 4, [4, 2], [6], False, 0.3, 3),
    ("affine_cumulative", 5, [2, 3], [], True, None, 3),
    ("plain_empty_rank", 2, [0, 4], [3, 3], False, 0.1, 2),
    ("affine_empty_rank", 3, [5, 0], [7], True, None, 2),
]


def pattern(shape, multiplier, offset, prime, denominator, shift):
    """((k * multiplier + offset) mod prime) / denominator - shift, k = 0, 1, ... in row-major order."""
    n = 1
    for s in shape:
        n *= s
    k = torch.arange(n, dtype=torch.int64)
    return (((k * multiplier + offset) % prime).to(torch.float32) / denominator - shift).reshape(shape)


def inputs(case, rank, step, channels, rows, tail):
    shape = [rows, channels] + tail
    x = pattern(shape, 37, 11 * rank + 5 * step + 3 * case, 101, 16.0, 3.0)
    dy = pattern(shape, 53, 7 * rank + 13 * step + case, 67, 32.0, 1.0)
    return x, dy


# ---- CPU kernels for the five CUDA-only ops, from Normalization.cuh -------------------------------------

def per_channel(x):
    """[N, C, *] -> [C, N * prod(*)], in float64."""
    return x.transpose(0, 1).reshape(x.shape[1], -1).double()


def broadcast(values, like):
    return values.view([1, -1] + [1] * (like.dim() - 2))


def batch_norm_stats(input, eps):
    x = per_channel(input)
    mean = x.mean(1)
    var = ((x - mean[:, None]) ** 2).mean(1)
    invstd = torch.where((var == 0) & (eps == 0), torch.zeros_like(var), 1 / torch.sqrt(var + eps))
    return mean.to(input.dtype), invstd.to(input.dtype)


def batch_norm_gather_stats_with_counts(input, mean, invstd, running_mean, running_var, momentum, eps, counts):
    # batch_norm_reduce_statistics_kernel: rank by rank, Chan's parallel update of (n, mean, M2).
    avg = torch.zeros(mean.shape[1], dtype=torch.float64)
    var_n = torch.zeros_like(avg)
    n = 0.0
    for j in range(mean.shape[0]):
        count = float(counts[j])
        m = mean[j].double()
        v = (1 / invstd[j].double()) ** 2 - eps
        v = v * count
        factor = 1.0 / max(1.0, n + count)
        var_n += v + (avg - m) * (avg - m) * n * count * factor
        avg = n * factor * avg + count * factor * m
        n += count
    save_invstd = 1 / torch.sqrt(var_n / n + eps)
    if running_mean is not None:
        running_mean.copy_(momentum * avg + (1 - momentum) * running_mean.double())
    if running_var is not None:
        running_var.copy_(momentum * (var_n / (n - 1)) + (1 - momentum) * running_var.double())
    return avg.to(input.dtype), save_invstd.to(input.dtype)


def batch_norm_elemt(input, weight, bias, mean, invstd, eps):
    w = weight.double() if weight is not None else torch.ones_like(mean, dtype=torch.float64)
    b = bias.double() if bias is not None else torch.zeros_like(mean, dtype=torch.float64)
    x = input.double()
    out = broadcast(w, x) * (x - broadcast(mean.double(), x)) * broadcast(invstd.double(), x) + broadcast(b, x)
    return out.to(input.dtype)


def batch_norm_backward_reduce(grad_out, input, mean, invstd, weight, input_g, weight_g, bias_g):
    dy, x = per_channel(grad_out), per_channel(input)
    sum_dy = dy.sum(1)
    sum_dy_xmu = (dy * (x - mean.double()[:, None])).sum(1)
    dtype = input.dtype
    return (sum_dy.to(dtype), sum_dy_xmu.to(dtype), (sum_dy_xmu * invstd.double()).to(dtype), sum_dy.to(dtype))


def batch_norm_backward_elemt(grad_out, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    norm = 1.0 / float(count.sum())
    inv = invstd.double()
    grad_mean = sum_dy.double() * norm
    proj_scale = sum_dy_xmu.double() * norm * inv * inv
    grad_scale = inv * (weight.double() if weight is not None else 1.0)
    x, dy = input.double(), grad_out.double()
    m = broadcast(mean.double(), x)
    out = (dy - (x - m) * broadcast(proj_scale, x) - broadcast(grad_mean, x)) * broadcast(grad_scale, x)
    return out.to(input.dtype)


def register_cpu_kernels():
    library = torch.library.Library("aten", "IMPL")
    for kernel in (batch_norm_stats, batch_norm_gather_stats_with_counts, batch_norm_elemt,
                   batch_norm_backward_reduce, batch_norm_backward_elemt):
        library.impl(kernel.__name__, kernel, "CPU")
    return library  # the registrations last while it lives


# ---- The ranks ------------------------------------------------------------------------------------------

def rank_main(out):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    library = register_cpu_kernels()  # noqa: F841
    torch._C._get_privateuse1_backend_name = lambda: "cpu"  # the module's device check admits it
    for c, (name, channels, rows, tail, affine, momentum, steps) in enumerate(CASES):
        bn = torch.nn.SyncBatchNorm(channels, affine=affine, momentum=momentum)
        if affine:
            with torch.no_grad():
                bn.weight.copy_(pattern([channels], 3, c, 7, 4.0, -0.5))
                bn.bias.copy_(pattern([channels], 5, c, 11, 8.0, 0.5))
        parts = []
        for step in range(steps):
            x, dy = inputs(c, rank, step, channels, rows[rank], tail)
            x.requires_grad_(True)
            bn.zero_grad()
            y = bn(x)
            y.backward(dy)
            parts += [y.detach().flatten(), x.grad.flatten() if x.grad is not None else torch.zeros(x.numel())]
            if affine:
                for p in (bn.weight, bn.bias):
                    parts.append(p.grad.clone() if p.grad is not None else torch.zeros(channels))
            parts += [bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.to(torch.float32).view(1)]
        with open("%s.%s.%d.bin" % (out, name, rank), "wb") as f:
            f.write(torch.cat(parts).numpy().tobytes())
    dist.barrier()  # no teardown, as pytorch_ddp_peer.py: a gloo group's destruction aborts now and then
    os._exit(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--rank", type=int, default=-1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if not hasattr(torch._C, "_get_privateuse1_backend_name"):  # 1.13: its check is input.is_cuda
        print("PyTorch %s's SyncBatchNorm checks input.is_cuda: it cannot run on the CPU" % torch.__version__)
        sys.exit(3)
    if args.rank >= 0:
        return rank_main(args.out)
    run_ranks(__file__, 2, ["--out", args.out], 120)


if __name__ == "__main__":
    main()
