"""What an opportunistic process's looks on MPS read, from its log (GSLICE_LOG=debug).

  looks_report.py LOG...     one block per log: each guaranteed job's looks (told apart by the
                             floor they imply), at no limit and at lower rates: how many, the
                             mean and spread of its launches beside over alone, and the means
                             over the floor the rate was judged on; the cuts and growth the
                             looks made; and the time the looks' pauses took (LOOK_PAUSE_S each)

Each look ends with the trace line (interpose/compute/mps_controller.cc, EndLook)

  compute: mps: a look: guaranteed job launched B a period beside work at R permille, A alone:
  L of its floor (M +- E over N looks)

and a cut or growth it made, or a cut it undid (the first look at the new rate no higher), with

  compute: mps: guaranteed job at M of its floor by its looks (at most U): rate R -> S permille
  compute: mps: guaranteed job above its floor by its looks (M, at least W): rate R -> S permille
  compute: mps: holding back bought nothing by the looks (M of the floor, P before the cut):
  rate R -> S permille, no cut on looks for H s

(builds before e3b5b73 wrote the growth without ", at least W").

B / A over L is the job's floor; a log of several guaranteed jobs at one floor adds them up.
No GPU, no torch.
"""

import re
import statistics
import sys

# A look's pause: kLookPausePeriods of kControlPeriodNs (mps_controller.h, controller.h).
LOOK_PAUSE_S = 3 * 0.25

LOOK = re.compile(
    r"compute: mps: a look: guaranteed job launched (?P<beside>[0-9]+) a period beside work at "
    r"(?P<rate>[0-9]+) permille, (?P<alone>[0-9]+) alone: (?P<level>[0-9.]+) of its floor "
    r"\((?P<mean>[0-9.]+) \+- (?P<error>[0-9.]+) over (?P<n>[0-9]+) looks\)")
CUT = re.compile(r"compute: mps: guaranteed job at [0-9.]+ of its floor by its looks \(at most [0-9.]+\): "
                 r"rate (?P<from>[0-9]+) -> (?P<to>[0-9]+) permille")
GROW = re.compile(r"compute: mps: guaranteed job above its floor by its looks \([0-9.]+(, at least [0-9.]+)?\): "
                  r"rate (?P<from>[0-9]+) -> (?P<to>[0-9]+) permille")
UNDONE = re.compile(r"compute: mps: holding back bought nothing by the looks \([0-9.]+ of the floor, [0-9.]+ before the cut\): "
                    r"rate (?P<from>[0-9]+) -> (?P<to>[0-9]+) permille")


def parse(lines):
    """The looks, cuts, growth and undone cuts in a log's lines."""
    looks, cuts, grows, undone = [], [], [], []
    for line in lines:
        m = LOOK.search(line)
        if m:
            beside, alone, level = int(m["beside"]), int(m["alone"]), float(m["level"])
            ratio = beside / alone if alone > 0 else None
            looks.append({
                "rate": int(m["rate"]),
                "ratio": ratio,
                "level": level,
                "floor": round(ratio / level, 2) if ratio is not None and level > 0 else None,
                "mean": float(m["mean"]),
                "error": float(m["error"]),
                "n": int(m["n"]),
            })
            continue
        m = CUT.search(line)
        if m:
            cuts.append((int(m["from"]), int(m["to"])))
            continue
        m = GROW.search(line)
        if m:
            grows.append((int(m["from"]), int(m["to"])))
            continue
        m = UNDONE.search(line)
        if m:
            undone.append((int(m["from"]), int(m["to"])))
    return {"looks": looks, "cuts": cuts, "grows": grows, "undone": undone}


def summary(values):
    """n, mean and sample standard deviation (None under two values)."""
    if not values:
        return None
    return {"n": len(values), "mean": statistics.fmean(values),
            "spread": statistics.stdev(values) if len(values) > 1 else None}


def by_floor(looks):
    """Per floor: the looks at no limit and at lower rates, each a summary of the ratio beside
    over alone, and the range of the means over the floor the rate was judged on."""
    out = {}
    for floor in sorted({x["floor"] for x in looks if x["floor"] is not None}):
        mine = [x for x in looks if x["floor"] == floor]
        full = [x for x in mine if x["rate"] >= 1000]
        out[floor] = {
            "looks": len(mine),
            "full": summary([x["ratio"] for x in full]),
            "lower": [(x["rate"], x["ratio"]) for x in mine if x["rate"] < 1000],
            "means": (min(x["mean"] for x in full), max(x["mean"] for x in full)) if full else None,
        }
    return out


def report(name, lines):
    """One log's block of text."""
    p = parse(lines)
    out = [f"{name}: {len(p['looks'])} looks, {len(p['cuts'])} cuts ({len(p['undone'])} undone) and "
           f"{len(p['grows'])} growths by them, {len(p['looks']) * LOOK_PAUSE_S:.2f} s of pauses"]
    for floor, f in by_floor(p["looks"]).items():
        full = f["full"]
        text = "none at no limit"
        if full:
            spread = f", spread {full['spread']:.3f}" if full["spread"] is not None else ""
            text = (f"at no limit {full['n']} looks, beside over alone {full['mean']:.3f}{spread}; "
                    f"means judged {f['means'][0]:.3f}-{f['means'][1]:.3f} of the floor")
        lower = "; ".join(f"{r} permille {x:.3f}" for r, x in f["lower"])
        out.append(f"  floor {floor:.2f}: {f['looks']} looks; {text}" + (f"; lower rates: {lower}" if lower else ""))
    for a, b in p["cuts"]:
        out.append(f"  cut {a} -> {b} permille")
    for a, b in p["undone"]:
        out.append(f"  undone {a} -> {b} permille")
    return "\n".join(out)


def main(argv):
    if not argv:
        sys.stderr.write(__doc__)
        return 2
    for path in argv:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                print(report(path, f))
        except OSError as e:
            print(f"looks_report.py: {path}: {e.strerror}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
