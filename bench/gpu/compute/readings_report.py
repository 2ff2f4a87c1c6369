"""What a guaranteed process on MPS read, period by period, from its log (GSLICE_LOG=debug).

  readings_report.py LOG...     one block per log: the published readings, those by launches
                                and their kernels' bound, where the job launched in fewer or
                                more of its passes than the launch reading needs, those by the
                                host's waits, why it wanted baselines, the samples left out on
                                a dry stream, the samples alone over 3x their kernel's
                                baseline, its launch rate against alone where traced, and the
                                job's speed by its host's waits on the GPU from the periods'
                                waits (by_waits)

Each period the gate thread of a guaranteed process beside opportunistic work on MPS traces

  compute: beside opportunistic work at least X of its speed alone, by its launches|host's
  waits|kernels' times[; wants a baseline|time alone: WHY] (N kernels timed alone[, D samples on a dry
  stream left out[, S alone over Fx their baseline]]; WAITS; launches: A ms alone in P% of
  passes, B ms beside in Q%[, kernels' times at least K][, no fresh rate alone][, launch rate R])

(interpose/compute/gate_thread.cc). A reading of 0.000 is a period with none (a baseline asked
for before any): counted, left out of the figures. No GPU, no torch.
"""

import re
import statistics
import sys

# The share of passes a job must launch in, beside as alone, to be read by its launches
# (kSaturatedShare in interpose/compute/progress_clock.h).
SATURATED_PERCENT = 85

LINE = re.compile(
    r"beside opportunistic work at least (?P<value>[0-9.]+) of its speed alone, "
    r"by its (?P<by>launches|host's waits|kernels' times)(?:; wants (?:a baseline|time alone): (?P<why>[a-z ]+?))? "
    r"\((?P<kernels>[0-9]+) kernels timed alone(?:, (?P<dry>[0-9]+) samples on a dry stream left out)?"
    r"(?:, (?P<slow>[0-9]+) alone over [0-9.]+x their baseline)?; "
    r"(?P<waits>[^;]*); launches: (?P<alone_ms>[0-9]+) ms alone in (?P<alone_pct>[0-9]+)% of passes, "
    r"(?P<beside_ms>[0-9]+) ms beside in (?P<beside_pct>[0-9]+)%"
    r"(?:, kernels' times at least (?P<bound>[0-9.]+))?(?:, no fresh rate alone)?"
    r"(?:, launch rate (?P<rate>[0-9.]+))?")


WAITED = re.compile(r"^the host waited (?P<ms>[0-9.]+) ms$")


def waited_ms(words):
    """The host's waits on the GPU in a period, ms, or None (no waiting call, or a full queue)."""
    m = WAITED.match(words.strip())
    return float(m["ms"]) if m else None


def by_waits(periods):
    """The job's speed beside opportunistic work by its host's waits on the GPU: its share of
    time not waiting beside over alone, (1 - w_beside) / (1 - w_alone), for a job whose host
    work per step does not move (a training loop). Beside: periods wholly beside (no time alone,
    200 ms or more beside); alone: periods at least half alone in which the job launched in
    SATURATED_PERCENT of passes or more (the pauses; a job starting up is left out). None where
    either is missing."""
    beside = [p for p in periods if p["waited_ms"] is not None and p["alone_ms"] == 0 and p["beside_ms"] >= 200]
    alone = [p for p in periods if p["waited_ms"] is not None and p["alone_ms"] >= p["beside_ms"]
             and p["alone_ms"] > 0 and p["alone_pct"] >= SATURATED_PERCENT]
    if not beside or not alone:
        return None
    w_beside = sum(p["waited_ms"] for p in beside) / sum(p["beside_ms"] for p in beside)
    w_alone = sum(p["waited_ms"] for p in alone) / sum(p["alone_ms"] + p["beside_ms"] for p in alone)
    return {"beside": w_beside, "beside_periods": len(beside), "alone": w_alone, "alone_periods": len(alone),
            "speed": (1 - w_beside) / (1 - w_alone) if w_alone < 1 else None}


