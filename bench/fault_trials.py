#!/usr/bin/env python3
"""Fault benchmark: random faults against the main job under ddprun, each checked end to end.

Each trial starts a short run of the example (2 ranks, a subset of Fashion-MNIST) under ddprun
and, at a random moment, does one of: kill -9 of a random rank; SIGSTOP of a random rank;
SIGTERM of a random rank; kill -9 of ddprun; SIGINT or SIGTERM to ddprun's whole process group
(what a terminal's Ctrl-C does); kill -9 of a random rank under --max_restarts=1. Then it checks:

  * the job ends (or, with a restart, finishes) within the time the fault allows plus a bound;
  * the right rank is named (the killed one as ddprun's root cause; the stopped one as the rank
    the others waited for), or a signalled job stops cleanly;
  * no process of the run is left;
  * the next run of the same command resumes from an intact checkpoint and ends with the same
    numbers as an uninterrupted run (metrics.csv's epoch, losses, accuracy and learning rate).

    /usr/bin/python3 bench/fault_trials.py --build build --trials 100 [--seed 1] [--faults ...]

Prints a line per trial and a markdown table per fault for docs/RELIABILITY.md; exits 1 when a
trial failed, keeping its logs (the path is printed). Not part of CI: 100 trials take ~35 min.
"""
import argparse
import dataclasses
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

FAULTS = ["kill-rank", "stop-rank", "term-rank", "kill-ddprun", "signal-group", "restart"]
DESCRIPTIONS = {
    "kill-rank": "`kill -9` of a random rank",
    "stop-rank": "`SIGSTOP` of a random rank",
    "term-rank": "`SIGTERM` of a random rank",
    "kill-ddprun": "`kill -9` of ddprun",
    "signal-group": "SIGINT or SIGTERM to ddprun's process group",
    "restart": "`kill -9` of a random rank, `--max_restarts=1`",
}
COLUMNS = 5  # metrics.csv's epoch, train_loss, test_loss, test_accuracy, lr: the same in every run


@dataclasses.dataclass
class Result:
    fault: str
    what: str            # the fault as done: "kill -9 of rank 1 at 2.31 s"
    ended_after: float   # seconds from the fault to the job's end (nan: it never ended)
    problems: list       # empty: passed
    notes: list          # what was seen, for the trial's line


def read(path, binary=False):
    try:
        with open(path, "rb" if binary else "r") as f:
            return f.read()
    except OSError:
        return b"" if binary else ""


def processes(marker):
    """{pid: RANK or None} of live processes whose command line mentions `marker`."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        cmdline = read("/proc/%s/cmdline" % entry, binary=True)
        if marker.encode() not in cmdline:
            continue
        stat = read("/proc/%s/stat" % entry)
        if ") Z" in stat or not stat:
            continue  # a zombie (or gone) has left
        rank = None
        for var in read("/proc/%s/environ" % entry, binary=True).split(b"\0"):
            if var.startswith(b"RANK="):
                rank = int(var[5:])
        found[int(entry)] = rank
    return found


def describe(marker):
    """The run's live processes with their state: "rank 0 (pid 42, T: stopped), ddprun (pid 40, S)"."""
    states = {"R": "running", "S": "sleeping", "D": "in I/O", "T": "stopped", "t": "traced"}
    parts = []
    for pid, rank in sorted(processes(marker).items()):
        stat = read("/proc/%d/stat" % pid)
        state = stat[stat.rfind(")") + 2:][:1] if stat else "?"
        name = "rank %d" % rank if rank is not None else os.path.basename(
            read("/proc/%d/cmdline" % pid, binary=True).split(b"\0")[0].decode(errors="replace"))
        parts.append("%s (pid %d, %s)" % (name, pid, states.get(state, state)))
    return ", ".join(parts) or "nothing"


def trainers(marker):
    return {rank: pid for pid, rank in processes(marker).items() if rank is not None}


def wait_until(condition, seconds, step=0.02):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(step)
    return condition()


def metrics(run_dir):
    lines = read(os.path.join(run_dir, "metrics.csv")).splitlines()[1:]
    return [",".join(line.split(",")[:COLUMNS]) for line in lines]


