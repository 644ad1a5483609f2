#!/usr/bin/env python3
"""The flight recorder's cost on the DDP step benchmark (bench/ddp_step_bench.cpp, the program
bench/run_ddp_step.py runs): ddp with the recorder on (the default) and off
(DDP_FLIGHT_RECORDER=0), alternated within each round (and which goes first alternates too), so
that the machine's drift affects both alike. Prints a markdown table for docs/BENCHMARKS.md.

    /usr/bin/python3 bench/run_flight_cost.py --build build [--worlds 2] [--models mlp] [--rounds 9]

It also times the smallest collective, where the recorder's cost per operation shows most: a
4 KB all_reduce on shared memory (bench/allreduce_bench.cpp), on and off in the same way, and
the recorder alone (bench/flight_record_bench.cpp: nanoseconds per recorded operation).
"""
import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_allreduce import run_ranks_output  # noqa: E402


def on_and_off(command, world, rounds, parse):
    """Medians of `command` with the recorder on and off, alternated (and which goes first too),
    and in how many rounds on was faster."""
    times = {"on": [], "off": []}
    for r in range(rounds):
        order = [("on", {}), ("off", {"DDP_FLIGHT_RECORDER": "0"})]
        for name, env in order if r % 2 == 0 else order[::-1]:
            times[name].append(parse(run_ranks_output(command, world, env)))
    faster = sum(1 for a, b in zip(times["on"], times["off"]) if a < b)
    return statistics.median(times["on"]), statistics.median(times["off"]), faster


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--worlds", type=int, nargs="+", default=[2])
    parser.add_argument("--models", nargs="*", default=["mlp"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    ddp_bin = os.path.join(args.build, "bench", "ddp_step_bench")
    for model in args.models:
        common = [ddp_bin, "--model", model, "--steps", str(args.steps)]
        print("\n### DDP step, %s, flight recorder on and off (median ms of %d rounds)\n" % (model, args.rounds))
        print("| world size | recorder on (default) | DDP_FLIGHT_RECORDER=0 | on / off | rounds in which on was faster |")
        print("|---|---|---|---|---|")
        for world in args.worlds:
            on, off, faster = on_and_off(common, world, args.rounds, float)
            print("| %d | %.2f | %.2f | %.3f | %d of %d |" % (world, on, off, on / off, faster, args.rounds))
            sys.stdout.flush()
    alone = [subprocess.run([os.path.join(args.build, "bench", "flight_record_bench")], capture_output=True, text=True,
                            check=True).stdout.split() for _ in range(args.rounds)]
    print("\nThe recorder alone (issued + started + ended, one thread): %.1f ns per operation on, %.1f ns off "
          "(medians of %d runs)" % (statistics.median(float(a[1]) for a in alone),
                                    statistics.median(float(a[3]) for a in alone), args.rounds))
    small = [os.path.join(args.build, "bench", "allreduce_bench"), "--min-bytes", "4096", "--max-bytes", "4096",
             "--repeats", "9"]
    print("\n### 4 KB all_reduce (shared memory), flight recorder on and off (median us of %d rounds)\n" % args.rounds)
    print("| world size | recorder on (default) | DDP_FLIGHT_RECORDER=0 | on - off (us) | rounds in which on was faster |")
    print("|---|---|---|---|---|")
    for world in args.worlds:
        on, off, faster = on_and_off(small, world, args.rounds, lambda out: float(out.split()[1]))
        print("| %d | %.2f | %.2f | %+.2f | %d of %d |" % (world, on, off, on - off, faster, args.rounds))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
