#!/usr/bin/env python3
"""Side-by-side DDP training-step benchmark: ddp (C++; shared memory on one host, and plain gloo
with DDP_SHM=0) against PyTorch's Python DDP (gloo), for
an MLP (784-1024-1024-10, 1.86M parameters) and PyTorch's MNIST CNN (1.2M parameters), batch 64
per rank, one intra-op thread per rank, at several world sizes; plus, at world size 1, each
framework's step without DDP (DDP's own overhead). With --limit, two more columns at each world
size: ddp with gradient_as_bucket_view, and the limit: the same loop on every rank at once without
DDP (no gradient communication, only the per-step barrier), which is what DDP's step could reach
if communication cost nothing. --view-only and --default-path give the limit twice: timed on each
rank alone, and in lockstep (timed until every rank has finished the step, as DDP's all-reduce
waits for the slowest rank). Prints markdown tables for docs/BENCHMARKS.md.

    /usr/bin/python3 bench/run_ddp_step.py --build build [--worlds 1 2 4] [--rounds 3] [--limit]
        [--baseline OTHER_BUILD] [--view-only | --default-path]

Each configuration runs `rounds` times, alternating ddp and PyTorch; the table gives the median.
--baseline adds the same ddp columns from another build (an earlier commit's), alternated in the
same rounds: a before/after comparison that drift cannot skew (with --limit, its bucket view too).
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_allreduce import run_ranks_output  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


LIMITS = (("limit: no DDP", ["--no-ddp"]), ("limit in lockstep", ["--no-ddp", "--lockstep"]))


def against_limit(args, title, columns):
    """`columns` ((name, binary, extra flags)) and the two limits, alternated, one row per world
    size: the loop without DDP timed on each rank alone, and timed until every rank has finished
    it (--lockstep: what any synchronous data parallelism waits for, the slowest rank)."""
    for model in args.models:
        common = ["--model", model, "--steps", str(args.steps)]
        print("\n### %s against the limit, %s, batch 64 per rank (median ms of %d)\n" % (title, model, args.rounds))
        names = [n for n, _, _ in columns] + [n for n, _ in LIMITS]
        ratios = ["%s / %s" % (n, limit.split(":")[0]) for n, _, _ in columns for limit, _ in LIMITS]
        print("| world size | " + " | ".join(names + ratios) + " |")
        print("|---|" + "---|" * (len(names) + len(ratios)))
        for world in args.worlds:
            runs = {n: [] for n in names}
            for _ in range(args.rounds):
                for name, binary, flags in columns:
                    runs[name].append(float(run_ranks_output([binary] + common + flags, world)))
                for name, flags in LIMITS:
                    runs[name].append(float(run_ranks_output([columns[0][1]] + common + flags, world)))
            med = {n: statistics.median(v) for n, v in runs.items()}
            # Each ratio is the median of the rounds' own ratios: a round's columns run within
            # seconds of each other, while this VM's speed drifts by 30% over minutes.
            ratio = [statistics.median(a / b for a, b in zip(runs[n], runs[limit]))
                     for n, _, _ in columns for limit, _ in LIMITS]
            print("| %d | %s | %s |" % (world, " | ".join("%.2f" % med[n] for n in names),
                                        " | ".join("%.3f" % r for r in ratio)))
            sys.stdout.flush()


def view_only(args):
    """ddp's bucket view, the baseline's and the limit."""
    columns = [("ddp, bucket view", os.path.join(args.build, "bench", "ddp_step_bench"), ["--bucket-view"])]
    if args.baseline:
        columns.append(("baseline, bucket view", os.path.join(args.baseline, "bench", "ddp_step_bench"), ["--bucket-view"]))
    against_limit(args, "DDP step with gradient_as_bucket_view", columns)


def default_path(args):
    """ddp's default options, the baseline's, ddp's bucket view and the limit."""
    ours = os.path.join(args.build, "bench", "ddp_step_bench")
    columns = [("ddp, default", ours, [])]
    if args.baseline:
        columns.append(("baseline, default", os.path.join(args.baseline, "bench", "ddp_step_bench"), []))
    columns.append(("ddp, bucket view", ours, ["--bucket-view"]))
    against_limit(args, "The default DDP step", columns)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--worlds", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--baseline", help="another build dir whose ddp runs beside this one (before/after)")
    parser.add_argument("--limit", action="store_true",
                        help="add ddp with gradient_as_bucket_view and the no-communication loop (the limit)")
    parser.add_argument("--default-path", action="store_true",
                        help="only ddp's default step (and --baseline's) beside its bucket view and the limit")
    parser.add_argument("--view-only", action="store_true",
                        help="only ddp with gradient_as_bucket_view (and --baseline's) against the limit, "
                        "alternated: fewer configurations per round, so less drift between them")
    args = parser.parse_args()
    if args.view_only:
        return view_only(args)
    if args.default_path:
        return default_path(args)
    ddp_bin = os.path.join(args.build, "bench", "ddp_step_bench")
    base_bin = os.path.join(args.baseline, "bench", "ddp_step_bench") if args.baseline else None
    torch_py = ["/usr/bin/python3", os.path.join(HERE, "torch_ddp_step.py")]
    for model in args.models:
        common = ["--model", model, "--steps", str(args.steps)]
        print("\n### DDP step, %s, batch 64 per rank (median ms)\n" % model)
        base_head = " baseline | baseline DDP_SHM=0 | baseline / this |" if base_bin else ""
        limit_head = (" ddp, bucket view | limit: no DDP, every rank at once | ddp / limit | bucket view / limit "
                      "| limit / PyTorch DDP |") if args.limit else ""
        base_view = base_bin and args.limit  # the baseline's bucket view too
        limit_head += " baseline bucket view | baseline bucket view / this |" if base_view else ""
        print("| world size | ddp (C++) | ddp, DDP_SHM=0 | PyTorch DDP | ddp / PyTorch | ddp DDP_SHM=0 / PyTorch |"
              + base_head + limit_head)
        print("|---|---|---|---|---|---|" + ("---|---|---|" if base_bin else "") + ("---|---|---|---|---|" if args.limit else "")
              + ("---|---|" if base_view else ""))
        for world in args.worlds:
            ours, gloo, theirs, base, base_gloo, view, limit, bview = [], [], [], [], [], [], [], []
            for _ in range(args.rounds):  # alternated, so that drift affects every column alike
                ours.append(float(run_ranks_output([ddp_bin] + common, world)))
                gloo.append(float(run_ranks_output([ddp_bin] + common, world, {"DDP_SHM": "0"})))
                theirs.append(float(run_ranks_output(torch_py + common, world)))
                if base_bin:
                    base.append(float(run_ranks_output([base_bin] + common, world)))
                    base_gloo.append(float(run_ranks_output([base_bin] + common, world, {"DDP_SHM": "0"})))
                if args.limit:
                    view.append(float(run_ranks_output([ddp_bin] + common + ["--bucket-view"], world)))
                    limit.append(float(run_ranks_output([ddp_bin] + common + ["--no-ddp"], world)))
                if base_view:
                    bview.append(float(run_ranks_output([base_bin] + common + ["--bucket-view"], world)))
            a, g, b = statistics.median(ours), statistics.median(gloo), statistics.median(theirs)
            row = "| %d | %.2f | %.2f | %.2f | %.2f | %.2f |" % (world, a, g, b, a / b, g / b)
            if base_bin:
                c, cg = statistics.median(base), statistics.median(base_gloo)
                row += " %.2f | %.2f | %.2f |" % (c, cg, c / a)
            if args.limit:
                v, lim = statistics.median(view), statistics.median(limit)
                row += " %.2f | %.2f | %.2f | %.2f | %.2f |" % (v, lim, a / lim, v / lim, lim / b)
            if base_view:
                bv = statistics.median(bview)
                row += " %.2f | %.2f |" % (bv, bv / v)
            print(row)
            sys.stdout.flush()
        if 1 in args.worlds:
            print("\n#### Overhead of DDP at world size 1, %s (median ms)\n" % model)
            print("| framework | without DDP | with DDP | overhead |")
            print("|---|---|---|---|")
            for name, cmd in (("ddp (C++)", [ddp_bin] + common), ("PyTorch", torch_py + common)):
                plain, wrapped = [], []
                for _ in range(args.rounds):
                    plain.append(float(run_ranks_output(cmd + ["--no-ddp"], 1)))
                    wrapped.append(float(run_ranks_output(cmd, 1)))
                a, b = statistics.median(plain), statistics.median(wrapped)
                print("| %s | %.2f | %.2f | %+.1f%% |" % (name, a, b, (b / a - 1) * 100))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
