#!/usr/bin/env python3
"""Scale on paper: a small model of ddp's all_reduce time and rendezvous time at 8 to 1,024
ranks, for the flat ring (Gloo's ring over every rank: DDP_SHM=0, or one rank per host) and the
hierarchical algorithm (the CPU backend's: shared-memory reduce to each host's first rank, Gloo's
ring among those, shared-memory broadcast back), built from per-link costs measured on this
machine, and checked against every configuration that runs here (network namespaces as nodes:
2 nodes x 2 ranks, 4 nodes x 1). Prints markdown tables for docs/BENCHMARKS.md.

    /usr/bin/python3 bench/scale_model.py --build build --measure --check [--shape "rate 1gbit delay 100us"]

--measure times the links (writes --costs, default <build>/scale_costs.json); without it the
costs file of an earlier run is used. --check runs the namespace configurations (needs root and
the ip tool). --shape puts a tc netem qdisc on every namespace's link, for a network slower
than this kernel's veth pairs (the costs of such a link are then measured through it too).

The model, and what it assumes (every constant is measured by --measure, nothing is assumed
about this machine but what is written here):

all_reduce of n bytes over p ranks, h hosts of l = p / h ranks each
  link(n)       a message of n bytes between two ranks: alpha + n / B. alpha and B come from
                Gloo's all_reduce on 2 ranks over TCP (DDP_SHM=0), which is 2 messages of n/2:
                T2(n) = 2 alpha + n / B, fitted over 64 KB .. 16 MB.
  ring(n, p)    Gloo's ring: a reduce-scatter and an all-gather, 2(p - 1) steps of n / p bytes:
                2 (p - 1) alpha + 2 (p - 1) / p * n / B. Assumes every rank has its own core and
                link bandwidth B (no shared uplink), and the reduction costs nothing beside the
                transfer (it overlaps with it in Gloo's pipelined ring).
  shm(n, l)     the shared-memory reduce to the host's first rank and broadcast back: a + b n l / 2,
                a and b fitted on 2 ranks (l = 2) over 64 KB .. 16 MB; memory traffic grows with
                the ranks of a host (each rank's buffer is read once and written once), spread over
                the host's cores at the 2-rank rate (assumes enough cores and memory bandwidth).
  flat          ring(n, p)
  hierarchical  shm(n, l) + ring(n, h)           (l = 1: ring(n, p), no shared memory)

rendezvous of p ranks (init_process_group with the CPU backend, h hosts of l ranks), as the
store's one server thread sees it (the server is the bottleneck; ranks work in parallel):
  requests      per rank, counted from the code: joining the group (6 + 1 wait), the host
                identities (1 set, 1 wait, p gets), the segment (2) and its check (2 + l gets),
                Gloo's full mesh over all p ranks (1 set; 1 wait and 1 get per peer: 2 (p - 1)),
                and the leaders' mesh (hierarchical only, the h leaders: 1 + 2 (h - 1)).
  bytes         Gloo's full mesh stores one value per rank holding an address for every peer
                (136 bytes each: sockaddr_storage and a sequence number), and every rank reads
                every other rank's: p (p - 1) values of 136 p bytes (the leaders' mesh: h (h - 1)
                of 136 h). The rest is small.
  time          connections p * c_conn + requests * c_req + bytes / B_store, where c_conn and c_req
                come from the store benchmark's rendezvous (bench/store_bench.cpp: one connection
                and 9 requests per client, measured at --store-clients), and B_store is the
                server's rate for large values (one client getting a 1 MB value), plus the ranks'
                own connects to their p - 1 peers: (p - 1) * c_pair (c_pair: a TCP connect plus
                handshake between two ranks, from init at 2 ranks less the store's part).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_allreduce import free_port, parse_rows, run_ranks_output  # noqa: E402

FIT_SIZES = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]
SHOW_SIZES = [64 << 10, 1 << 20, 25 << 20]  # 25 MB: DDP's default bucket
RANKS = [8, 16, 32, 64, 128, 256, 512, 1024]
PER_HOST = 8
ADDRESS_BYTES = 136


def human(size):
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024:
            return "%d %s" % (size, unit)
        size //= 1024
    return "%d TB" % size


def fit_line(points):
    """Least squares y = a + b x over [(x, y)]."""
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


# ---- the model

def link_ring(c, n, p):
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * c["alpha_s"] + 2.0 * (p - 1) / p * n / c["B"]


def shm(c, n, l):
    if l <= 1:
        return 0.0
    return c["shm_a_s"] + c["shm_b_s_per_byte"] * n * l / 2.0


def allreduce_model(c, n, p, l):
    h = max(1, p // l)
    return shm(c, n, l) + link_ring(c, n, h)


def rendezvous_requests(p, l):
    h = max(1, p // l)
    per_rank = 7 + (2 + p) + 2 + (2 + l) + (1 + 2 * (p - 1))
    if l > 1 and h > 1:
        per_rank += 1 + 2 * (h - 1)  # a leader's; the others' make no such requests
    return p * per_rank


def rendezvous_bytes(p, l):
    h = max(1, p // l)
    total = p * (p - 1) * ADDRESS_BYTES * p
    if l > 1 and h > 1:
        total += h * (h - 1) * ADDRESS_BYTES * h
    return total


def rendezvous_model(c, p, l):
    return (p * c["c_conn_s"] + rendezvous_requests(p, l) * c["c_req_s"] + rendezvous_bytes(p, l) / c["B_store"] +
            (p - 1) * c["c_pair_s"])


# ---- measuring the links here

def allreduce_rows(build, world, env, sizes):
    bench = os.path.join(build, "bench", "allreduce_bench")
    out = run_ranks_output([bench, "--min-bytes", str(min(sizes)), "--max-bytes", str(max(sizes)), "--repeats", "5",
                            "--print-init"], world, env)
    rows = parse_rows("\n".join(l for l in out.splitlines() if not l.startswith("init")))
    init = [float(l.split()[1]) for l in out.splitlines() if l.startswith("init")]
    return rows, init[0] if init else float("nan")


def store_costs(build, clients):
    bench = os.path.join(build, "bench", "store_bench")
    run = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "run_store.py"), "--build", build,
                          "--sizes", str(clients), "--rounds", "1", "--servers", "ddp"], capture_output=True, text=True,
                         check=True)
    row = [l for l in run.stdout.splitlines() if l.startswith("| ddp |")][0].split("|")
    seconds = float(row[3])
    # One connection and 9 requests (hello, set, add, get, 4 gets; the last arrival's set) per client:
    # split as the server spends them, accepting a connection taking about two requests' time.
    c_req = seconds / (clients * (9 + 2))
    big = subprocess.run([bench, "probe-value", "--bytes", str(1 << 20)], capture_output=True, text=True, check=True)
    return {"c_req_s": c_req, "c_conn_s": 2 * c_req, "B_store": float(big.stdout.split()[0]),
            "store_clients": clients, "store_seconds": seconds}


def measure(build, store_clients, shape):
    costs = {"shape": shape}
    if shape:  # the link the model is for: two namespaces through the shaped veth pairs
        net = Namespaces(2, shape)
        try:
            rows, _ = net.run_job(build, 1, {"DDP_SHM": "0"}, FIT_SIZES)
        finally:
            net.close()
    else:
        rows, _ = allreduce_rows(build, 2, {"DDP_SHM": "0"}, FIT_SIZES)
    a, b = fit_line([(n, rows[n] * 1e-6) for n in FIT_SIZES])
    costs.update(alpha_s=max(a / 2, 1e-6), B=1 / b, tcp_rows={str(k): v for k, v in rows.items()})
    rows, init2 = allreduce_rows(build, 2, {}, FIT_SIZES)
    a, b = fit_line([(n, rows[n] * 1e-6) for n in FIT_SIZES])
    costs.update(shm_a_s=max(a, 1e-7), shm_b_s_per_byte=b, shm_rows={str(k): v for k, v in rows.items()})
    costs.update(store_costs(build, store_clients))
    store_part = 2 * costs["c_conn_s"] + rendezvous_requests(2, 2) * costs["c_req_s"]
    costs["init2_s"] = init2 * 1e-6
    costs["c_pair_s"] = max(init2 * 1e-6 - store_part, 0.0)
    return costs


# ---- the configurations that run here: network namespaces as nodes

class Namespaces:
    """`nodes` network namespaces on a bridge, 10.201.0.(i+1); each rank runs in its node's
    namespace under a hostname of its own (a UTS namespace), so that ddp sees separate hosts."""

    def __init__(self, nodes, shape):
        self.nodes = nodes
        self.tag = str(os.getpid())[-5:]
        self.br = "ddpbr" + self.tag
        self.run("ip link add %s type bridge" % self.br)
        self.run("ip link set %s up" % self.br)
        for i in range(nodes):
            ns, v, peer = self.ns(i), "ddpv%s%d" % (self.tag, i), "ddpp%s%d" % (self.tag, i)
            for step in ("ip netns add %s" % ns, "ip link add %s type veth peer name %s" % (v, peer),
                         "ip link set %s netns %s" % (peer, ns), "ip link set %s master %s up" % (v, self.br),
                         "ip -n %s addr add 10.201.0.%d/24 dev %s" % (ns, i + 1, peer),
                         "ip -n %s link set %s up" % (ns, peer), "ip -n %s link set lo up" % ns):
                self.run(step)
            if shape:
                self.run("ip netns exec %s tc qdisc add dev %s root netem %s" % (ns, peer, shape))

    def ns(self, i):
        return "ddpn%s%d" % (self.tag, i)

    @staticmethod
    def run(command):
        r = subprocess.run(command, shell=True, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("%s: %s" % (command, r.stderr.strip()))

    def close(self):
        for i in range(self.nodes):
            subprocess.run("ip netns del %s" % self.ns(i), shell=True, capture_output=True)
        subprocess.run("ip link del %s" % self.br, shell=True, capture_output=True)

    def run_job(self, build, per_node, env, sizes):
        """The all_reduce benchmark as nodes x per_node ranks; rank 0's rows and init time."""
        bench = os.path.abspath(os.path.join(build, "bench", "allreduce_bench"))
        port = str(free_port())
        world = self.nodes * per_node
        procs = []
        for rank in range(world):
            node = rank // per_node
            e = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank % per_node),
                     LOCAL_WORLD_SIZE=str(per_node), MASTER_ADDR="10.201.0.1", MASTER_PORT=port, OMP_NUM_THREADS="1",
                     **env)
            cmd = ["ip", "netns", "exec", self.ns(node), "unshare", "--uts", "sh", "-c",
                   'hostname ddpnode%d && exec "$@"' % node, "--", bench, "--min-bytes", str(min(sizes)),
                   "--max-bytes", str(max(sizes)), "--repeats", "5", "--print-init"]
            procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
                                          text=True))
        out, _ = procs[0].communicate(timeout=1800)
        for p in procs[1:]:
            p.wait(timeout=600)
        if any(p.returncode for p in procs):
            raise RuntimeError("a rank of the %d x %d job failed" % (self.nodes, per_node))
        rows = parse_rows("\n".join(l for l in out.splitlines() if not l.startswith("init")))
        init = [float(l.split()[1]) for l in out.splitlines() if l.startswith("init")]
        return rows, init[0] * 1e-6


