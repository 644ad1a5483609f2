#!/usr/bin/env python3
"""Before/after on this noisy machine: an earlier build (before), the same build again (its
run-to-run noise) and this build (after), alternated in every round, for the shared-memory
all_reduce and the DDP step. A change is a regression only where after/before leaves the band
that before-again/before shows. Prints markdown tables for docs/BENCHMARKS.md.

    /usr/bin/python3 bench/run_before_after.py --build build --baseline OTHER_BUILD [--rounds 9]
        [--worlds 2 4] [--max-bytes 16777216] [--step-worlds 2 4] [--models mlp cnn] [--step-rounds 5]
"""
import argparse
import collections
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_allreduce import human, run_ranks, run_ranks_output  # noqa: E402

COLUMNS = ("before", "before, again", "after")


def alternate(commands, rounds, measure):
    """{column: [results]} with the columns' commands run in turn, `rounds` times."""
    results = collections.defaultdict(list)
    for _ in range(rounds):
        for column, command in zip(COLUMNS, commands):
            results[column].append(measure(command))
    return results


def row(label, medians):
    before, again, after = (medians[c] for c in COLUMNS)
    return "| %s | %.1f | %.1f | %.1f | %.2f | %.2f |" % (label, before, again, after, again / before, after / before)


def header(first):
    return ("| %s | before | before, again | after | again / before (noise) | after / before |\n"
            "|---|---|---|---|---|---|" % first)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--baseline", required=True, help="the earlier build dir")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--max-bytes", type=int, default=16 << 20)
    parser.add_argument("--step-worlds", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    parser.add_argument("--step-rounds", type=int, default=5)
    args = parser.parse_args()
    builds = (args.baseline, args.baseline, args.build)

    sizes = ["--min-bytes", "4096", "--max-bytes", str(args.max_bytes), "--repeats", "5"]
    for world in args.worlds:
        commands = [[os.path.join(b, "bench", "allreduce_bench")] + sizes for b in builds]
        runs = alternate(commands, args.rounds, lambda cmd: run_ranks(cmd, world, {}, 1800))
        print("\n#### Shared-memory all_reduce, float32, world size %d (median us over %d rounds)\n" % (world, args.rounds))
        print(header("size"))
        for size in sorted(runs["before"][0]):
            print(row(human(size), {c: statistics.median(r[size] for r in runs[c]) for c in COLUMNS}))
        sys.stdout.flush()

    if args.models and args.step_worlds:
        print("\n#### DDP step, batch 64 per rank (median ms over %d rounds)\n" % args.step_rounds)
        print(header("model, world size"))
        for model in args.models:
            for world in args.step_worlds:
                commands = [[os.path.join(b, "bench", "ddp_step_bench"), "--model", model, "--steps", "30"] for b in builds]
                runs = alternate(commands, args.step_rounds, lambda cmd: float(run_ranks_output(cmd, world)))
                print(row("%s, %d" % (model, world), {c: statistics.median(runs[c]) for c in COLUMNS}))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
