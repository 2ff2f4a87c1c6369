"""Checks a timeline of a remote run (bench/gpu/suites/remote_trace.sh, docs/trace.md "Remote
programs"): resnet_train.py --nvtx through the forwarding client, gslice run --remote --trace.

    python3 check_remote_trace.py TRACE.json MIN_STEPS

Prints one line "<PASS|FAIL> <detail>". Checks: a client and a worker process; the worker's GPU
activity from CUPTI with kernels; the clock's uncertainty stated; every worker execution of a
round trip inside its client call within that uncertainty (+1 us of rounding); one flow end per
flow start; two network slices per matched round trip; the client's NVTX "step" ranges (at least
MIN_STEPS) and, on the aligned clock, at least 95% of the worker's kernels after the first step
inside a client "step" range (each step ends with a synchronisation inside it). The detail
gives the uncertainty, round trips and network + queue time per step.
"""
import bisect
import json
import sys


def main():
    t = json.load(open(sys.argv[1]))
    min_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    g = t["otherData"]["gslice"]
    problems = []
    ev = t["traceEvents"]
    client = worker = None
    for e in ev:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            n = e["args"]["name"]
            if "(remote client" in n:
                client = e["pid"]
            if "(slice remote-" in n:
                worker = e["pid"]
    if client is None or worker is None:
        print(f"FAIL client pid {client}, worker pid {worker}: not both processes")
        return 1
    unc = g.get("clock_uncertainty_ns")
    if unc is None:
        problems.append("no clock_uncertainty_ns")
        unc = 0
    slack = unc / 1000 + 1
    notes = {p["pid"]: p.get("gpu_activity", "") for p in g.get("processes", [])}
    if not notes.get(worker, "").startswith("cupti"):
        problems.append(f"worker without CUPTI: {notes.get(worker)}")
    calls, served, starts, ends, network, kernels, steps = {}, {}, [], {}, [], [], []
    for e in ev:
        cat, ph, pid = e.get("cat"), e.get("ph"), e.get("pid")
        if cat == "remote" and ph == "X" and pid == client and "seq" in e.get("args", {}):
            calls[e["args"]["seq"]] = e
        elif cat == "remote" and ph == "X" and pid == worker:
            served[e["args"]["seq"]] = e
        elif cat == "remote" and ph == "s":
            starts.append(e["id"])
        elif cat == "remote" and ph == "f":
            ends[e["id"]] = ends.get(e["id"], 0) + 1
        elif cat == "network":
            network.append(e)
        elif cat == "kernel" and pid == worker:
            kernels.append(e)
        elif cat == "nvtx" and ph == "X" and pid == client and e["name"] == "step":
            steps.append(e)

    def within(a, b, s):
        return a["ts"] >= b["ts"] - s and a["ts"] + a.get("dur", 0) <= b["ts"] + b["dur"] + s

    trips = [c for c in calls.values() if c["args"]["mode"] == "round trip"]
    matched = [c for c in trips if c["args"]["seq"] in served]
    outside = [c for c in matched if not within(served[c["args"]["seq"]], c, slack)]
    if not matched:
        problems.append("no round trip matched to the worker's execution")
    if outside:
        c = outside[0]
        problems.append(f"{len(outside)} of {len(matched)} executions outside their call, e.g. {c['name']} seq "
                        f"{c['args']['seq']}: call {c['ts']:.1f}+{c['dur']:.1f}, worker "
                        f"{served[c['args']['seq']]['ts']:.1f}+{served[c['args']['seq']]['dur']:.1f}")
    unpaired = sum(1 for s in starts if ends.get(s, 0) != 1) + sum(1 for k, n in ends.items() if n != 1)
    if unpaired or len(ends) != len(starts):
        problems.append(f"{unpaired} unpaired flows ({len(starts)} starts, {len(ends)} ends)")
    if len(network) != 2 * len(matched):
        problems.append(f"{len(network)} network slices for {len(matched)} round trips")
    if not kernels:
        problems.append("no GPU kernels from the worker")
    steps.sort(key=lambda e: e["ts"])
    if len(steps) < min_steps:
        problems.append(f"only {len(steps)} client step ranges")
    first = steps[0]["ts"] if steps else 0
    measured = [k for k in kernels if k["ts"] >= first]
    starts_ts = [s["ts"] for s in steps]
    in_step = 0
    for k in measured:
        i = bisect.bisect_right(starts_ts, k["ts"] + 1) - 1
        in_step += 1 if i >= 0 and within(k, steps[i], slack) else 0
    frac = in_step / len(measured) if measured else 0
    if frac < 0.95:
        problems.append(f"only {frac:.1%} of the worker's kernels within a client step range")
    net_us = sum(c["args"].get("network_queue_us", 0) for c in matched)
    n_steps = max(len(steps), 1)
    detail = (f"uncertainty {unc / 1000:.1f} us, {len(steps)} steps, {len(trips)} round trips "
              f"({len(trips) / n_steps:.0f}/step), {len(calls) - len(trips)} sent without waiting, "
              f"network + queue {net_us / 1000 / n_steps:.1f} ms/step "
              f"({net_us / max(len(matched), 1):.1f} us per round trip), {len(kernels)} kernels "
              f"({frac:.1%} within a client step), dropped {g.get('dropped_events')}")
    print(("FAIL " + "; ".join(problems) + " | " if problems else "PASS ") + detail)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