def check(build, costs, shape, rounds):
    print("\n### Model against measurement (network namespaces as nodes%s)\n" % (", links shaped: " + shape if shape else ""))
    print("| configuration | size | model (us) | measured (us, median of %d) | measured / model |" % rounds)
    print("|---|---|---|---|---|")
    sizes = [64 << 10, 1 << 20, 16 << 20]
    inits = []
    for nodes, per_node, env, name in ((2, 2, {}, "2 nodes x 2 ranks, hierarchical"),
                                       (2, 2, {"DDP_SHM": "0"}, "2 nodes x 2 ranks, flat ring (DDP_SHM=0)"),
                                       (4, 1, {}, "4 nodes x 1 rank, flat ring")):
        net = Namespaces(nodes, shape)
        try:
            runs = [net.run_job(build, per_node, env, sizes) for _ in range(rounds)]
        finally:
            net.close()
        p = nodes * per_node
        l = per_node if not env else 1
        for n in sizes:
            measured = statistics.median(r[0][n] for r in runs)
            model = allreduce_model(costs, n, p, l) * 1e6
            print("| %s | %s | %.0f | %.0f | %.2f |" % (name, human(n), model, measured, measured / model))
        inits.append((name, p, l, statistics.median(r[1] for r in runs)))
        sys.stdout.flush()
    print("\n| configuration | rendezvous model (ms) | init_process_group measured (ms) | measured / model |")
    print("|---|---|---|---|")
    for name, p, l, measured in inits:
        model = rendezvous_model(costs, p, l)
        print("| %s | %.1f | %.1f | %.2f |" % (name, model * 1e3, measured * 1e3, measured / model))