class Job:
    """One ddprun run of the example, in a process group (and session) of its own."""

    def __init__(self, args, run_dir, log_name, ddprun_flags=()):
        self.dir = run_dir
        os.makedirs(run_dir, exist_ok=True)
        self.out_path = os.path.join(run_dir, log_name + ".out")
        self.err_path = os.path.join(run_dir, log_name + ".err")
        # --stopped_timeout: a rank stopped after the other has exited is ended as fast as a collective times out.
        argv = [args.ddprun, "--nproc_per_node=2", "--standalone", "--grace_period=%d" % args.grace,
                "--stopped_timeout=%d" % args.timeout, *ddprun_flags, args.trainer, "--epochs", str(args.epochs), "--limit-train", str(args.limit_train),
                "--limit-test", "500", "--checkpoint-every", "4", "--log-every", "2",
                "--timeout", str(args.timeout), "--checkpoint-dir", run_dir]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.process = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                            start_new_session=True)
        self.started = time.monotonic()

    def wait(self, seconds):
        """The exit status (negative: killed by that signal), or None at the deadline."""
        try:
            return self.process.wait(timeout=max(seconds, 0.01))
        except subprocess.TimeoutExpired:
            return None

    def kill_everything(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in processes(self.dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()

    def out(self):
        return read(self.out_path)

    def err(self):
        return read(self.err_path)


def root_cause(err):
    """(rank, text of the root cause block) from ddprun's summary, or (None, "")."""
    m = re.search(r"Root cause \(first failure\):\s*\n\s*rank\s*: (\d+)(.*?)(?:\n\S|\nWorkers|\Z)", err, re.S)
    return (int(m.group(1)), m.group(0)) if m else (None, "")


def check_named(fault, victim, status, job, problems, notes):
    """The rank faults: who is named, and how."""
    out, err = job.out(), job.err()
    if fault in ("kill-rank", "stop-rank") and status == 0:
        notes.append("finished before the fault took effect")
        return
    if fault == "kill-rank":
        rank, block = root_cause(err)
        if rank != victim:
            problems.append("ddprun's root cause is rank %s, not the killed rank %d" % (rank, victim))
        elif "SIGKILL" not in block:
            problems.append("the root cause does not say SIGKILL: " + block.strip())
        else:
            notes.append("root cause rank %d SIGKILL" % victim)
    elif fault == "stop-rank":
        waited = re.search(r"(Ranks that had not reached [^:]*: rank %d:|still inside it: rank %d\b|"
                           r"rank %d of \d+ did not join)" % (victim, victim, victim), out + err)
        if not waited:
            problems.append("no rank says it waited for the stopped rank %d" % victim)
        else:
            notes.append("the others name rank %d" % victim)
        rank, _ = root_cause(err)
        if rank is not None and rank != victim:
            problems.append("ddprun's root cause is rank %d (which timed out waiting), not the stopped rank %d"
                            % (rank, victim))
    elif fault == "term-rank":
        if status == 0:
            notes.append("stopped with a checkpoint" if "stopped by a signal" in out else "finished")
        else:
            rank, block = root_cause(err)
            if rank != victim or "SIGTERM" not in block:
                problems.append("exit %s after SIGTERM of rank %d; root cause: %s" % (status, victim, block.strip()
                                                                                     or "none"))
            else:
                notes.append("rank %d died of SIGTERM (before its handler was installed), named" % victim)


def one_trial(args, index, fault, rng, root, reference, train_seconds):
    run_dir = os.path.join(root, "trial-%03d-%s" % (index, fault))
    problems, notes = [], []
    victim = rng.randrange(2)
    delay = rng.uniform(0, train_seconds * 1.1)
    group_signal = rng.choice([signal.SIGINT, signal.SIGTERM])
    job = Job(args, run_dir, "faulted", ["--max_restarts=1"] if fault == "restart" else [])
    pids = wait_until(lambda: len(trainers(run_dir)) == 2 and trainers(run_dir), 60)
    if not pids:
        job.kill_everything()
        return Result(fault, fault, float("nan"), ["the trainers did not start within 60 s"], notes)
    time.sleep(delay)
    if fault in ("kill-rank", "restart"):
        what, target, sig = "kill -9 of rank %d" % victim, pids[victim], signal.SIGKILL
    elif fault == "stop-rank":
        what, target, sig = "SIGSTOP of rank %d" % victim, pids[victim], signal.SIGSTOP
    elif fault == "term-rank":
        what, target, sig = "SIGTERM of rank %d" % victim, pids[victim], signal.SIGTERM
    elif fault == "kill-ddprun":
        what, target, sig = "kill -9 of ddprun", job.process.pid, signal.SIGKILL
    else:
        what, target, sig = "%s to the group" % signal.Signals(group_signal).name, None, group_signal
    what += " %.2f s into training" % delay
    try:
        if target is None:
            os.killpg(job.process.pid, sig)
        else:
            os.kill(target, sig)
    except ProcessLookupError:
        notes.append("the target had already exited")
    fault_time = time.monotonic()

    # 1. The job ends within what the fault allows, plus a bound.
    allowed = {"kill-rank": 10, "stop-rank": args.timeout + args.grace + 10, "term-rank": 15,
               "kill-ddprun": 5, "signal-group": args.grace + 10, "restart": 2 * train_seconds + 60}[fault]
    status = job.wait(allowed)
    ended_after = time.monotonic() - fault_time
    if status is None:
        problems.append("the job had not ended %d s after the fault; still there: %s" % (allowed, describe(run_dir)))
        job.kill_everything()
    # 2. The exit status, and who is named.
    if status is None:
        pass  # nothing more to learn from how it ended
    elif fault in ("kill-rank", "stop-rank", "term-rank"):
        check_named(fault, victim, status, job, problems, notes)
        if fault != "term-rank" and status not in (0, 1):
            problems.append("ddprun exited %s, expected 1 (a failed job)" % status)
    elif fault == "kill-ddprun":
        if status == 0 and "done: test accuracy" in job.out():
            notes.append("finished before the fault")
        elif status != -signal.SIGKILL:
            problems.append("ddprun exited %s, not killed" % status)
    elif fault == "signal-group":
        if status not in (0, 128 + group_signal):
            problems.append("ddprun exited %s after %s, expected %d" % (status, signal.Signals(group_signal).name,
                                                                        128 + group_signal))
    elif fault == "restart":
        if status != 0:
            problems.append("the job did not finish after its restart (exit %s)" % status)
        elif "restarting" in job.err():
            notes.append("restarted")
        if status == 0 and metrics(run_dir) != reference:
            problems.append("after its restart the run ends with other numbers: %s" % metrics(run_dir))
    # 3. Nothing of the run is left (the kill -9 of ddprun relies on the workers' own guards).
    left = wait_until(lambda: not processes(run_dir), 10, 0.05)
    if fault == "kill-ddprun":
        ended_after = time.monotonic() - fault_time  # the job ends when its workers are gone
    if not left:
        problems.append("processes left: %s" % sorted(processes(run_dir)))
        job.kill_everything()
    # 4. The next run resumes from an intact checkpoint and ends with the uninterrupted numbers.
    had_checkpoint = any(name.endswith(".ckpt") for name in os.listdir(run_dir))
    nxt = Job(args, run_dir, "next")
    nxt_status = nxt.wait(2 * train_seconds + 60)
    if nxt_status is None:
        problems.append("the next run had not ended after %d s" % (2 * train_seconds + 60))
        nxt.kill_everything()
    elif nxt_status != 0:
        problems.append("the next run failed (exit %s): %s" % (nxt_status, nxt.err().strip()[-400:]))
    else:
        out, err = nxt.out(), nxt.err()
        if "cannot be used" in out + err:
            problems.append("the next run found a damaged checkpoint: " +
                            re.search(r".*cannot be used.*", out + err).group(0))
        resumed = re.search(r"resumed from \S*checkpoint-0*(\d+)\.ckpt", out)
        if had_checkpoint and not resumed and "already trained all" not in out:
            problems.append("a checkpoint was there, but the next run did not resume from it")
        notes.append("next run: nothing left to do" if "already trained all" in out else
                     "next run resumed from step %s" % resumed.group(1) if resumed else "next run started afresh")
        if metrics(run_dir) != reference:
            problems.append("the next run ends with other numbers:\n      %s\n    uninterrupted:\n      %s"
                            % ("\n      ".join(metrics(run_dir)), "\n      ".join(reference)))
    return Result(fault, what, ended_after, problems, notes)


def table(results):
    print("\n| fault | trials | passed | seconds from the fault to the job's end: median, max | failures |")
    print("|---|---|---|---|---|")
    for fault in FAULTS:
        mine = [r for r in results if r.fault == fault]
        if not mine:
            continue
        ends = [r.ended_after for r in mine if r.ended_after == r.ended_after]
        failed = [r for r in mine if r.problems]
        reasons = "; ".join(sorted({p.split("\n")[0] for r in failed for p in r.problems}))
        print("| %s | %d | %d | %s | %s |" % (
            DESCRIPTIONS[fault], len(mine), len(mine) - len(failed),
            "%.2f, %.2f" % (statistics.median(ends), max(ends)) if ends else "-", reasons or "none"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--seed", type=int, default=None, help="of the faults, moments and ranks (default: random)")
    parser.add_argument("--faults", nargs="+", choices=FAULTS, default=FAULTS)
    parser.add_argument("--timeout", type=int, default=5, help="the trainer's collective timeout, seconds")
    parser.add_argument("--grace", type=int, default=5, help="ddprun's --grace_period, seconds")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--limit-train", type=int, default=1536, help="training images (12 steps per epoch)")
    parser.add_argument("--keep", help="a folder for the trials' runs and logs (default: a temporary one)")
    args = parser.parse_args()
    args.ddprun = os.path.join(args.build, "src", "launcher", "ddprun")
    args.trainer = os.path.join(args.build, "examples", "train_fashion_mnist")
    for path in (args.ddprun, args.trainer):
        if not os.access(path, os.X_OK):
            sys.exit("fault_trials: %s is missing; build it: ninja -C %s ddprun train_fashion_mnist" % (path, args.build))
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    root = os.path.abspath(args.keep or tempfile.mkdtemp(prefix="ddp-fault-trials-"))
    os.makedirs(root, exist_ok=True)
    print("fault trials: %d, seed %d, faults %s; runs in %s" % (args.trials, seed, " ".join(args.faults), root))

    reference_dir = os.path.join(root, "uninterrupted")
    shutil.rmtree(reference_dir, ignore_errors=True)
    job = Job(args, reference_dir, "run")
    pids = wait_until(lambda: len(trainers(reference_dir)) == 2, 60)
    train_start = time.monotonic()
    status = job.wait(600)
    if status != 0 or not pids:
        sys.exit("fault_trials: the uninterrupted run failed (exit %s); see %s" % (status, job.err_path))
    train_seconds = time.monotonic() - train_start
    reference = metrics(reference_dir)
    print("uninterrupted run: %.1f s of training, %d epochs: %s" % (train_seconds, len(reference), reference[-1]))

    results = []
    begin = time.monotonic()
    for i in range(args.trials):
        fault = rng.choice(args.faults)
        r = one_trial(args, i + 1, fault, rng, root, reference, train_seconds)
        results.append(r)
        print("trial %d/%d: %s: ended %.2f s after it; %s: %s" % (
            i + 1, args.trials, r.what, r.ended_after, ", ".join(r.notes) or "-",
            "ok" if not r.problems else "FAILED\n    " + "\n    ".join(r.problems)), flush=True)
        if not r.problems and not args.keep:
            shutil.rmtree(os.path.join(root, "trial-%03d-%s" % (i + 1, fault)), ignore_errors=True)
    failed = [r for r in results if r.problems]
    print("\n%d trials in %.1f min, seed %d: %d passed, %d failed" % (
        len(results), (time.monotonic() - begin) / 60, seed, len(results) - len(failed), len(failed)))
    table(results)
    if failed:
        print("\nthe failed trials' runs and logs are in %s" % root)
        sys.exit(1)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
