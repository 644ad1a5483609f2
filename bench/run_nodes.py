#!/usr/bin/env python3
"""ddp and PyTorch across emulated nodes: network namespaces joined through a switch by veth links
shaped with tc (rate and one-way delay), N ranks per node, each node with its own host identity
(DDP_SHM_HOST_ID, so that ddp uses shared memory within a node and the network between nodes).
ddp (its cpu backend: shared memory within a node, gloo between the nodes' first ranks) and
PyTorch's gloo run alternating, on the same placement, in one run: float32 all_reduce from 4 KB
to 64 MB (time, busbw, and the fraction of the link's bound) and the DDP step (the MLP and the
example's CNN). Prints markdown tables for docs/BENCHMARKS.md. Needs root and the ip and tc tools.

    /usr/bin/python3 bench/run_nodes.py --build build [--nodes 2] [--ranks-per-node 2 | 2 3]
        [--rate 1gbit] [--delay 0.1ms | 0] [--rounds 3] [--min-bytes 4096] [--max-bytes 67108864 | 0] [--models mlp cnn]
        [--powersgd-rank R] [--one-stream] [--goodput] [--baseline OTHER_BUILD] [--ops all_reduce broadcast all_gather reduce_scatter]

The link's bound: whatever the algorithm, after reducing within a node each node must send (and
receive) 2(N-1)/N of the data over its own link (reduce-scatter then all-gather among N nodes),
so no all_reduce of S bytes can take less than 2(N-1)/N * S / rate. "of bound" is that time over
the measured one; --ops times broadcast, all_gather and reduce_scatter too, each against its own
bound (LINK_SHARE below). The namespaces are deleted at the end, also on an error or Ctrl-C (and any left
by an earlier run that was killed are deleted first).
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_allreduce import human, run_ranks, run_ranks_output  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "ddpbench"  # every namespace this script makes starts with it
SUBNET = "10.203.0."


def sh(*argv):
    out = subprocess.run(list(argv), capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError("%s failed: %s" % (" ".join(argv), out.stderr.strip()))
    return out.stdout


def bits_per_second(rate):
    """tc's rate syntax ("1gbit", "100mbit", "10gbit") in bits per second."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmg]?)bit", rate.lower())
    if not m:
        raise SystemExit("--rate %r: give it as tc does, e.g. 1gbit, 100mbit, 10gbit" % rate)
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


class Nodes:
    """The switch and node namespaces; node k is at 10.203.0.(k+1), its link named eth0."""

    def __init__(self, nodes, ranks_per_node, rate, delay):
        """ranks_per_node: one count for every node, or one per node (unequal nodes)."""
        self.count = nodes
        self.sizes = ranks_per_node * nodes if len(ranks_per_node) == 1 else list(ranks_per_node)
        if len(self.sizes) != nodes:
            raise SystemExit("--ranks-per-node takes one count or one per node (%d nodes)" % nodes)
        self.switch = PREFIX + "-switch"
        self.names = ["%s-node%d" % (PREFIX, k) for k in range(nodes)]
        self.master_addr = SUBNET + "1"
        remove_stale()
        sh("ip", "netns", "add", self.switch)
        sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        for k, ns in enumerate(self.names):
            node_end, port = "%sn%d" % (PREFIX, k), "%sp%d" % (PREFIX, k)
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", node_end, "type", "veth", "peer", "name", port)
            sh("ip", "link", "set", node_end, "netns", ns)
            sh("ip", "link", "set", port, "netns", self.switch)
            sh("ip", "-n", ns, "link", "set", node_end, "name", "eth0")
            sh("ip", "-n", self.switch, "link", "set", port, "master", "br0")
            sh("ip", "-n", self.switch, "link", "set", port, "up")
            sh("ip", "-n", ns, "addr", "add", SUBNET + "%d/24" % (k + 1), "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            # Both directions at `rate` (a token bucket at each end), the delay once per direction
            # (netem under the sending node's bucket).
            shape(ns, "eth0", rate, delay)
            shape(self.switch, port, rate, None)

    @property
    def ranks_per_node(self):
        """For the tables' titles: "2", or "2+3" for unequal nodes."""
        return str(self.sizes[0]) if len(set(self.sizes)) == 1 else "+".join(map(str, self.sizes))

    def rank(self, rank, world):
        """run_ranks_output's placement: the argv prefix and environment of `rank`."""
        node, local = 0, rank
        while local >= self.sizes[node]:
            local -= self.sizes[node]
            node += 1
        return (["ip", "netns", "exec", self.names[node]],
                {"LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(self.sizes[node]),
                 "GROUP_RANK": str(node), "DDP_SHM_HOST_ID": "node%d" % node, "GLOO_SOCKET_IFNAME": "eth0"})


def shape(ns, dev, rate, delay):
    """tbf at `rate` on dev's egress (burst: 1 ms of the rate, at least 256 KB, above veth's 64 KB
    segments), and netem's `delay` under it when given."""
    burst = max(256 << 10, int(bits_per_second(rate) / 8 / 1000))
    tc = ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev]
    sh(*tc, "root", "handle", "1:", "tbf", "rate", rate, "burst", str(burst), "latency", "100ms")
    if delay:
        try:
            sh(*tc, "parent", "1:1", "handle", "10:", "netem", "delay", delay, "limit", "100000")
        except RuntimeError as e:
            raise SystemExit("cannot add a delay (%s): this kernel has no netem qdisc (sch_netem); "
                             "run with --delay 0 for rate-limited links without added delay" % e)


