#!/usr/bin/env python3
"""PyTorch's own powerSGD_hook (gloo) on fixed buckets, for ddp's PowerSGD parity test
(tests/torch/ddp/powersgd_pytorch_test.cpp runs the same configurations through ddp's hook).

    /usr/bin/python3 powersgd_peer.py --out FILE

Starts 2 ranks on this machine. For each configuration of CONFIGS, each rank builds a fresh
PowerSGDState and, for each step, hands the hook two buckets (duck-typed GradBuckets) whose
gradients are values(numel, rank, step, bucket, config) (below), bucket 0 first, bucket 1 last.
Rank 0 writes, as raw float32, every bucket's result in that order and after each configuration
its state's iter, total_numel_before_compression and total_numel_after_compression.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState, powerSGD_hook

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from peer_ranks import run_ranks  # noqa: E402

# The buckets' parameter shapes: matrices to compress (two of one shape), a bias (1-D), a matrix
# below min_compression_rate, a 4-D (convolution) weight.
BUCKETS = [[(16, 12), (16,), (3, 4), (16, 12), (8, 2, 3, 3)], [(10, 20), (10,)]]

# (steps, PowerSGDState keyword arguments); the C++ test has the same table.
CONFIGS = [
    (5, dict(matrix_approximation_rank=1, start_powerSGD_iter=2, min_compression_rate=2, use_error_feedback=True,
             warm_start=True, orthogonalization_epsilon=0, random_seed=0, batch_tensors_with_same_shape=False)),
    (4, dict(matrix_approximation_rank=3, start_powerSGD_iter=2, min_compression_rate=1, use_error_feedback=True,
             warm_start=False, orthogonalization_epsilon=1e-8, random_seed=12345, batch_tensors_with_same_shape=True)),
    (3, dict(matrix_approximation_rank=2, start_powerSGD_iter=0, min_compression_rate=1.5, use_error_feedback=False,
             warm_start=False, orthogonalization_epsilon=0, random_seed=7, batch_tensors_with_same_shape=False)),
    (4, dict(matrix_approximation_rank=2, start_powerSGD_iter=2, min_compression_rate=1, use_error_feedback=True,
             warm_start=True, orthogonalization_epsilon=0, random_seed=99, batch_tensors_with_same_shape=True)),
]


def values(numel, rank, step, bucket, config):
    """A bucket's gradients: smooth, different per rank, step, bucket and configuration."""
    k = torch.arange(numel, dtype=torch.float64)
    c = 1.3 * rank + 0.71 * step + 2.1 * bucket + 0.5 * config
    return (torch.sin(k * 0.37 + c) * (1 + 0.5 * torch.cos(k * 0.11 - c))).float()


class Bucket:
    def __init__(self, index, shapes, buffer):
        self._index, self._shapes, self._buffer = index, shapes, buffer

    def buffer(self):
        return self._buffer

    def gradients(self):
        views, at = [], 0
        for shape in self._shapes:
            n = 1
            for d in shape:
                n *= d
            views.append(self._buffer[at:at + n].view(shape))
            at += n
        return views

    def index(self):
        return self._index

    def is_last(self):
        return self._index == len(BUCKETS) - 1

    def parameters(self):
        return [torch.empty(shape) for shape in self._shapes]


def numel(shapes):
    total = 0
    for shape in shapes:
        n = 1
        for d in shape:
            n *= d
        total += n
    return total


def rank_main(out):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    results = []
    for c, (steps, kwargs) in enumerate(CONFIGS):
        state = PowerSGDState(process_group=None, **kwargs)
        for step in range(steps):
            for b, shapes in enumerate(BUCKETS):
                bucket = Bucket(b, shapes, values(numel(shapes), rank, step, b, c))
                # One bucket at a time: the hook's chained all-reduces then run in the same order on
                # every rank (the results do not depend on it).
                results.append(powerSGD_hook(state, bucket).wait().clone())
        results.append(torch.tensor([state.iter, state.total_numel_before_compression,
                                     state.total_numel_after_compression], dtype=torch.float32))
    if rank == 0:
        with open(out, "wb") as f:
            f.write(torch.cat(results).numpy().tobytes())
    # No teardown: PyTorch 1.13's gloo group, after the hook's chained future callbacks, aborts
    # now and then as it is destroyed ("terminate called without an active exception", in 1 run
    # of 4 to 6 here). Every collective has completed on every rank once the barrier returns.
    dist.barrier()
    os._exit(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--rank", type=int, default=-1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.rank >= 0:
        return rank_main(args.out)
    run_ranks(__file__, 2, ["--out", args.out], 120)

if __name__ == "__main__":
    main()
