#!/usr/bin/env python3
"""Side-by-side float32 all_reduce benchmark: ddp through shared memory (the default on one host),
ddp over plain gloo (DDP_SHM=0) and PyTorch's own torch.distributed gloo, at several world sizes,
in one run, with this machine's single-core memcpy bandwidth as a yardstick. Prints markdown
tables in the style of nccl-tests (time, algbw, busbw) for docs/BENCHMARKS.md.

    /usr/bin/python3 bench/run_allreduce.py --build build [--worlds 2 4] [--max-bytes 268435456] [--rounds 2]
                                             [--baseline OTHER_BUILD]

--baseline adds the same ddp columns from another build (an earlier commit's), alternated in the
same rounds: a before/after comparison that drift cannot skew.

busbw = algbw * 2(n-1)/n, the bandwidth each rank's link must sustain for a ring all_reduce.
With --rounds R every configuration runs R times and each cell is the median.
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


def parse_rows(text):
    rows = {}
    for line in text.splitlines():
        size, micros = line.split()
        rows[int(size)] = float(micros)
    return rows


def run_ranks(command, world, extra_env, timeout):
    return parse_rows(run_ranks_output(command, world, extra_env, timeout))


def median_rows(runs):
    """Per size, the median over several runs' {size: micros}."""
    sizes = set().union(*runs)
    return {size: statistics.median(r[size] for r in runs if size in r) for size in sizes}


def memcpy_rows(binary, sizes, rounds):
    runs = []
    for _ in range(rounds):
        out = subprocess.run([binary, "--memcpy"] + sizes, capture_output=True, text=True, check=True,
                             env=dict(os.environ, OMP_NUM_THREADS="1")).stdout
        runs.append(parse_rows(out))
    return median_rows(runs)


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
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=1, help="runs per configuration; cells are medians")
    parser.add_argument("--debug-check", action="store_true",
                        help="also time ddp with DDP_DEBUG=1 (the collective agreement check)")
    parser.add_argument("--baseline", help="another build dir whose ddp runs beside this one (before/after)")
    args = parser.parse_args()
    sizes = ["--min-bytes", str(args.min_bytes), "--max-bytes", str(args.max_bytes), "--repeats", str(args.repeats)]
    binary = os.path.join(args.build, "bench", "allreduce_bench")
    ddp_cmd = [binary] + sizes
    torch_cmd = [TORCH_PYTHON, os.path.join(HERE, "torch_allreduce.py")] + sizes

    memcpy = memcpy_rows(binary, sizes, args.rounds)
    largest = max(memcpy)
    yardstick = largest / (memcpy[largest] * 1e-6) / 1e9
    print("\n### Single-core memcpy bandwidth\n")
    print("| size | time (us) | GB/s |")
    print("|---|---|---|")
    for size in sorted(memcpy):
        print("| %s | %.2f | %.2f |" % (human(size), memcpy[size], size / (memcpy[size] * 1e-6) / 1e9))
    print("\nYardstick: memcpy of %s, %.2f GB/s (one core, out of cache)." % (human(largest), yardstick))
    sys.stdout.flush()

    configs = [("ddp shm", ddp_cmd, {}), ("ddp gloo", ddp_cmd, {"DDP_SHM": "0"})]
    if args.debug_check:
        configs.append(("ddp shm DDP_DEBUG=1", ddp_cmd, {"DDP_DEBUG": "1"}))
    if args.baseline:
        base_cmd = [os.path.join(args.baseline, "bench", "allreduce_bench")] + sizes
        configs += [("baseline shm", base_cmd, {}), ("baseline gloo", base_cmd, {"DDP_SHM": "0"})]
    configs.append(("PyTorch gloo", torch_cmd, {}))
    for world in args.worlds:
        runs = {name: [] for name, _, _ in configs}
        for _ in range(args.rounds):  # alternate the configurations so that drift affects them alike
            for name, cmd, env in configs:
                runs[name].append(run_ranks(cmd, world, env, 1800))
        results = {name: median_rows(r) for name, r in runs.items()}
        names = list(results)
        print("\n### all_reduce float32, world size %d\n" % world)
        header = "| size | " + " | ".join("%s time (us) | %s busbw (GB/s)" % (n, n) for n in names)
        header += " | shm / PyTorch busbw | shm busbw / memcpy |"
        print(header)
        print("|" + "---|" * (1 + 2 * len(names) + 2))
        for size in sorted(results["ddp shm"]):
            cells = []
            for n in names:
                micros = results[n].get(size)
                cells.append("%.1f | %.3f" % (micros, busbw(size, micros, world)) if micros else "- | -")
            shm_bw = busbw(size, results["ddp shm"][size], world)
            torch_us = results["PyTorch gloo"].get(size)
            ratio = shm_bw / busbw(size, torch_us, world) if torch_us else float("nan")
            print("| %s | %s | %.1fx | %.0f%% |" % (human(size), " | ".join(cells), ratio, 100 * shm_bw / yardstick))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