# Both ends of one TCP connection send BYTES at once (each side's link busy both ways, as in an
# all_reduce between two nodes); prints when both directions started and ended (CLOCK_MONOTONIC,
# one clock across namespaces, so that connections run at once can be timed together).
GOODPUT_PEER = r"""
import socket, sys, threading, time
role, address, port, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if role == "serve":
    listener = socket.create_server((address, port))
    print("ready", flush=True)
    conn, _ = listener.accept()
else:
    conn = socket.create_connection((address, port))
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
conn.sendall(b"g")  # both ends connected: the clock starts
assert conn.recv(1) == b"g"
start = time.monotonic()
block = bytes(1 << 20)
def send():
    left = size
    while left > 0:
        left -= conn.send(block[:min(left, len(block))])
sender = threading.Thread(target=send)
sender.start()
got, into = 0, memoryview(bytearray(1 << 20))
while got < size:
    got += conn.recv_into(into, min(size - got, len(into)))
sender.join()
print("%.6f %.6f" % (start, time.monotonic()), flush=True)
"""


def tcp_seconds(nodes, size, connections=1):
    """Seconds until `connections` TCP connections between node 0 and node 1, started at once, have
    each moved size / connections bytes each way; the median of 3."""
    times = []
    part = size // connections
    for _ in range(3):
        servers = [subprocess.Popen(["ip", "netns", "exec", nodes.names[1], sys.executable, "-c", GOODPUT_PEER,
                                     "serve", SUBNET + "2", str(29577 + c), str(part)], stdout=subprocess.PIPE,
                                    text=True) for c in range(connections)]
        for server in servers:
            server.stdout.readline()
        clients = [subprocess.Popen(["ip", "netns", "exec", nodes.names[0], sys.executable, "-c", GOODPUT_PEER,
                                     "connect", SUBNET + "2", str(29577 + c), str(part)], stdout=subprocess.PIPE,
                                    text=True) for c in range(connections)]
        spans = []
        for proc in clients + servers:
            out, _ = proc.communicate(timeout=600)
            if proc.returncode != 0:
                raise RuntimeError("the TCP goodput peer failed (exit %d)" % proc.returncode)
            spans.append([float(t) for t in out.split()[-2:]])
        times.append(max(end for _, end in spans) - min(start for start, _ in spans))
    return statistics.median(times)


def tcp_goodput(nodes, size):
    """Bits per second one TCP connection moves each way between node 0 and node 1 at once: the
    most any algorithm moves over a link (what is left of the rate after each 1500-byte frame's
    Ethernet, IP and TCP headers)."""
    return size * 8 / tcp_seconds(nodes, size)


