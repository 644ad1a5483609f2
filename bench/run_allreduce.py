#!/usr/bin/env python3
"""Side-by-side float32 all_reduce benchmark: ddp through shared memory (the default on one host), ddp
over plain gloo (DDP_SHM=0), PyTorch's own torch.distributed gloo, and MPI_Allreduce of Open MPI and
MPICH (mpi_allreduce_bench.c, compiled here with each one's mpicc; shared memory between the ranks
of one host, as ddp's), at several world sizes, in one run, with this machine's single-core memcpy
bandwidth as a yardstick. Prints markdown tables in the style of nccl-tests (time, algbw, busbw) for
docs/BENCHMARKS.md.

    /usr/bin/python3 bench/run_allreduce.py --build build [--worlds 2 4] [--max-bytes 268435456] [--rounds 2]
                                             [--baseline OTHER_BUILD] [--shared-buffers]

--no-mpi leaves the MPI columns out (they are also left out, with a note, when an MPI's mpicc is not
installed: Debian's libopenmpi-dev + openmpi-bin, libmpich-dev + mpich).

--baseline adds the same ddp columns from another build (an earlier commit's), alternated in the
same rounds: a before/after comparison that drift cannot skew.

--shared-buffers adds ddp with its buffers in the group's shared memory (allocate_shared_memory,
which the peers read where it is), and its ratios to ddp's ordinary buffers and to the best MPI.

busbw = algbw * 2(n-1)/n, the bandwidth each rank's link must sustain for a ring all_reduce.
With --rounds R every configuration runs R times and each cell is the median.
"""
import argparse
import os
import shutil
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


def run_ranks_output(command, world, extra_env=None, timeout=1800, placement=None):
    """Runs `command` as `world` ranks on this machine; returns rank 0's standard output. A
    `placement` (run_nodes.py's emulated nodes) says where each rank runs: its master_addr, and
    for each rank the argv prefix that enters its node and the node's environment."""
    port = str(free_port())
    master = placement.master_addr if placement else "127.0.0.1"
    procs = []
    for rank in range(world):
        prefix, node_env = placement.rank(rank, world) if placement else ([], {})
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR=master, MASTER_PORT=port, OMP_NUM_THREADS="1")
        env.update(node_env)  # LOCAL_RANK, LOCAL_WORLD_SIZE, the node's host identity
        env.update(extra_env or {})
        procs.append(subprocess.Popen(prefix + command, env=env,
                                      stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL, text=True))
    try:
        out, _ = procs[0].communicate(timeout=timeout)
        for p in procs[1:]:
            p.wait(timeout=timeout)
    finally:
        for p in procs:  # a failed or interrupted run leaves no rank behind
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(p.returncode for p in procs):
        sys.exit("benchmark ranks failed: %s" % " ".join(command))
    return out


def parse_rows(text):
    rows = {}
    for line in text.splitlines():
        size, micros = line.split()
        rows[int(size)] = float(micros)
    return rows


def run_ranks(command, world, extra_env, timeout, placement=None):
    return parse_rows(run_ranks_output(command, world, extra_env, timeout, placement))


# name, mpicc, mpirun and its arguments: every rank on this host, unbound (ddp's ranks are not pinned
# either), over each MPI's shared-memory transport.
MPIS = [
    ("Open MPI", "mpicc.openmpi",
     ["mpirun.openmpi", "--bind-to", "none", "--oversubscribe", "--mca", "btl", "self,vader"]),
    ("MPICH", "mpicc.mpich", ["mpiexec.mpich"]),
]
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMPI_MCA_plm": "isolated"}


def build_mpi_peers(out_dir):
    """Compiles mpi_allreduce_bench.c with every installed MPI; returns [(name, binary, mpirun)]."""
    peers = []
    for name, mpicc, mpirun in MPIS:
        if not shutil.which(mpicc) or not shutil.which(mpirun[0]):
            print("(%s left out: %s or %s is not installed)" % (name, mpicc, mpirun[0]))
            continue
        binary = os.path.join(out_dir, "mpi_allreduce_bench_" + name.lower().replace(" ", ""))
        subprocess.run([mpicc, "-O2", "-o", binary, os.path.join(HERE, "mpi_allreduce_bench.c")], check=True)
        peers.append((name, binary, mpirun))
    return peers


