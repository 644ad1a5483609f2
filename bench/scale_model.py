#!/usr/bin/env python3
"""Scale on paper: a small cost model of the all_reduce time (the flat ring, and ddp's hierarchical
all_reduce) and of the rendezvous time, from the per-link costs measured on this machine, at 8 to
1,024 ranks; and the model beside every measurement docs/BENCHMARKS.md records that it covers.

    python3 bench/scale_model.py [--rate 10gbit] [--ranks-per-host 8] [--benchmarks docs/BENCHMARKS.md docs/benchmarks/HISTORY.md]

Plain Python (the standard library, and two helpers of run_allreduce.py and run_nodes.py). Prints markdown tables (docs/BENCHMARKS.md "Scale on paper").

The model (every number a flag; the defaults are this VM's measurements, named in each flag's help):
- A job of N ranks on H hosts with L ranks each (N = H * L), every rank with a core of its own, every
  host with one full-duplex link of rate R to a non-blocking switch. TCP carries 1448 bytes of
  payload per 1514-byte frame (MTU 1500 with timestamps), so a stream moves at most 0.956 R.
- The flat ring (Gloo's, PyTorch's on CPU; ranks numbered host by host): 2(N-1) steps, each moving
  S/N bytes from every rank to the next. Each host has one ring edge out and one in over its link,
  so a step takes alpha + (S/N) / (0.956 R) (the link edge is the slowest; one host: loopback TCP,
  alpha_lo + (S/N) / B_lo). Per host the link carries 2(N-1)/N * S.
- ddp's hierarchical all_reduce: the host's ranks reduce into shared memory and broadcast from it
  (together alpha_shm + S / B_shm, ddp's one-host all_reduce at 2 ranks; B_shm is higher up to 4 MB,
  which stays in the shared L3 cache), and between them one ring
  of H hosts: 2(H-1) steps of S/H bytes, alpha + (S/H) / (0.956 R). Per host the link carries
  2(H-1)/H * S, the least any algorithm can. The striped variant (every local rank its own ring
  over S/L) moves the same bytes over the same link in the same number of steps, so the model
  does not tell it apart: its few percent come from what the model leaves out (the idle link while
  the host reduces). The phases are not pipelined: their times add.
- alpha is one step's fixed cost across the link (one-way latency plus the sender's and the
  receiver's software: 39 us per 4 KB round trip measured between this VM's namespaces, so 20 us
  one way, plus 30 us of Gloo per step on a rank with a core of its own).
- The rendezvous: one store server thread, CPU-bound, costs c per connection (the 8 requests a rank
  makes: hello, set, add, wait, 4 gets); measured 150-170 us per connection at 1,024 to 19,456
  connections. With the ranks on other machines the server's CPU is the rendezvous time: N * c.
  With the multi_get (a rank's wait and 4 gets in one request) the server's CPU per connection
  fell from 67-81 us to 49 us side by side on a faster VM; the model scales 165 us by that ratio.
  PyTorch 1.13's server polls every connection on each event, so its cost grows faster than N
  (N^1.58 through its measured CPU time, 0.24 s at 1,024 and 2.16 s at 4,096) until it fails (it
  did at 16,384).

What it leaves out: congestion inside the switch (none in a non-blocking one), TCP slow start,
the cores that reduce while they also send, and everything this VM adds by running 4 ranks, or a
server and 8 client processes, on 2 vCPUs. The check below shows where that matters.
"""
import argparse
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_allreduce import human  # noqa: E402
from run_nodes import bits_per_second  # noqa: E402

TCP_PAYLOAD = 1448 / 1514
SIZES = [4 << 10, 1 << 20, 64 << 20]
RANKS = [8, 16, 32, 64, 128, 256, 512, 1024]


def parse_size(text):
    value, unit = text.split()
    return int(value) << {"B": 0, "KB": 10, "MB": 20, "GB": 30}[unit]