def remove_stale():
    """Deletes every namespace of this script (the veth pairs go with them)."""
    for line in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(PREFIX + "-"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


# What the busiest node must send or receive over its own link, as a fraction of the op's bytes S,
# for nodes of `sizes` ranks (whatever the algorithm, after working within the node): an
# all_reduce 2(N-1)/N of N nodes (reduce-scatter then all-gather), a broadcast all of it (the
# root's node sends S), an all_gather (S is the output) or a reduce_scatter (S is the input) the
# larger of the other nodes' ranks' share (received, or sent for them) and its own share sent to
# each other node: (N-1)/N for equal nodes. And nccl-tests' bus bandwidth factor.
def gather_share(sizes):
    world, n = sum(sizes), len(sizes)
    return max(max(world - s, (n - 1) * s) for s in sizes) / world


LINK_SHARE = {"all_reduce": lambda sizes: 2 * (len(sizes) - 1) / len(sizes), "broadcast": lambda sizes: 1.0,
              "all_gather": gather_share, "reduce_scatter": gather_share}
BUS_FACTOR = {"all_reduce": lambda w: 2 * (w - 1) / w, "broadcast": lambda w: 1.0,
              "all_gather": lambda w: (w - 1) / w, "reduce_scatter": lambda w: (w - 1) / w}


def collective_table(args, nodes, world, link_bps, op):
    sizes = ["--min-bytes", str(args.min_bytes), "--max-bytes", str(args.max_bytes), "--repeats", str(args.repeats),
             "--op", op]
    configs = [("ddp", [os.path.join(args.build, "bench", "allreduce_bench")] + sizes)]
    torch = op != "reduce_scatter"  # PyTorch 1.13's gloo has none
    if torch:
        configs.append(("PyTorch gloo", ["/usr/bin/python3", os.path.join(HERE, "torch_allreduce.py")] + sizes))
    if args.baseline:
        configs.append(("baseline", [os.path.join(args.baseline, "bench", "allreduce_bench")] + sizes))
    runs = {name: [] for name, _ in configs}
    for _ in range(args.rounds):  # alternated, so that drift affects both alike
        for name, cmd in configs:
            runs[name].append(run_ranks(cmd, world, {}, 3600, nodes))
    med = {name: {s: statistics.median(r[s] for r in rs) for s in rs[0]} for name, rs in runs.items()}
    n = nodes.count
    bw = lambda size, us: size * BUS_FACTOR[op](world) / us / 1e3  # noqa: E731 (GB/s)
    print("\n### %s float32 across %d nodes x %s ranks, links %s, delay %s (median of %d)\n"
          % (op, n, nodes.ranks_per_node, args.rate, args.delay or "none added", args.rounds))
    if not torch:
        print("PyTorch 1.13's gloo has no reduce_scatter (\"ProcessGroupGloo does not support reduce_scatter\").\n")
    header = "| size | link bound (us) | ddp time (us) | ddp busbw (GB/s) | ddp of bound |"
    if torch:
        header += " PyTorch time (us) | PyTorch busbw (GB/s) | PyTorch of bound | ddp / PyTorch time |"
    if args.baseline:
        header += " baseline time (us) | baseline of bound | ddp / baseline time |"
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for size in sorted(med["ddp"]):
        bound = LINK_SHARE[op](nodes.sizes) * size * 8 / link_bps * 1e6
        d = med["ddp"][size]
        row = "| %s | %.0f | %.1f | %.3f | %.0f%% |" % (human(size), bound, d, bw(size, d), 100 * bound / d)
        if torch:
            t = med["PyTorch gloo"][size]
            row += " %.1f | %.3f | %.0f%% | %.2f |" % (t, bw(size, t), 100 * bound / t, d / t)
        if args.baseline:
            b = med["baseline"][size]
            row += " %.1f | %.0f%% | %.2f |" % (b, 100 * bound / b, d / b)
        print(row)
    sys.stdout.flush()


def step_table(args, nodes, world):
    print("\n### DDP step across %d nodes x %s ranks, links %s, delay %s, batch 64 per rank (median ms of %d)\n"
          % (nodes.count, nodes.ranks_per_node, args.rate, args.delay or "none added", args.rounds))
    r = args.powersgd_rank
    # PyTorch's own powerSGD_hook is no column: in 1.13's DDP over gloo its ranks issue their
    # all-reduces in different orders and gloo aborts ("op.preamble.length <= op.nbytes. 4136 vs 1024").
    extra = " ddp PowerSGD r=%d | ddp PowerSGD / PyTorch DDP |" % r if r else ""
    if args.one_stream:
        extra += " ddp, one bucket stream | one stream / PyTorch DDP |"
    # The limit: the same loop on every rank at once without DDP (no gradients cross the link).
    print("| model | ddp (C++) | PyTorch DDP | ddp / PyTorch |" + extra + " limit: no DDP | limit / PyTorch DDP |")
    print("|---|---|---|---|" + ("---|---|" if r else "") + ("---|---|" if args.one_stream else "") + "---|---|")
    ddp_step = os.path.join(args.step_build or args.build, "bench", "ddp_step_bench")
    torch_step = ["/usr/bin/python3", os.path.join(HERE, "torch_ddp_step.py")]
    for model in args.models:
        common = ["--model", model, "--steps", str(args.steps)]
        configs = [("ddp", [ddp_step] + common, None), ("torch", torch_step + common, None)]
        if r:
            configs.append(("ddp psgd", [ddp_step] + common + ["--comm-hook", "powersgd:%d" % r], None))
        if args.one_stream:
            configs.append(("ddp one", [ddp_step] + common, {"DDP_BUCKET_STREAMS": "1"}))
        configs.append(("limit", [ddp_step] + common + ["--no-ddp"], None))
        runs = {name: [] for name, _, _ in configs}
        for _ in range(args.rounds):  # alternated, so that drift affects all alike
            for name, cmd, env in configs:
                runs[name].append(float(run_ranks_output(cmd, world, env, 3600, nodes)))
        m = {name: statistics.median(v) for name, v in runs.items()}
        row = "| %s | %.2f | %.2f | %.2f |" % (model, m["ddp"], m["torch"], m["ddp"] / m["torch"])
        if r:
            row += " %.2f | %.2f |" % (m["ddp psgd"], m["ddp psgd"] / m["torch"])
        if args.one_stream:
            row += " %.2f | %.2f |" % (m["ddp one"], m["ddp one"] / m["torch"])
        row += " %.2f | %.2f |" % (m["limit"], m["limit"] / m["torch"])
        print(row)
        sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--ranks-per-node", type=int, nargs="+", default=[2],
                        help="ranks on every node, or on each node (unequal nodes: 2 3)")
    parser.add_argument("--rate", default="1gbit", help="each link's rate, tc's syntax (1gbit, 10gbit)")
    parser.add_argument("--delay", default="0", help="each link's one-way delay, tc's syntax (0.1ms); needs netem")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="timed batches per size within one run")
    parser.add_argument("--min-bytes", type=int, default=4 << 10, help="the collective tables' smallest size")
    parser.add_argument("--max-bytes", type=int, default=64 << 20, help="0: no collective tables")
    parser.add_argument("--ops", nargs="+", default=["all_reduce"], choices=sorted(LINK_SHARE),
                        help="the collectives timed (a table each)")
    parser.add_argument("--models", nargs="*", default=["mlp", "cnn"], help="DDP step models (none: skip)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--goodput", action="store_true",
                        help="first measure what one TCP connection moves each way between two nodes, and "
                        "(2 nodes) what TCP alone takes for the largest all_reduce's bytes")
    parser.add_argument("--one-stream", action="store_true",
                        help="a DDP step column with DDP_BUCKET_STREAMS=1 (one bucket in flight at a time)")
    parser.add_argument("--powersgd-rank", type=int, default=0,
                        help="also time ddp's DDP step with PowerSGD at this rank")
    parser.add_argument("--baseline", help="another build dir whose all_reduce runs beside this one (before/after)")
    parser.add_argument("--step-build", help="the build dir of the DDP step's ddp_step_bench (default: --build; a "
                        "build without LibTorch has none)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run_nodes.py makes network namespaces: run it as root")
    link_bps = bits_per_second(args.rate)
    args.delay = None if args.delay in ("0", "0ms", "0us", "") else args.delay
    # SIGTERM (a killed job, a timeout) cleans up as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        nodes = Nodes(args.nodes, args.ranks_per_node, args.rate, args.delay)
        world = sum(nodes.sizes)
        if args.goodput:
            bps = tcp_goodput(nodes, 64 << 20)
            print("\nTCP goodput between two nodes, both ways at once, 64 MB each: %.3f Gbit/s, %.1f%% of the "
                  "links' %s" % (bps / 1e9, 100 * bps / link_bps, args.rate))
            if args.max_bytes > 0 and "all_reduce" in args.ops and len(nodes.sizes) == 2:
                # The largest all_reduce's wire bytes alone, on one connection and on one per lane as the op uses:
                # what TCP takes for them with no reduction, no pipeline and nothing else on the CPUs.
                wire = args.max_bytes * LINK_SHARE["all_reduce"](nodes.sizes)
                for lanes in sorted({1, min(nodes.sizes)}):
                    seconds = tcp_seconds(nodes, int(wire), lanes)
                    print("TCP alone, the %d-byte all_reduce's %d bytes each way over %d connection(s) at once: "
                          "%.1f ms, %.1f%% of the link's bound" % (args.max_bytes, wire, lanes, seconds * 1e3,
                                                                   100 * wire * 8 / link_bps / seconds))
        if args.max_bytes > 0:
            for op in args.ops:
                collective_table(args, nodes, world, link_bps, op)
        if args.models:
            step_table(args, nodes, world)
    finally:  # also when making the namespaces failed half-way
        remove_stale()


if __name__ == "__main__":
    main()
