#!/usr/bin/env python3
"""The rendezvous store at scale: ddp's TCPStore server beside PyTorch 1.13's, N connections on
one server, driven by client processes (bench/store_bench.cpp). Each connection does what a rank
does at rendezvous (set its address, add to a counter, wait for the key the last arrival sets,
read 4 peers' keys); the time is from "go" to the last connection done. Also: the CPU time the
server and the client processes spent in it, the server's memory per connection (user: its RSS
with every connection open, less its RSS before; kernel: the growth of the TCPv6 slab, which holds
the server's side of each connection), and the latency of a get on one more connection (ddp's own
client), during the rendezvous and afterwards with every connection still open. Prints a markdown
table for docs/BENCHMARKS.md.

    /usr/bin/python3 bench/run_store.py --build build [--sizes 1024 4096 16384 65536] [--rounds 3]

Needs a hard open-file limit above the largest size (the server holds N sockets, each client
process N / procs): it raises its own limits as far as it may, and says which sizes it skips.
Clients bind distinct source addresses in 127.0.0.0/8, so that N connections to one port do not
run out of ephemeral ports. PyTorch's server is skipped at sizes past --torch-max (it slows down
with every connection: its daemon polls them all on every event) and reported as "died" or
"timed out" when it fails.
"""
import argparse
import os
import random
import resource
import select
import statistics
import subprocess
import sys
import time

