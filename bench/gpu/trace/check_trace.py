"""Checks a timeline of resnet_train.py --nvtx (bench/gpu/suites/trace.sh).

    python3 check_trace.py TRACE.json

Prints one line "<PASS|FAIL> <detail>": the trace parses as docs/trace.md says, has GPU
activity from CUPTI, NVTX "step" ranges each holding "forward", "backward" and "optimizer" on
one thread, kernel launches inside "forward"/"backward"/"optimizer", and (each step ending
with a synchronisation inside its range) at least 95% of the GPU kernels of the measured steps
within a "step" range.
"""
import json
import sys


def main():
    t = json.load(open(sys.argv[1]))
    g = t["otherData"]["gslice"]
    problems = []
    if t.get("displayTimeUnit") != "ns" or g.get("version") != 1:
        problems.append("not a version 1 gslice trace")
    notes = [p.get("gpu_activity", "") for p in g.get("processes", [])]
    if not any(n.startswith("cupti") for n in notes):
        problems.append(f"no CUPTI: {notes}")
    ev = t["traceEvents"]
    by_cat = {}
    for e in ev:
        by_cat.setdefault(e.get("cat", e.get("ph")), []).append(e)
    ranges = [e for e in by_cat.get("nvtx", []) if e["ph"] == "X"]
    steps = sorted((e for e in ranges if e["name"] == "step"), key=lambda e: e["ts"])
    inner = [e for e in ranges if e["name"] in ("forward", "backward", "optimizer")]
    if len(steps) < 10:
        problems.append(f"only {len(steps)} step ranges")

    def within(a, b):
        return a["ts"] >= b["ts"] - 1 and a["ts"] + a.get("dur", 0) <= b["ts"] + b["dur"] + 1

    nested = sum(1 for i in inner if any(within(i, s) and i["tid"] == s["tid"] for s in steps))
    if inner and nested < len(inner):
        problems.append(f"{len(inner) - nested} of {len(inner)} inner ranges outside a step")
    launches = [e for e in by_cat.get("api", []) if e["name"].startswith("cuLaunch")]
    launched_inside = sum(1 for l in launches if any(within(l, i) and l["tid"] == i["tid"] for i in inner))
    kernels = by_cat.get("kernel", [])
    if not kernels:
        problems.append("no GPU kernels")
    first = steps[0]["ts"] if steps else 0
    measured = [k for k in kernels if k["ts"] >= first]
    in_step = sum(1 for k in measured if any(within(k, s) for s in steps))
    frac = in_step / len(measured) if measured else 0
    if frac < 0.95:
        problems.append(f"only {frac:.1%} of kernels within a step range")
    detail = (f"{len(steps)} steps, {len(inner)} inner ranges, {len(launches)} launches "
              f"({launched_inside} inside forward/backward/optimizer), {len(kernels)} kernels "
              f"({frac:.1%} within a step), {len(by_cat.get('memcpy', []))} copies, "
              f"dropped {g.get('dropped_events')}, {notes[0] if notes else 'no process'}")
    print(("FAIL " + "; ".join(problems) + " | " if problems else "PASS ") + detail)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
