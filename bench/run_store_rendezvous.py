#!/usr/bin/env python3
"""The store's rendezvous before and after a change: bench/store_rendezvous_bench (N client
threads with ddp's own TCPStore client on one server process: connect, set, add, wait, four gets)
from this build and from others, alternated round by round on the same machine. Run it before and
after every store change. Prints a markdown table for docs/BENCHMARKS.md: medians of the
rendezvous time, the time per connection, and the server's and the clients' CPU time.

    /usr/bin/python3 bench/run_store_rendezvous.py --build build [--baseline-commit COMMIT ...]
        [--baseline OTHER_BUILD ...]
        [--clients 8192 19000] [--rounds 5] [--server process|thread] [--addresses K]

--baseline-commit C builds commit C's store for a column: the bench file uses ddp's public
TCPStore API alone, so this script copies it into a worktree of C in ddp's cache (DDP_CACHE,
default ~/.cache/ddp), adds it to that tree's bench/CMakeLists.txt, and builds its core alone
(reused when there). --baseline takes a build folder made some other way.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def build_commit(commit):
    """The build folder of `commit`'s store bench, made in ddp's cache the first time."""
    sha = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", commit + "^{commit}"],
                         capture_output=True, text=True)
    if sha.returncode:
        sys.exit("--baseline-commit %s: not a commit of this repository" % commit)
    sha = sha.stdout.strip()
    cache = os.environ.get("DDP_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ddp")
    tree = os.path.join(cache, "store-baseline-" + sha[:12])
    build = os.path.join(tree, "build")
    if not os.path.isdir(tree):
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", tree, sha], check=True,
                       capture_output=True)
    shutil.copy(os.path.join(HERE, "store_rendezvous_bench.cpp"), os.path.join(tree, "bench"))
    cmake_lists = os.path.join(tree, "bench", "CMakeLists.txt")
    with open(cmake_lists) as f:
        has_target = "store_rendezvous_bench" in f.read()
    if not has_target:
        with open(cmake_lists, "a") as f:
            f.write("\nadd_executable(store_rendezvous_bench store_rendezvous_bench.cpp)\n"
                    "target_link_libraries(store_rendezvous_bench PRIVATE ddp::core)\n")
    if not os.path.exists(os.path.join(build, "build.ninja")):
        configure = ["cmake", "-S", tree, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                     "-DDDP_BUILD_TORCH=OFF", "-DDDP_BUILD_TESTS=OFF", "-DDDP_BUILD_EXAMPLES=OFF"]
        if os.path.exists(os.path.join(tree, "scripts", "private_gloo.sh")):  # commits that build their own Gloo
            gloo = subprocess.run([os.path.join(tree, "scripts", "private_gloo.sh")], capture_output=True, text=True,
                                  check=True).stdout.strip().splitlines()[-1]
            configure.append("-DDDP_GLOO_SOURCE_DIR=" + gloo)
        subprocess.run(configure, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["ninja", "-C", build, "store_rendezvous_bench"], check=True, stdout=subprocess.DEVNULL)
    return build


def run_once(binary, clients, timeout_s, server, addresses):
    """(seconds, us per connection, server CPU s, clients CPU s) of one round, or None on errors."""
    out = subprocess.run([binary, "--clients", str(clients), "--rounds", "1", "--timeout-s", str(timeout_s),
                          "--server", server, "--addresses", str(addresses)],
                         capture_output=True, text=True, timeout=timeout_s * 3)
    if out.returncode != 0:
        sys.exit("%s failed: %s" % (binary, out.stderr.strip()))
    fields = out.stdout.strip().splitlines()[-1].split("\t")
    if int(fields[5]) != 0:
        print("%s: %s clients: %s errors (%s)" % (binary, clients, fields[5], out.stderr.strip()), file=sys.stderr)
        return None
    return tuple(float(f) for f in fields[1:5])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--baseline", nargs="*", default=[], help="earlier builds, each a column")
    parser.add_argument("--baseline-commit", nargs="*", default=[],
                        help="earlier commits, each a column, built in ddp's cache")
    parser.add_argument("--clients", type=int, nargs="+", default=[8192])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timeout-s", type=int, default=120)
    parser.add_argument("--server", choices=["process", "thread"], default="process",
                        help="the server in a child process, or in the clients' process as rank 0 hosts it")
    parser.add_argument("--addresses", type=int, default=1,
                        help="spread the ranks over the server's addresses 127.0.0.1..K, as ranks on K hosts")
    args = parser.parse_args()

    builds = [build_commit(c) for c in args.baseline_commit] + args.baseline + [args.build]
    binaries = [os.path.join(b, "bench", "store_rendezvous_bench") for b in builds]
    for b in binaries:
        if not os.access(b, os.X_OK):
            sys.exit("no %s: build the store_rendezvous_bench target there" % b)
    print("| build | clients | rendezvous s, median (min-max) | us per connection | server CPU s | clients CPU s | rounds ok |")
    print("|---|---|---|---|---|---|---|")
    for clients in args.clients:
        results = {b: [] for b in builds}
        for _ in range(args.rounds):
            for build, binary in zip(builds, binaries):
                r = run_once(binary, clients, args.timeout_s, args.server, args.addresses)
                if r:
                    results[build].append(r)
        for build in builds:
            rs = results[build]
            if not rs:
                print("| %s | %d | every round failed | | | | 0/%d |" % (build, clients, args.rounds))
                continue
            secs = [r[0] for r in rs]
            print("| %s | %d | %.2f (%.2f-%.2f) | %.0f | %.2f | %.2f | %d/%d |" % (
                build, clients, statistics.median(secs), min(secs), max(secs),
                statistics.median(r[1] for r in rs), statistics.median(r[2] for r in rs),
                statistics.median(r[3] for r in rs), len(rs), args.rounds))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