TORCH_SERVER = r"""
import os, sys, datetime
import torch.distributed as dist
port = int(sys.argv[1])
store = dist.TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=600), wait_for_workers=False)
print("ready %d %d" % (port, os.getpid()), flush=True)
sys.stdin.read()
"""


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    """User plus system CPU time of a process so far (/proc/PID/stat, fields 14 and 15)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def slab_bytes(cache):
    """Bytes of the kernel's slab cache in use (/proc/slabinfo: active objects times their size),
    or None where slabinfo cannot be read (it needs root)."""
    try:
        with open("/proc/slabinfo") as f:
            for line in f:
                words = line.split()
                if words and words[0] == cache:
                    return int(words[1]) * int(words[3])
    except OSError:
        pass
    return None


def start_server(kind, bench):
    for attempt in range(20):
        if kind.startswith("ddp"):
            command = [bench, "serve", "--port", "0"]
        else:  # a port below the ephemeral range, which tens of thousands of client sockets crowd
            command = ["/usr/bin/python3", "-c", TORCH_SERVER, str(random.randrange(20000, 32000))]
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)
        words = proc.stdout.readline().split()
        if words and words[0] == "ready":
            return proc, int(words[1]), int(words[2])
        proc.wait()
    raise RuntimeError("the %s server did not start" % kind)


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100.0 * len(values)))]


def one_run(kind, size, procs, bench, timeout):
    """One rendezvous of `size` connections: seconds, KiB per connection, get latencies (us)."""
    server, port, pid = start_server(kind, bench)
    time.sleep(0.2)
    before = rss_kib(pid)
    # The server's accepted sockets are IPv6 ones (ddp listens dual-stack) and
    # every client socket is IPv4, so the TCPv6 slab grows by the server's side alone (a server that
    # listens on IPv4 shows about 0 here).
    slab_before = slab_bytes("TCPv6")
    protocol = kind  # the clients': ddp, ddp-multi (the wait and 4 gets as one multi_get) or torch
    probe = subprocess.Popen([bench, "probe", "--port", str(port), "--protocol", "torch" if kind == "torch" else "ddp"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    per = size // procs
    clients = []
    for p in range(procs):
        source = "127.0.%d.%d" % (1 + p // 250, 1 + p % 250)
        clients.append(subprocess.Popen(
            [bench, "clients", "--port", str(port), "--protocol", protocol, "--first", str(p * per), "--count",
             str(per if p < procs - 1 else size - p * per), "--total", str(size), "--source", source],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    time.sleep(0.5 + size / 20000.0)  # let every client process start before "go"
    cpu_before = cpu_seconds(pid)
    clients_before = sum(cpu_seconds(c.pid) for c in clients)
    start = time.monotonic_ns()
    for c in clients:
        c.stdin.write("go\n")
        c.stdin.flush()
    ends, errors, retries, outcome = [], 0, 0, "ok"
    deadline = time.monotonic() + timeout
    for c in clients:
        line = ""
        while time.monotonic() < deadline and server.poll() is None:
            ready, _, _ = select.select([c.stdout], [], [], 0.5)
            if ready:
                line = c.stdout.readline()
                break
        if not line:
            outcome = "died" if server.poll() is not None else "timed out"
            break
        words = line.split()
        ends.append(int(words[1]))
        errors += int(words[2])
        retries += int(words[3])
    seconds = (max(ends) - start) / 1e9 if outcome == "ok" else float("nan")
    per_conn, kernel_per_conn, server_cpu, clients_cpu = (float("nan"),) * 4
    idle_start = time.monotonic_ns()
    if outcome == "ok":
        server_cpu = cpu_seconds(pid) - cpu_before
        clients_cpu = sum(cpu_seconds(c.pid) for c in clients) - clients_before
        per_conn = (rss_kib(pid) - before) / size
        slab_after = slab_bytes("TCPv6")
        if slab_before is not None and slab_after is not None:
            kernel_per_conn = (slab_after - slab_before) / 1024.0 / size
        time.sleep(2.0)  # the probe's gets with every connection open and idle
    idle_end = time.monotonic_ns()
    samples = []
    if outcome == "ok":
        for proc in clients:  # (the probe's stdin closes in communicate)
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            out, _ = probe.communicate(timeout=60)
            samples = [tuple(map(int, l.split())) for l in out.splitlines() if l.strip()]
        except subprocess.TimeoutExpired:
            pass
    # A failed run leaves connections waiting for answers that will not come: stop every process.
    for proc in clients + [probe]:
        try:
            proc.wait(timeout=60 if outcome == "ok" else 0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    try:
        server.stdin.close()
        server.wait(timeout=30 if outcome == "ok" else 0)
    except (OSError, subprocess.TimeoutExpired):
        server.kill()
        server.wait()
    storm = [lat / 1e3 for t, lat in samples if start <= t < (max(ends) if ends else idle_start)]
    idle = [lat / 1e3 for t, lat in samples if idle_start <= t < idle_end]
    if errors:  # the clients stop at the first few failures and say why on stderr
        outcome = "%d connections failed" % errors
    return {"outcome": outcome, "seconds": seconds, "cpu": server_cpu, "clients_cpu": clients_cpu, "kib": per_conn,
            "kernel_kib": kernel_per_conn, "retries": retries, "storm": storm, "idle": idle}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 16384, 65536])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--procs", type=int, default=8, help="client processes")
    parser.add_argument("--torch-max", type=int, default=16384)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--servers", nargs="+", default=["ddp", "ddp-multi", "torch"],
                        help="ddp-multi: ddp's server, its clients' wait and 4 gets as one multi_get")
    args = parser.parse_args()
    bench = os.path.join(args.build, "bench", "store_bench")
    # Every process of the run may open up to the hard limit; the server needs one descriptor per
    # connection. Raising the hard limit itself needs CAP_SYS_RESOURCE.
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    want = max(args.sizes) + 256
    if hard != resource.RLIM_INFINITY and hard < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))
            hard = want
        except (ValueError, OSError):
            pass
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with open("/proc/sys/net/core/somaxconn") as f:
        somaxconn = f.read().strip()
    print("%d CPUs, load average %s before the run; open files: hard limit %s; net.core.somaxconn %s; %d client "
          "processes; %d rounds" % (os.cpu_count(), " ".join("%.2f" % x for x in os.getloadavg()),
                                    "unlimited" if hard == resource.RLIM_INFINITY else hard, somaxconn, args.procs,
                                    args.rounds))
    print()
    print("| server | connections | rendezvous s (median) | runs | CPU s: server / clients | connects retried "
          "| server memory per connection: user KiB / kernel KiB | get us during, median / p99 "
          "| get us after (all open), median / p99 |")
    print("|---|---|---|---|---|---|---|---|---|")
    blank = " |" * 5  # the columns after "runs"
    for size in args.sizes:
        if hard != resource.RLIM_INFINITY and size + 256 > hard:
            print("| | %d | not run: one server needs %d open files, and the hard limit here is %d (ulimit -Hn; "
                  "raising it needs CAP_SYS_RESOURCE) | |%s" % (size, size + 256, hard, blank))
            continue
        results = {k: [] for k in args.servers}
        for _ in range(args.rounds):  # alternated, so that drift affects both alike
            for kind in args.servers:
                if kind == "torch" and size > args.torch_max:
                    continue
                results[kind].append(one_run(kind, size, args.procs, bench, args.timeout))
        for kind in args.servers:
            runs = results[kind]
            if not runs:
                print("| %s | %d | not run (past --torch-max) | |%s" % (kind, size, blank))
                continue
            ok = [r for r in runs if r["outcome"] == "ok"]
            outcomes = ", ".join(sorted(set(r["outcome"] for r in runs)))
            if not ok:
                print("| %s | %d | %s | %d |%s" % (kind, size, outcomes, len(runs), blank))
                continue
            storm = sum((r["storm"] for r in ok), [])
            idle = sum((r["idle"] for r in ok), [])
            median = lambda key: statistics.median(r[key] for r in ok)
            print("| %s | %d | %.2f | %d (%s) | %.2f / %.2f | %d | %.1f / %.1f | %.0f / %.0f | %.0f / %.0f |" % (
                kind, size, median("seconds"), len(runs), outcomes, median("cpu"), median("clients_cpu"),
                median("retries"), median("kib"), median("kernel_kib"), percentile(storm, 50), percentile(storm, 99),
                percentile(idle, 50), percentile(idle, 99)))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