def run_mpi(mpirun, command, world, timeout):
    out = subprocess.run(mpirun + ["-n", str(world)] + command, capture_output=True, text=True, timeout=timeout,
                         env=dict(os.environ, OMP_NUM_THREADS="1", **MPI_ENV))
    if out.returncode:
        sys.exit("MPI benchmark failed: %s\n%s" % (" ".join(mpirun + command), out.stderr[-2000:]))
    return parse_rows(out.stdout)


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


def ratio(peer_us, ddp_us):
    """ddp's busbw over a peer's at one size (the peer's time over ddp's); nan when the peer has no time."""
    return peer_us / ddp_us if peer_us and peer_us != float("inf") else float("nan")


SHARED = "ddp shm, shared buffer"


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
    parser.add_argument("--no-mpi", action="store_true", help="leave out the Open MPI and MPICH columns")
    parser.add_argument("--baseline", help="another build dir whose ddp runs beside this one (before/after)")
    parser.add_argument("--shared-buffers", action="store_true",
                        help="also time ddp with its buffers in shared memory (allocate_shared_memory)")
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
    if args.shared_buffers:
        configs.insert(1, (SHARED, ddp_cmd + ["--shared"], {}))
    if args.debug_check:
        configs.append(("ddp shm DDP_DEBUG=1", ddp_cmd, {"DDP_DEBUG": "1"}))
    if args.baseline:
        base_cmd = [os.path.join(args.baseline, "bench", "allreduce_bench")] + sizes
        configs += [("baseline shm", base_cmd, {}), ("baseline gloo", base_cmd, {"DDP_SHM": "0"})]
    configs.append(("PyTorch gloo", torch_cmd, {}))
    # A configuration runs its command as `world` ranks: ddp's and PyTorch's through the launch
    # environment, the MPIs through their own mpirun.
    runners = {name: (lambda world, cmd=cmd, env=env: run_ranks(cmd, world, env, 1800)) for name, cmd, env in configs}
    if not args.no_mpi:
        for name, mpi_binary, mpirun in build_mpi_peers(os.path.join(args.build, "bench")):
            runners[name] = lambda world, b=mpi_binary, m=mpirun: run_mpi(m, [b] + sizes, world, 1800)
    for world in args.worlds:
        runs = {name: [] for name in runners}
        for _ in range(args.rounds):  # alternate the configurations so that drift affects them alike
            for name, run in runners.items():
                runs[name].append(run(world))
        results = {name: median_rows(r) for name, r in runs.items()}
        names = list(results)
        print("\n### all_reduce float32, world size %d\n" % world)
        header = "| size | " + " | ".join("%s time (us) | %s busbw (GB/s)" % (n, n) for n in names)
        mpis = [n for n in names if n in dict((m[0], m) for m in MPIS)]
        header += " | shm / PyTorch busbw |" + ("" if not mpis else " shm / best MPI busbw |") + " shm busbw / memcpy |"
        shared = SHARED in results
        if shared:
            header += " shared / shm busbw |" + ("" if not mpis else " shared / best MPI busbw |")
        print(header)
        print("|" + "---|" * (1 + 2 * len(names) + 2 + (1 if mpis else 0) + (0 if not shared else 1 + bool(mpis))))
        for size in sorted(results["ddp shm"]):
            cells = []
            for n in names:
                micros = results[n].get(size)
                cells.append("%.1f | %.3f" % (micros, busbw(size, micros, world)) if micros else "- | -")
            shm_us = results["ddp shm"][size]
            ratios = ["%.1fx" % ratio(results["PyTorch gloo"].get(size), shm_us)]
            if mpis:  # the faster MPI at this size; > 1 means ddp is faster
                ratios.append("%.2fx" % ratio(min((results[n].get(size) or float("inf")) for n in mpis), shm_us))
            row = "| %s | %s | %s | %.0f%% |" % (human(size), " | ".join(cells), " | ".join(ratios),
                                                100 * busbw(size, shm_us, world) / yardstick)
            if shared:
                shared_us = results[SHARED].get(size)
                row += " %.2fx |" % ratio(shm_us, shared_us)
                if mpis:
                    row += " %.2fx |" % ratio(min((results[n].get(size) or float("inf")) for n in mpis), shared_us)
            print(row)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
