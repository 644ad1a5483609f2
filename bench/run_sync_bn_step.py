#!/usr/bin/env python3
"""SyncBatchNorm's cost: one DDP training step of the training example's network
(examples/fashion_mnist/net.h: two convolutions with batch norm, two linear layers), batch 64 per
rank, one intra-op thread per rank, with torch::nn::BatchNorm2d and with ddp::SyncBatchNorm,
alternated in each round; the table gives medians. PyTorch has no CPU SyncBatchNorm to compare
with (its SyncBatchNorm runs on GPUs only).

    /usr/bin/python3 bench/run_sync_bn_step.py --build build [--worlds 2] [--rounds 5] [--steps 30]

Prints a markdown table for docs/BENCHMARKS.md.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_allreduce import run_ranks_output  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--worlds", type=int, nargs="+", default=[2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    command = [os.path.join(args.build, "bench", "ddp_step_bench"), "--model", "fashion", "--steps", str(args.steps),
               "--batch", str(args.batch)]
    print("| world size | BatchNorm2d (ms) | SyncBatchNorm (ms) | SyncBatchNorm / BatchNorm2d | rounds |")
    print("|---|---|---|---|---|")
    for world in args.worlds:
        plain, synced = [], []
        for _ in range(args.rounds):  # alternated, so that the machine's drift affects both alike
            plain.append(float(run_ranks_output(command, world)))
            synced.append(float(run_ranks_output(command + ["--sync-bn"], world)))
        a, b = statistics.median(plain), statistics.median(synced)
        print("| %d | %.2f | %.2f | %.3f | %d |" % (world, a, b, b / a, args.rounds))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
