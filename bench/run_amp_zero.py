#!/usr/bin/env python3
"""Mixed precision and ZeRO measurements (issue 16), printed as markdown for docs/BENCHMARKS.md:

1. The Fashion-MNIST example's CPU training step (batch 64 per rank, one intra-op thread per
   rank) in float32 and with bfloat16 autocast (the example's --amp), at several world sizes;
   amp_step_bench alternates the two within each run, and each cell is the median over the runs.
2. Adam's optimizer state per rank with ZeroRedundancyOptimizer, for an MLP of 8 1024x1024 layers
   (8.4M parameters), at several world sizes (1 = unsharded Adam).

    /usr/bin/python3 bench/run_amp_zero.py --build build [--worlds 1 2] [--runs 3] [--zero-worlds 1 2 3 4]

(an empty --worlds or --zero-worlds skips that part)
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
    parser.add_argument("--worlds", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--zero-worlds", type=int, nargs="*", default=[1, 2, 3, 4])
    args = parser.parse_args()
    amp_bin = os.path.join(args.build, "bench", "amp_step_bench")
    zero_bin = os.path.join(args.build, "bench", "zero_memory_bench")

    if args.worlds:
        print("\n### The example's CPU step, float32 and bfloat16 autocast (median ms)\n")
        print("| world size | float32 | bfloat16 autocast (--amp) | bf16 / fp32 |")
        print("|---|---|---|---|")
    for world in args.worlds:
        fp32, bf16 = [], []
        for _ in range(args.runs):
            a, b = map(float, run_ranks_output([amp_bin, "--steps", str(args.steps), "--rounds", str(args.rounds)],
                                               world).split())
            fp32.append(a)
            bf16.append(b)
        a, b = statistics.median(fp32), statistics.median(bf16)
        print("| %d | %.2f | %.2f | %.2f |" % (world, a, b, b / a))
        sys.stdout.flush()

    if args.zero_worlds:
        print("\n### Adam's state per rank with ZeroRedundancyOptimizer (MLP, 8 x 1024x1024, 8.4M parameters)\n")
        print("| world size | rank | parameters owned | elements owned | state (MB, tensors) | heap growth in the first step (MB) | share of unsharded |")
        print("|---|---|---|---|---|---|---|")
    unsharded = None
    for world in args.zero_worlds:
        for line in run_ranks_output([zero_bin], world).splitlines():
            rank, owned, elements, state, heap = line.split()
            if world == 1:
                unsharded = float(state)
            share = "%.0f%%" % (100 * float(state) / unsharded) if unsharded else "-"
            print("| %d | %s | %s | %s | %s | %s | %s |" % (world, rank, owned, elements, state, heap, share))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