def tables(costs):
    print("\n### Measured link costs\n")
    print("| link | latency alpha (us) | bandwidth |")
    print("|---|---|---|")
    print("| TCP (Gloo, 2 ranks%s) | %.1f | %.2f GB/s |" % (
        ", shaped: " + costs["shape"] if costs.get("shape") else ", loopback", costs["alpha_s"] * 1e6, costs["B"] / 1e9))
    print("| shared memory (2 ranks): a + b n | a = %.1f | 1/b = %.2f GB/s |" % (
        costs["shm_a_s"] * 1e6, 1 / costs["shm_b_s_per_byte"] / 1e9))
    print("| store: per request, per connection | %.2f us, %.2f us (from %d clients in %.2f s) | large values %.2f GB/s |"
          % (costs["c_req_s"] * 1e6, costs["c_conn_s"] * 1e6, costs["store_clients"], costs["store_seconds"],
             costs["B_store"] / 1e9))
    print("| rank to rank connect (from init at 2 ranks: %.1f ms) | %.1f | |" % (costs["init2_s"] * 1e3,
                                                                            costs["c_pair_s"] * 1e6))
    for n in SHOW_SIZES:
        print("\n### all_reduce of %s, model (ms; hierarchical: %d ranks per host)\n" % (human(n), PER_HOST))
        print("| ranks | flat ring | hierarchical | flat / hierarchical |")
        print("|---|---|---|---|")
        for p in RANKS:
            flat, hier = allreduce_model(costs, n, p, 1), allreduce_model(costs, n, p, PER_HOST)
            print("| %d | %.2f | %.2f | %.1fx |" % (p, flat * 1e3, hier * 1e3, flat / hier))
    print("\n### Rendezvous, model (s; hierarchical: %d ranks per host)\n" % PER_HOST)
    print("| ranks | store requests | bytes read from the store | flat | hierarchical |")
    print("|---|---|---|---|---|")
    for p in RANKS:
        print("| %d | %d | %s | %.2f | %.2f |" % (p, rendezvous_requests(p, PER_HOST), human(rendezvous_bytes(p, PER_HOST)),
                                                 rendezvous_model(costs, p, 1), rendezvous_model(costs, p, PER_HOST)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--costs", default=None)
    parser.add_argument("--measure", action="store_true")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--shape", default="", help='tc netem arguments for every node link, e.g. "rate 1gbit delay 100us"')
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--store-clients", type=int, default=16384)
    args = parser.parse_args()
    path = args.costs or os.path.join(args.build, "scale_costs.json")
    if args.measure:
        costs = measure(args.build, args.store_clients, args.shape)
        with open(path, "w") as f:
            json.dump(costs, f, indent=1)
    else:
        with open(path) as f:
            costs = json.load(f)
    tables(costs)
    if args.check:
        if not shutil.which("ip"):
            sys.exit("--check needs the ip tool (and root)")
        check(args.build, costs, args.shape, args.rounds)


if __name__ == "__main__":
    main()
