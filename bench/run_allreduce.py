#!/usr/bin/env python3
"""Side-by-side float32 all_reduce benchmark: ddp (gloo backend) against PyTorch's own
torch.distributed gloo, at several world sizes, in one run. Prints a markdown table in the style
of nccl-tests (time, algbw, busbw) for docs/BENCHMARKS.md.

    /usr/bin/python3 bench/run_allreduce.py --build build [--worlds 2 4] [--max-bytes 268435456]

busbw = algbw * 2(n-1)/n, the bandwidth each rank's link must sustain for a ring all_reduce.
"""
import argparse
import os
import statistics
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_PYTHON = "/usr/bin/python3"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks_output(command, world, extra_env=None, timeout=1800):
    """Runs `command` as `world` ranks on this machine; returns rank 0's standard output."""
    port = str(free_port())
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   OMP_NUM_THREADS="1", **(extra_env or {}))
        procs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
                                      text=True))
    out, _ = procs[0].communicate(timeout=timeout)
    for p in procs[1:]:
        p.wait(timeout=timeout)
    if any(p.returncode for p in procs):
        sys.exit("benchmark ranks failed: %s" % " ".join(command))
    return out


def run_ranks(command, world, extra_env, timeout):
    rows = {}
    for line in run_ranks_output(command, world, extra_env, timeout).splitlines():
        size, micros = line.split()
        rows[int(size)] = float(micros)
    return rows


def human(size):
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024:
            return "%d %s" % (size, unit)
        size //= 1024
    return "%d TB" % size


def busbw(size, micros, world):
    algbw = size / (micros * 1e-6) / 1e9
    return algbw * 2 * (world - 1) / world


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--min-bytes", type=int, default=4 << 10)
    parser.add_argument("--max-bytes", type=int, default=256 << 20)
    parser.add_argument("--repeats", type=int, default=5, help="timed batches per size in one run (median)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each peer, alternating (median)")
    parser.add_argument("--debug-check", action="store_true",
                        help="also time ddp with DDP_DEBUG=1 (the collective agreement check)")
    args = parser.parse_args()
    sizes = ["--min-bytes", str(args.min_bytes), "--max-bytes", str(args.max_bytes), "--repeats", str(args.repeats)]
    ddp_cmd = [os.path.join(args.build, "bench", "allreduce_bench")] + sizes
    torch_cmd = [TORCH_PYTHON, os.path.join(HERE, "torch_allreduce.py")] + sizes
    for world in args.worlds:
        peers = [("ddp", ddp_cmd, {})]
        if args.debug_check:
            peers.append(("ddp DDP_DEBUG=1", ddp_cmd, {"DDP_DEBUG": "1"}))
        peers.append(("PyTorch", torch_cmd, {}))
        # Rounds alternate the peers, so that the machine's drift hits them alike; medians per size.
        samples = {name: {} for name, _, _ in peers}
        for _ in range(args.rounds):
            for name, cmd, env in peers:
                for size, micros in run_ranks(cmd, world, env, 1800).items():
                    samples[name].setdefault(size, []).append(micros)
        results = {name: {size: statistics.median(v) for size, v in by_size.items()} for name, by_size in samples.items()}
        names = list(results)
        print("\n### all_reduce float32, world size %d (median of %d rounds)\n" % (world, args.rounds))
        header = "| size | " + " | ".join("%s time (us) | %s busbw (GB/s)" % (n, n) for n in names)
        header += " | ddp / PyTorch time |"
        print(header)
        print("|" + "---|" * (1 + 2 * len(names) + 1))
        for size in sorted(results["ddp"]):
            cells = []
            for n in names:
                micros = results[n].get(size)
                cells.append("%.1f | %.3f" % (micros, busbw(size, micros, world)) if micros else "- | -")
            ratio = results["ddp"][size] / results["PyTorch"][size] if size in results["PyTorch"] else float("nan")
            print("| %s | %s | %.2f |" % (human(size), " | ".join(cells), ratio))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