class Model:
    def __init__(self, args):
        self.alpha = (args.link_latency_us + args.step_us) * 1e-6
        self.alpha_lo = args.loopback_step_us * 1e-6
        self.alpha_shm = args.shm_us * 1e-6
        self.b_lo = args.loopback_gbps * 1e9
        self.b_shm = args.shm_gbps * 1e9
        self.b_shm_cache = args.shm_cache_gbps * 1e9
        self.cache_bytes = args.shm_cache_mb << 20
        self.conn = args.server_us_per_connection * 1e-6
        self.conn_multi = args.multi_get_us_per_connection * 1e-6

    def ring(self, size, hosts, per_host, rate_bps):
        """Seconds for Gloo's flat ring over hosts * per_host ranks."""
        n = hosts * per_host
        if n == 1:
            return 0.0
        if hosts == 1:
            return 2 * (n - 1) * (self.alpha_lo + size / n / self.b_lo)
        return 2 * (n - 1) * (self.alpha + size / n / (TCP_PAYLOAD * rate_bps / 8))

    def hierarchical(self, size, hosts, per_host, rate_bps):
        """Seconds for ddp's all_reduce: shared memory within each host, a ring of the hosts."""
        b_shm = self.b_shm_cache if size <= self.cache_bytes else self.b_shm
        t = self.alpha_shm + size / b_shm if per_host > 1 else 0.0
        if hosts > 1:
            t += 2 * (hosts - 1) * (self.alpha + size / hosts / (TCP_PAYLOAD * rate_bps / 8))
        return t

    def bound(self, size, hosts, rate_bps):
        """The link's bound: 2(H-1)/H of the data over each host's link at the line rate."""
        return 2 * (hosts - 1) / hosts * size / (rate_bps / 8) if hosts > 1 else 0.0

    def rendezvous(self, ranks, multi_get=False):
        return ranks * (self.conn_multi if multi_get else self.conn)

    @staticmethod
    def torch_rendezvous(ranks):
        # c * N^a through PyTorch's two measured points (0.24 s at 1,024, 2.16 s at 4,096): a = 1.58.
        return 2.16 * (ranks / 4096) ** math.log(2.16 / 0.24, 4)


def tables(text):
    """(section, heading, rows as dicts) for every markdown table: the '## ' section it is in, and
    the nearest heading above it."""
    section, heading, header, rows, out = "", "", None, [], []
    for line in text.splitlines() + [""]:
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            if line.startswith("## "):
                section = heading
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
            elif not all(set(c) <= set("-:") for c in cells):
                rows.append(dict(zip(header, cells)))
            continue
        if header is not None:
            out.append((section, heading, rows))
        header, rows = None, []
    return out


def number(text):
    m = re.match(r"\*?\*?([\d.]+)", text or "")
    return float(m.group(1)) if m else None


