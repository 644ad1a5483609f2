#!/usr/bin/env python3
"""What one DDP step's GPU timeline shows: reads a Chrome trace written by LibTorch's profiler
(ddp_step_bench --trace, PyTorch's torch.profiler export) and says, for the device work, how long
each CUDA stream was busy, which stream computed (the one with the most kernel time), and how
much of the other streams' work (DDP's bucket copies and all-reduces, NCCL's kernels) ran while
the compute stream was busy, i.e. overlapped with backward, against how much ran with it idle.

    python3 bench/gpu_trace_summary.py TRACE.json [--markdown]

Prints one line per stream and a verdict line; --markdown prints a table row per stream instead.
Exit status 0, or 1 when the trace cannot be read or holds no GPU work (a CPU-only trace)."""
import argparse
import json
import sys

# Kineto's categories of device work: kernels, copies and fills, each on the stream that ran it.
DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}


def device_events(trace):
    """(stream, start us, end us, name) of every complete device event."""
    events = trace.get("traceEvents", trace) if isinstance(trace, dict) else trace
    out = []
    for e in events if isinstance(events, list) else []:
        if not isinstance(e, dict) or e.get("ph") != "X" or e.get("cat") not in DEVICE_CATEGORIES:
            continue
        try:
            start, dur = float(e["ts"]), float(e.get("dur", 0))
        except (KeyError, TypeError, ValueError):
            continue
        args = e.get("args") or {}
        stream = args.get("stream", e.get("tid"))
        out.append((str(stream), start, start + max(dur, 0.0), str(e.get("name", ""))))
    return out


def union(intervals):
    """The intervals merged: sorted, disjoint."""
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def length(intervals):
    return sum(end - start for start, end in intervals)


def overlap(a, b):
    """How long the disjoint sorted intervals a and b are both busy."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def summarize(events):
    """Per stream: busy time, event count, the names that take most of it; the compute stream; and
    for the other streams, the time they overlap the compute stream's work and the time they do not."""
    streams = {}
    for stream, start, end, name in events:
        s = streams.setdefault(stream, {"intervals": [], "names": {}})
        s["intervals"].append((start, end))
        s["names"][name] = s["names"].get(name, 0.0) + (end - start)
    for s in streams.values():
        s["busy"] = union(s["intervals"])
    compute = max(streams, key=lambda k: length(streams[k]["busy"]))
    span = (min(e[1] for e in events), max(e[2] for e in events))
    rows = []
    for stream, s in sorted(streams.items(), key=lambda kv: -length(kv[1]["busy"])):
        busy = length(s["busy"])
        hidden = busy if stream == compute else overlap(s["busy"], streams[compute]["busy"])
        top = sorted(s["names"].items(), key=lambda kv: -kv[1])[:3]
        rows.append({"stream": stream, "compute": stream == compute, "events": len(s["intervals"]), "busy_us": busy,
                     "overlapped_us": hidden, "top": [(name[:60], t) for name, t in top]})
    return {"span_us": span[1] - span[0], "compute": compute, "rows": rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    try:
        with open(args.trace) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("gpu_trace_summary: cannot read %s: %s" % (args.trace, e))
    events = device_events(trace)
    if not events:
        print("gpu_trace_summary: %s holds no GPU work (kernels, copies): a CPU-only trace?" % args.trace,
              file=sys.stderr)
        return 1
    s = summarize(events)
    others = [r for r in s["rows"] if not r["compute"]]
    side = sum(r["busy_us"] for r in others)
    hidden = sum(r["overlapped_us"] for r in others)
    for r in s["rows"]:
        role = "compute" if r["compute"] else "side"
        what = ", ".join("%s %.0f us" % (name, t) for name, t in r["top"])
        if args.markdown:
            print("| stream %s (%s) | %d events, busy %.2f ms%s; most: %s |" % (
                r["stream"], role, r["events"], r["busy_us"] / 1e3,
                "" if r["compute"] else ", %.0f%% beside compute" % (100 * r["overlapped_us"] / max(r["busy_us"], 1e-9)),
                what))
        else:
            print("stream %s (%s): %d events, busy %.3f ms%s; most: %s" % (
                r["stream"], role, r["events"], r["busy_us"] / 1e3,
                "" if r["compute"] else ", of it %.3f ms beside the compute stream's work" % (r["overlapped_us"] / 1e3),
                what))
    verdict = ("the GPU's work spans %.3f ms; the side streams are busy %.3f ms, %.0f%% of it beside the compute "
               "stream's (hidden), %.3f ms with it idle (exposed)" % (
                   s["span_us"] / 1e3, side / 1e3, 100 * hidden / side if side else 0, (side - hidden) / 1e3))
    print(("| overlap | %s |" if args.markdown else "%s") % verdict)
    return 0


if __name__ == "__main__":
    sys.exit(main())