def parse(lines):
    """The periods' readings in a log's lines: a dict per traced period."""
    out = []
    for line in lines:
        m = LINE.search(line)
        if not m:
            continue
        out.append({
            "value": float(m["value"]),
            "by_launches": m["by"] == "launches",
            "by_waits": m["by"] == "host's waits",
            "why": m["why"],
            "dry": int(m["dry"]) if m["dry"] is not None else None,
            "slow_alone": int(m["slow"]) if m["slow"] is not None else None,
            "beside_pct": int(m["beside_pct"]),
            "bound": float(m["bound"]) if m["bound"] is not None else None,
            "launch_rate": float(m["rate"]) if m["rate"] is not None else None,
            "waited_ms": waited_ms(m["waits"]),
            "alone_ms": int(m["alone_ms"]),
            "alone_pct": int(m["alone_pct"]),
            "beside_ms": int(m["beside_ms"]),
        })
    return out


def spread(values):
    """n, mean and p10 / p50 / p90 of values (nearest rank), or None when there are none."""
    if not values:
        return None
    v = sorted(values)
    n = len(v)
    return {"n": n, "mean": statistics.fmean(v), "p10": v[n // 10], "p50": v[n // 2], "p90": v[9 * n // 10]}


def summarize(periods):
    read = [p for p in periods if p["value"] > 0]
    by_launches = [p for p in read if p["by_launches"]]
    why = {}
    for p in periods:
        if p["why"]:
            why[p["why"]] = why.get(p["why"], 0) + 1
    dry = [p["dry"] for p in periods if p["dry"] is not None]
    slow = [p["slow_alone"] for p in periods if p.get("slow_alone") is not None]
    below = [p for p in by_launches if p["beside_pct"] < SATURATED_PERCENT]
    return {
        "periods": len(periods),
        "published": spread([p["value"] for p in read]),
        "by_launches": spread([p["value"] for p in by_launches]),
        "by_host_waits": spread([p["value"] for p in read if p.get("by_waits")]),
        "launch_rate": spread([p["launch_rate"] for p in periods if p.get("launch_rate") is not None]),
        "their_bound": spread([p["bound"] for p in by_launches if p["bound"] is not None]),
        "by_launches_unsaturated": spread([p["value"] for p in below]),
        "their_bound_unsaturated": spread([p["bound"] for p in below if p["bound"] is not None]),
        "wanted_baseline": why,
        "dry_per_period": statistics.fmean(dry) if dry else None,
        "slow_alone": {"samples": sum(slow), "periods": sum(1 for x in slow if x > 0)} if slow else None,
        "by_waits": by_waits(periods),
    }


def text(s):
    if s is None:
        return "none"
    return f"{s['n']} periods, mean {s['mean']:.3f} (p10 {s['p10']:.3f} / p50 {s['p50']:.3f} / p90 {s['p90']:.3f})"


def report(name, summary):
    lines = [f"{name}: {summary['periods']} periods traced",
             f"  published:          {text(summary['published'])}",
             f"  by launches:        {text(summary['by_launches'])}",
             f"    their kernels:    {text(summary['their_bound'])}",
             f"  by launches under {SATURATED_PERCENT}% of passes beside: {text(summary['by_launches_unsaturated'])}",
             f"    their kernels:    {text(summary['their_bound_unsaturated'])}",
             f"  by its host's waits: {text(summary['by_host_waits'])}",
             f"  launch rate (traced where not the reading): {text(summary['launch_rate'])}"]
    why = summary["wanted_baseline"]
    lines.append("  wanted a baseline:  " + (", ".join(f"{k} {why[k]}" for k in sorted(why)) if why else "never"))
    dry = summary["dry_per_period"]
    lines.append("  left out on a dry stream: " + ("not traced" if dry is None else f"{dry:.1f} samples a period"))
    slow = summary["slow_alone"]
    lines.append("  alone, over 3x their kernel's baseline: " +
                 ("not traced" if slow is None else f"{slow['samples']} samples in {slow['periods']} periods"))
    w = summary["by_waits"]
    lines.append("  host waits on the GPU: " + (
        "too few periods wholly beside or mostly alone" if w is None else
        f"{w['beside']:.1%} of the time beside ({w['beside_periods']} periods), {w['alone']:.1%} alone "
        f"({w['alone_periods']} periods): by its waits {w['speed']:.3f}"))
    return "\n".join(lines)


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    status = 0
    for path in argv:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                periods = parse(f)
        except OSError as e:
            print(f"readings_report.py: {path}: {e.strerror}", file=sys.stderr)
            status = 1
            continue
        print(report(path, summarize(periods)))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