def print_model(model, args):
    rate = bits_per_second(args.rate)
    L = args.ranks_per_host
    print("\n### all_reduce float32 on paper: %d ranks per host, links %s (ms)\n" % (L, args.rate))
    print("| ranks | hosts | " + " | ".join("%s ring | %s ddp | %s bound" % ((human(s),) * 3) for s in SIZES) + " |")
    print("|---|---|" + "---|---|---|" * len(SIZES))
    for n in RANKS:
        hosts = max(1, n // L)
        cells = []
        for s in SIZES:
            cells += ["%.2f" % (1e3 * model.ring(s, hosts, L, rate)), "%.2f" % (1e3 * model.hierarchical(s, hosts, L, rate)),
                      "%.2f" % (1e3 * model.bound(s, hosts, rate))]
        print("| %d | %d | %s |" % (n, hosts, " | ".join(cells)))
    print("\n### Rendezvous on paper (s): one store server thread, the ranks on other machines\n")
    print("| ranks | ddp | ddp, multi_get | PyTorch 1.13 |")
    print("|---|---|---|---|")
    for n in RANKS + [16384, 65536]:
        torch = model.torch_rendezvous(n)
        print("| %d | %.3f | %.3f | %s |" % (n, model.rendezvous(n), model.rendezvous(n, True),
                                           "%.3f" % torch if n <= 4096 else "%.1f (failed at 16,384 here)" % torch))


def print_check(model, args):
    found = []
    for path in args.benchmarks:
        with open(path) as f:
            found += tables(f.read())
    print("\n### The model beside the measurements in %s\n" % ", ".join(os.path.relpath(p) for p in args.benchmarks))
    print("| measurement | size | ddp measured (us) | ddp model (us) | model / measured | PyTorch measured (us) "
          "| ring model (us) | model / measured |")
    print("|---|---|---|---|---|---|---|---|")
    for section, heading, rows in found:
        run = re.search(r"\d{4}-\d\d-\d\d", section)  # HISTORY.md's sections start with their date
        run = " (%s)" % (run.group(0) if run else "current")
        nodes = re.search(r"all_reduce float32 across (\d+) nodes x (\d+) ranks, links (\S+),", heading)
        host = re.fullmatch(r"all_reduce float32, world size (\d+)", heading)
        if nodes:
            hosts, per_host, rate = int(nodes.group(1)), int(nodes.group(2)), bits_per_second(nodes.group(3))
            ours, theirs, label = "ddp time (us)", "PyTorch time (us)", "%d nodes x %d, %s%s" % (hosts, per_host, nodes.group(3), run)
        elif host:
            hosts, per_host, rate = 1, int(host.group(1)), 0.0
            ours, theirs, label = "ddp shm time (us)", "PyTorch gloo time (us)", "1 host x %s%s" % (host.group(1), run)
        else:
            continue
        for row in rows:
            if "size" not in row:  # another table under the same heading (a chunk sweep, a summary)
                continue
            size, d, t = parse_size(row["size"]), number(row.get(ours)), number(row.get(theirs))
            if d is None or t is None or size not in (4 << 10, 1 << 20, 16 << 20, 64 << 20):
                continue
            md = 1e6 * model.hierarchical(size, hosts, per_host, rate)
            mt = 1e6 * model.ring(size, hosts, per_host, rate)
            print("| %s | %s | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |" % (label, row["size"], d, md, md / d, t, mt, mt / t))
    print("\n| store rendezvous | run | connections | measured s | server CPU s | model s (N * c) | model / server CPU |")
    print("|---|---|---|---|---|---|---|")
    for section, heading, rows in found:
        if "store" not in section.lower():
            continue
        for row in rows:
            server = row.get("server")
            measured = number(row.get("rendezvous s")) or number(row.get("rendezvous s (median)"))
            if server not in ("ddp", "ddp-multi") or measured is None:
                continue
            n = int(row["connections"])
            cpu = number(row.get("CPU s: server / clients"))
            m = model.rendezvous(n, server == "ddp-multi")
            run = re.search(r"\d{4}-\d\d-\d\d", section)
            run = run.group(0) if run else "current"
            print("| %s | %s | %d | %.2f | %.2f | %.2f | %.2f |" % (server, run, n, measured, cpu, m, m / cpu))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", default="10gbit", help="each host's link for the tables on paper (tc's syntax)")
    p.add_argument("--ranks-per-host", type=int, default=8)
    p.add_argument("--link-latency-us", type=float, default=20, help="one way (39 us per 4 KB round trip between namespaces)")
    p.add_argument("--step-us", type=float, default=30, help="Gloo's software per ring step, a core per rank")
    p.add_argument("--loopback-step-us", type=float, default=30, help="a ring step over loopback TCP")
    p.add_argument("--loopback-gbps", type=float, default=1.0, help="one loopback TCP stream (Gloo, 64 MB at 2 ranks)")
    p.add_argument("--shm-us", type=float, default=2.0, help="ddp's shared-memory all_reduce of 4 KB, 2 ranks")
    p.add_argument("--shm-gbps", type=float, default=4.0, help="S / time of ddp's shared-memory all_reduce at 64 MB, 2 ranks")
    p.add_argument("--shm-cache-gbps", type=float, default=10.0,
                   help="the same up to --shm-cache-mb, where the host's ranks work in the shared L3 (8-15 at 1 MB)")
    p.add_argument("--shm-cache-mb", type=int, default=4)
    p.add_argument("--server-us-per-connection", type=float, default=165, help="the store server's CPU per rank")
    p.add_argument("--multi-get-us-per-connection", type=float, default=49 * 165 / 74,
                   help="the same with the multi_get (49 us against 67-81 us, side by side on a faster VM)")
    p.add_argument("--benchmarks", nargs="+", help="the files whose tables the model is set beside",
                   default=[os.path.join(HERE, "..", "docs", "BENCHMARKS.md"),
                            os.path.join(HERE, "..", "docs", "benchmarks", "HISTORY.md")])
    args = p.parse_args()
    model = Model(args)
    print_model(model, args)
    print_check(model, args)


if __name__ == "__main__":
    main()
