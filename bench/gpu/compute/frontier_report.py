"""The harvest frontier's figures from frontier.py's JSON, and whether gslice meets its goal.

  frontier_report.py FRONTIER.json...         markdown body of bench/results/compute-frontier-DATE.md
  frontier_report.py --table FRONTIER.json... RESULT lines for bench/gpu/run, then a short text table
  frontier_report.py --compare A:B FRONTIER.json...
                                              configuration A against B round by round (B may be
                                              solo), each pair's guaranteed and opportunistic job

Several JSON files are lanes of one plan (frontier.py's FRONTIER_LANES, run at once on the GPUs
of one machine): each configuration is judged against its own lane's solo runs.

Figures, per pair, against the mean of the solo runs before and after (each job alone):
  training pair  guaranteed steps/s × solo; opportunistic steps/s × solo
  latency pair   the server's p99 and p50 at its fixed request rate × solo (lower is better;
                 its level is solo p99 / p99); opportunistic steps/s × solo
The goal at a protection level P: gslice's guaranteed job is kept at P (training: speed ≥ P;
latency: p99 ≤ p99_bound(P) × solo, +5% at 0.97), and its opportunistic throughput is at least
that of the best plain configuration (time-slicing, or MPS at any thread percentage and
client priority) that keeps the guaranteed job at P by the same test. A miss says by how much,
and whether that is within the solo runs' drift (after / before). Interleaved runs also set
each gslice configuration beside plain MPS at priority 1 round by round (side_by_side), the
comparison a call resolves best. No torch, no GPU.
"""

import argparse
import json
import math
import statistics
import sys

# The latency pair's p99 allowance grows by this much per point of speed a protection level
# gives up: +5% at 0.97 (the goal for a server beside opportunistic work), +16.7% at 0.90,
# +33.3% at 0.80.
LATENCY_SLACK = 0.05 / 0.03
PLAIN = ("timeslice", "mps")  # the configurations gslice is compared against
PAIR_LABELS = {"train": "training pair (ResNet-50 guaranteed, BERT-base training opportunistic)",
               "latency": "latency pair (BERT-base inference server guaranteed, ResNet-50 training opportunistic)",
               "gpu": "GPU-bound pair (bf16 matrix products, both)"}


def p99_bound(level):
    return 1.0 + (1.0 - level) * LATENCY_SLACK


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def ratio(x, y):
    return None if x is None or not y else x / y


def lane_of(c):
    return c.get("lane", 0)


def configs(doc, pair, lane=None):
    return [c for c in doc.get("configs", []) if c["pair"] == pair and (lane is None or lane_of(c) == lane)]


def lanes_of(doc, pair):
    return sorted({lane_of(c) for c in configs(doc, pair)}) or [0]


def row_label(doc, pair, r):
    """A row's configuration, with its lane where the pair ran in several."""
    return f"{r['config']} (lane {r['lane']})" if len(lanes_of(doc, pair)) > 1 else r["config"]


def repeats_key(doc):
    """What makes documents repeats of one run: an interleaved run's lane (stated, not its
    place among the files) and its configurations. None: not one to pool."""
    if "lane" not in doc or not doc.get("settings", {}).get("interleave"):
        return None
    return doc["lane"], frozenset((c["pair"], c["config"]) for c in doc.get("configs", []))


def pooled_role(parts):
    """A job's figures over several calls of one interleaved run: the rounds in call order,
    counts summed, every other figure the calls' mean weighted by their rounds (a server's p99
    and p50 too: each call keeps only its own percentiles, not its requests)."""
    out = {"rounds": [x for p in parts for x in p.get("rounds") or []]}
    weights = [len(p.get("rounds") or []) or 1 for p in parts]
    for k in {k for p in parts for k in p} - {"rounds"}:
        vals = [(p.get(k), w) for p, w in zip(parts, weights)]
        if k == "finite":
            out[k] = all(v is not False for v, _ in vals)
        elif k == "requests":
            out[k] = sum(v or 0 for v, _ in vals)
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v, _ in vals):
            out[k] = sum(v * w for v, w in vals) / sum(w for _, w in vals)
        else:
            out[k] = next((v for v, _ in vals if v is not None), None)
    return out


def pool_calls(docs):
    """Calls that ran the same interleaved run (the same lane and configurations; a plan too
    long for one call, FRONTIER_INTERLEAVE rounds in each) as one: each configuration's
    rounds in call order against each call's own solo rounds, its figures pooled
    (pooled_role), the rounds and seconds summed. A configuration that failed in any call
    stays failed."""
    first = docs[0]
    out = dict(first)
    st = dict(first.get("settings", {}))
    st["interleave"] = sum(d["settings"]["interleave"] for d in docs)
    st["window_s"] = sum(d["settings"].get("window_s", 0) for d in docs)
    out["settings"] = st
    merged = []
    for c in first.get("configs", []):
        same = [next(x for x in d["configs"] if x["pair"] == c["pair"] and x["config"] == c["config"]) for d in docs]
        m = dict(c)
        bad = next((x for x in same if x.get("status") != "ok"), None)
        if bad is not None:
            m["status"], m["error"] = bad.get("status"), bad.get("error")
        for role in {k for x in same for k in ("g", "o") if isinstance(x.get(k), dict)}:
            m[role] = pooled_role([x.get(role) or {} for x in same])
        if all(isinstance(x.get("gpu"), dict) for x in same):
            m["gpu"] = pooled_role([x["gpu"] for x in same])
            m["gpu"].pop("rounds", None)
        merged.append(m)
    out["configs"] = merged
    out["runs"] = [dict(r, call=k + 1) for k, d in enumerate(docs) for r in d.get("runs", [])]
    out["wall_s"] = sum(d.get("wall_s") or 0 for d in docs)
    # Each call measured the server's service time alone and set its request rate by it.
    out["service_ms"] = {f"{pair}, call {k + 1}": v for k, d in enumerate(docs) for pair, v in (d.get("service_ms") or {}).items()}
    out["calls"] = [{"started": d.get("started"), "gpu": d.get("gpu"), "wall_s": d.get("wall_s")} for d in docs]
    return out


def merge(docs):
    """Lanes' documents as one: every configuration and run keeps its lane (its own solo runs);
    the rest is the first lane's, the wall time the longest. Documents of one lane that repeat
    one interleaved run (repeats_key) are pooled first (pool_calls)."""
    groups = {}
    for i, d in enumerate(docs):
        key = repeats_key(d)
        groups.setdefault(("alone", i) if key is None else key, []).append(d)
    docs = [g[0] if len(g) == 1 else pool_calls(g) for g in groups.values()]
    if len(docs) == 1:
        return docs[0]
    out = dict(docs[0])
    out["configs"] = [dict(c, lane=d.get("lane", i)) for i, d in enumerate(docs) for c in d.get("configs", [])]
    out["runs"] = [dict(r, lane=d.get("lane", i)) for i, d in enumerate(docs) for r in d.get("runs", [])]
    out["wall_s"] = max((d.get("wall_s") or 0) for d in docs)
    out["service_ms"] = {}
    for i, d in enumerate(docs):
        for k, v in (d.get("service_ms") or {}).items():
            out["service_ms"][f"{k}, lane {d.get('lane', i)}"] = v
    out["lanes"] = [{"lane": d.get("lane", i), "gpu": d.get("gpu"), "started": d.get("started"), "wall_s": d.get("wall_s")}
                    for i, d in enumerate(docs)]
    return out


def value(c, role, field):
    return (c.get(role) or {}).get(field) if c and c.get("status") == "ok" else None


def interleaved(doc):
    """Whether the configurations ran interleaved in one run a pair (frontier.py's
    FRONTIER_INTERLEAVE): the solo figures are then the same run's solo phases."""
    return bool(doc.get("settings", {}).get("interleave"))


def solo(doc, pair, lane=0):
    """The solo runs of a lane: each job's figure before and after, their mean (the base) and
    the drift (after / before). Training: steps/s; the server: p99 and p50 in ms. Interleaved:
    the base is every solo phase of the run, before and after its first and last round."""
    by = {c["config"]: c for c in configs(doc, pair, lane)}
    fields = {"g": ("p99_ms", "p50_ms") if pair == "latency" else ("steps_per_s",), "o": ("steps_per_s",)}
    out = {}
    for role, names in fields.items():
        for f in names:
            if "solo" in by:
                c = by["solo"]
                rounds = (c.get(role) or {}).get("rounds") or [] if f != "p50_ms" else []
                b, a = (rounds[0], rounds[-1]) if len(rounds) >= 2 else (None, None)
                out[(role, f)] = {"before": b, "after": a, "base": value(c, role, f), "drift": ratio(a, b)}
                continue
            b, a = value(by.get("solo-before"), role, f), value(by.get("solo-after"), role, f)
            out[(role, f)] = {"before": b, "after": a, "base": mean([b, a]), "drift": ratio(a, b)}
    return out


# A solo round's server p99 over the median of the run's other solo rounds above which the
# report says the lane's p99 ratios rest on that round (one hiccup in a short phase).
SOLO_OUTLIER = 3.0


def solo_outliers(doc, pair):
    """The latency pair's interleaved solo rounds whose p99 is over SOLO_OUTLIER times the
    median of the others, as (lane, round number from 1, its p99, the others' median)."""
    if pair != "latency" or not interleaved(doc):
        return []
    out = []
    for c in configs(doc, pair):
        if c["config"] != "solo":
            continue
        rounds = (c.get("g") or {}).get("rounds") or []
        for i, x in enumerate(rounds):
            others = [y for j, y in enumerate(rounds) if j != i and y]
            if x and len(others) >= 2 and x > SOLO_OUTLIER * statistics.median(others):
                out.append((lane_of(c), i + 1, x, statistics.median(others)))
    return out


def paired(xs, ys):
    """The mean of round-by-round differences xs[k] - ys[k] and its standard error, or None
    for fewer than two rounds: two configurations of one interleaved run are seconds to
    minutes apart in each round, so the host's drift between rounds drops out of their
    difference."""
    d = [x - y for x, y in zip(xs, ys)]
    if len(d) < 2 or len(xs) != len(ys):
        return None
    return statistics.mean(d), statistics.stdev(d) / math.sqrt(len(d)), len(d)


def paired_text(p, against):
    """A paired difference as a miss's note, saying whether it is within two standard errors."""
    mean_d, se, n = p
    within = " (within two standard errors)" if abs(mean_d) <= 2 * se else ""
    return f"; round by round {mean_d:+.3f} ± {se:.3f} against {against} over {n} rounds{within}"


def round_ratios(c, base, role, server):
    """An interleaved configuration's figure over the solo phase's, round by round (the
    server: solo p99 over its p99); [] where the run was not interleaved."""
    mine, solos = (c.get(role) or {}).get("rounds") or [], (base.get(role) or {}).get("rounds") or []
    if server:
        return [y / x for x, y in zip(mine, solos) if x and y]
    return [x / y for x, y in zip(mine, solos) if x and y]


def rows(doc, pair):
    """Every non-solo configuration with its figures against its lane's solo base."""
    bases = {lane: solo(doc, pair, lane) for lane in lanes_of(doc, pair)}
    solo_cfg = {lane_of(c): c for c in configs(doc, pair) if c["config"] == "solo"}
    out = []
    for c in configs(doc, pair):
        if c["kind"] == "solo":
            continue
        base = bases[lane_of(c)]
        r = {k: c.get(k) for k in ("config", "kind", "protect", "mps_pct", "mps_prio", "gslice_prio", "status", "error",
                                     "run")}
        r["lane"] = lane_of(c)
        s = solo_cfg.get(lane_of(c), {})
        r["g_rounds"] = round_ratios(c, s, "g", pair == "latency")
        r["o_rounds"] = round_ratios(c, s, "o", False)
        r["o"] = ratio(value(c, "o", "steps_per_s"), base[("o", "steps_per_s")]["base"])
        if pair == "latency":
            r["p99_ms"], r["p50_ms"] = value(c, "g", "p99_ms"), value(c, "g", "p50_ms")
            r["p99"] = ratio(r["p99_ms"], base[("g", "p99_ms")]["base"])
            r["p50"] = ratio(r["p50_ms"], base[("g", "p50_ms")]["base"])
            r["g"] = None if not r["p99"] else 1.0 / r["p99"]
        else:
            r["g"] = ratio(value(c, "g", "steps_per_s"), base[("g", "steps_per_s")]["base"])
        out.append(r)
    return out


def kept(pair, r, level):
    """Whether configuration r keeps the guaranteed job at `level` (None: not measured)."""
    if pair == "latency":
        return None if r["p99"] is None else r["p99"] <= p99_bound(level) + 1e-9
    return None if r["g"] is None else r["g"] >= level - 1e-9


def drift_of(doc, pair, role, lane=0):
    """|after / before - 1| of the guaranteed job's figure (the server's p99) or the
    opportunistic job's in a lane, or None."""
    f = ("p99_ms" if pair == "latency" else "steps_per_s") if role == "g" else "steps_per_s"
    d = solo(doc, pair, lane)[(role, f)]["drift"]
    return None if d is None else abs(d - 1.0)


def frontier(doc, pair):
    """Per protection level and gslice mode (time-sliced, and on MPS where it ran): gslice's
    row, the best plain row that keeps the guaranteed job at the level, the verdict and the
    misses. The levels are those of the gslice configurations in the JSON (or its settings)."""
    rs = rows(doc, pair)
    levels = doc.get("settings", {}).get("protect") or sorted({r["protect"] for r in rs if r["protect"]}, reverse=True)
    plain = [r for r in rs if r["kind"] in PLAIN and r["status"] == "ok"]
    out = []
    for level in levels:
        keepers = [r for r in plain if kept(pair, r, level) and r["o"] is not None]
        # A mode: time-sliced or on MPS, and the opportunistic client priority a run set over
        # gslice's (FRONTIER_GSLICE_PRIO; None: gslice's own).
        modes = sorted({(r["kind"], r.get("gslice_prio")) for r in rs if r["kind"] in ("gslice", "gslice-mps")},
                       key=lambda m: (m[0], -1 if m[1] is None else m[1])) or [("gslice", None)]
        for kind, q in modes:
            g = next((r for r in rs if r["kind"] == kind and r.get("gslice_prio") == q and r["protect"] is not None
                      and abs(r["protect"] - level) < 1e-9), None)
            # With the configurations split over lanes (GPUs), the best may be in another lane
            # than gslice's: the best of gslice's own lane is named beside it. A configuration
            # that ran in gslice's lane too (plain MPS at priority 1 runs in every part) is
            # taken from there: the same GPU and rounds, not another lane's.
            lane = None if g is None else g["lane"]
            mine = [r for r in keepers if r["lane"] == lane]
            local = max(mine, key=lambda r: r["o"]) if mine else None
            ran_here = {r["config"] for r in plain if r["lane"] == lane}
            theirs = [r for r in keepers if r["lane"] == lane or r["config"] not in ran_here]
            best = max(theirs, key=lambda r: r["o"]) if theirs else None
            out.append(verdict(doc, pair, level, kind + ("" if q is None else f"-p{q}"), g, best, local))
    return out


def verdict(doc, pair, level, mode, g, best, local=None):
    """gslice's row g at a level against the best plain row that keeps it; local: the best
    of g's own lane, named where best ran in another."""
    v = {"pair": pair, "level": level, "mode": mode, "gslice": g, "best": best, "met": None, "misses": []}
    if g is None or g["status"] != "ok":
        why = "not run" if g is None else f"{g['status']}: {g.get('error') or ''}".strip()
        v["misses"].append(f"gslice {why}")
        return v
    g_ok, misses = kept(pair, g, level), []
    dg = drift_of(doc, pair, "g", g["lane"])
    # Against a plain configuration of another lane, either lane's drift may explain a gap.
    drifts = [x for x in (drift_of(doc, pair, "o", g["lane"]), best and drift_of(doc, pair, "o", best["lane"]))
              if x is not None]
    do = max(drifts) if drifts else None
    if interleaved(doc):  # the round-by-round difference says what the noise is, not the drift
        dg = do = None

    def within(amount, drift):
        return f" (within the solo runs' drift of {drift:.1%})" if drift is not None and amount <= drift else ""

    if g_ok is None:
        misses.append("guaranteed job not measured (no solo base)")
    elif not g_ok:
        if pair == "latency":
            over = g["p99"] - p99_bound(level)
            # Round by round as the rounds are kept: solo p99 over the configuration's, against
            # the level in those terms (the p99 of a phase of some hundreds of requests is some
            # of its slowest few, and moves a lot from round to round).
            rounds = g.get("g_rounds") or []
            p = paired(rounds, [1.0 / p99_bound(level)] * len(rounds))
            misses.append(f"server p99 {g['p99']:.3f}× solo, over the {p99_bound(level):.3f}× allowed by "
                          f"{over * 100:.1f} points{within(over, dg)}"
                          + (paired_text(p, f"the level ({1.0 / p99_bound(level):.3f} of solo's p99)") if p else ""))
        else:
            short = level - g["g"]
            p = paired(g.get("g_rounds") or [], [level] * len(g.get("g_rounds") or []))
            misses.append(f"guaranteed {g['g']:.3f}× solo, short of {lv(level)} by {short:.3f}{within(short, dg)}"
                          + (paired_text(p, "the level") if p else ""))
    harvest_ok = True
    if best is not None:
        if g["o"] is None:
            harvest_ok = False
            misses.append("opportunistic job not measured (no solo base)")
        elif g["o"] < best["o"] - 1e-9:
            harvest_ok = False
            short = best["o"] - g["o"]
            p = paired(g.get("o_rounds") or [], best.get("o_rounds") or [])
            misses.append(f"opportunistic {g['o']:.3f}× solo, short of {best['config']}'s {best['o']:.3f} by "
                          f"{short:.3f} ({short / best['o']:.0%} less){within(short, do)}"
                          + (paired_text(p, best["config"]) if p else "") + lane_text(g, best, local))
    v["met"] = bool(g_ok) and harvest_ok
    v["misses"] = misses
    return v


def lane_text(g, best, local):
    """Where gslice and the best plain configuration ran in different lanes: that, and the best
    of gslice's own lane (against its own solo phases and the same GPU)."""
    if best.get("lane") == g.get("lane"):
        return ""
    text = f"; across lanes ({best['config']} in lane {best['lane']}, gslice in lane {g['lane']}"
    if local is None:
        return text + ", where no plain configuration kept the level)"
    return text + f"; in gslice's lane {local['config']} kept it at {local['o']:.3f})"


def lv(level):
    """A protection level as frontier.py names it: two decimals unless it has more."""
    two = f"{level:.2f}"
    return two if float(two) == level else repr(level)


def spread(xs):
    """Round-by-round figures as text: each, in order."""
    return ", ".join(f"{x:.2f}" for x in xs) if xs else "n/a"


def f3(x):
    return "n/a" if x is None else f"{x:.3f}"


def guaranteed_text(pair, r):
    if pair == "latency":
        if r.get("p99") is None:
            return "n/a"
        return f"p99 {r['p99_ms']:.2f} ms ({r['p99']:.3f}×), p50 {r['p50_ms']:.2f} ms ({f3(r['p50'])}×)"
    return f3(r.get("g"))


def best_text(pair, b):
    if b is None:
        return "none keeps it"
    g = f"p99 {b['p99']:.3f}×" if pair == "latency" else f"{b['g']:.3f}"
    return f"{b['config']}: {g} / {b['o']:.3f}"


def gslice_text(pair, g):
    if g is None:
        return "not run"
    if g["status"] != "ok":
        return g["status"]
    gt = f"p99 {g['p99']:.3f}×" if pair == "latency" and g["p99"] is not None else f3(g["g"])
    return f"{gt} / {f3(g['o'])}"


def status_text(c):
    return c["status"] if c["status"] == "ok" else f"{c['status']}: {(c.get('error') or '')[:120]}"


def pairs(doc):
    return [p for p in doc.get("settings", {}).get("pairs", []) if p in PAIR_LABELS] or sorted(
        {c["pair"] for c in doc.get("configs", [])})


def result_lines(doc):
    out = [f"RESULT frontier.gpu INFO {doc.get('gpu', '?')}, driver {doc.get('driver', '?')}; "
           f"{doc.get('software', '')}; wall {doc.get('wall_s', '?')} s"]
    for pair in pairs(doc):
        lanes = lanes_of(doc, pair)
        for lane in lanes:
            s = solo(doc, pair, lane)
            gk = ("g", "p99_ms") if pair == "latency" else ("g", "steps_per_s")
            solo_ok = s[gk]["base"] is not None and s[("o", "steps_per_s")]["base"] is not None
            name = f"frontier.{pair}.solo" + (f".lane{lane}" if len(lanes) > 1 else "")
            out.append(f"RESULT {name} {'INFO' if solo_ok else 'FAIL'} guaranteed {gk[1]} before/after "
                       f"{f3(s[gk]['before'])}/{f3(s[gk]['after'])}, opportunistic steps/s "
                       f"{f3(s[('o', 'steps_per_s')]['before'])}/{f3(s[('o', 'steps_per_s')]['after'])}")
        for c in configs(doc, pair):
            if c["status"] != "ok":
                out.append(f"RESULT frontier.{pair}.{c['config']} {'FAIL' if c['status'] == 'failed' else 'INFO'} "
                           f"{status_text(c)}")
        for v in frontier(doc, pair):
            name = f"frontier.{pair}.{v['mode']}-{lv(v['level'])}"
            status = "PASS" if v["met"] else "FAIL"
            out.append(f"RESULT {name} {status} gslice {gslice_text(pair, v['gslice'])}; best plain "
                       f"{best_text(pair, v['best'])}" + (f"; {'; '.join(v['misses'])}" if v["misses"] else ""))
    return out


def text_table(doc):
    lines = []
    for pair in pairs(doc):
        lines.append(f"{PAIR_LABELS[pair]}: guaranteed × solo{' (server p99, p50)' if pair == 'latency' else ''}"
                     f" / opportunistic × solo")
        for r in rows(doc, pair):
            lines.append(f"  {row_label(doc, pair, r):<26} {guaranteed_text(pair, r):<48} {f3(r['o']):<7} "
                         f"{'' if r['status'] == 'ok' else status_text(r)}")
        for cfg, against, g, o in side_by_side(doc, pair):
            lines.append(f"  {cfg} − {against}, same round: guaranteed {diff_text(g)}, opportunistic {diff_text(o)}"
                         f" ({rounds_of(g, o)} rounds)")
        for v in frontier(doc, pair):
            met = "n/a" if v["met"] is None else ("MET" if v["met"] else "MISSED")
            lines.append(f"  at {lv(v['level'])} {v['mode']:<10} gslice {gslice_text(pair, v['gslice']):<22} "
                         f"best plain {best_text(pair, v['best']):<34} {met}"
                         + (f" ({'; '.join(v['misses'])})" if v["misses"] else ""))
    return "\n".join(lines)


# Configurations set beside the solo phases rather than plain MPS: a gslice process alone, the
# guaranteed job beside busy host threads, a second plain process of it alone.
AGAINST_SOLO = ("gslice-solo", "host", "twin")

# The plain configuration each gslice configuration is set beside, round by round (frontier.py
# runs it in every part of a split pair, so that every gslice level has it in its own rounds).
SIDE_BY_SIDE_PLAIN = "mps-100-p1"


def compare(doc, pair, a, b):
    """Configuration a against configuration b of an interleaved run in the same round, over all
    lanes (b "solo": a's figures against the solo phase's, as for gslice-solo-*; what
    side_by_side does for gslice against plain MPS): ((mean, se, n) or None for the guaranteed job,
    the same for the opportunistic job), or None where the run has no such pair of rounds. Any
    two configurations: a change beside the build before it (gslice-mps-P-base), two levels,
    two thread percentages."""
    if not interleaved(doc):
        return None
    rs = [r for r in rows(doc, pair) if r.get("status") == "ok"]
    mine = {r["lane"]: r for r in rs if r["config"] == a}
    theirs = {r["lane"]: r for r in rs if r["config"] == b}
    gx, gy, ox, oy = [], [], [], []
    for lane, r in mine.items():
        base = theirs.get(lane)
        if b == "solo":  # a job alone: whichever it ran (gslice-solo-P the guaranteed, -opp the other)
            gx += r["g_rounds"]
            gy += [1.0] * len(r["g_rounds"])
            ox += r["o_rounds"]
            oy += [1.0] * len(r["o_rounds"])
            continue
        if base is None:
            continue
        if len(r["g_rounds"]) == len(base["g_rounds"]):
            gx += r["g_rounds"]
            gy += base["g_rounds"]
        if len(r["o_rounds"]) == len(base["o_rounds"]):
            ox += r["o_rounds"]
            oy += base["o_rounds"]
    if not gx and not ox:
        return None
    return paired(gx, gy), paired(ox, oy)


def side_by_side(doc, pair):
    """Each gslice configuration of an interleaved run against plain MPS at priority 1 (its
    guaranteed process alone, `gslice-solo-*`: against the solo phase) in the same round, over
    all lanes: the mean difference of their figures over solo and its standard error, the
    guaranteed job's (the server: solo p99 over p99) and the opportunistic job's. Phases of a
    launch-bound job alone move several percent with the host from one to the next while the
    configurations of a round move together, so this is the comparison a call resolves.
    [(config, against, (mean, se, n) or None, (mean, se, n) or None)]."""
    if not interleaved(doc):
        return []
    kinds = {}  # each gslice configuration once, whatever its lanes
    for r in rows(doc, pair):
        if (str(r.get("kind") or "").startswith("gslice") or r.get("kind") in AGAINST_SOLO) and r.get("status") == "ok":
            kinds.setdefault(r["config"], r["kind"])
    out = []
    for cfg, kind in kinds.items():
        against = "solo" if kind in AGAINST_SOLO else SIDE_BY_SIDE_PLAIN
        both = compare(doc, pair, cfg, against)
        if both is not None:
            out.append((cfg, against, *both))
    return out


def rounds_of(g, o):
    """The rounds a side-by-side pair of differences rests on: whichever job ran."""
    p = g or o
    return p[2] if p else 0


def diff_text(p):
    return "n/a" if p is None else f"{p[0]:+.3f} ± {p[1]:.3f}"


def service_text(doc):
    """The server's service time (each lane's, where lanes measured their own)."""
    ms = doc.get("service_ms") or {}
    if "latency" in ms or not ms:
        return f3(ms.get("latency"))
    return "; ".join(f"{f3(v)} ({k.split(', ', 1)[-1]})" for k, v in ms.items())


def solo_load_text(doc):
    """The load the server offered in its solo phases (its request rate times its mean service
    time there), each lane's: where the measurement alone came out short or long, not 0.5."""
    loads = []
    for lane in lanes_of(doc, "latency"):
        c = next((c for c in configs(doc, "latency", lane) if c["config"] in ("solo", "solo-before")), None)
        load = value(c, "g", "offered_load")
        if load is not None:
            loads.append(f"{load:.2f}" + (f" (lane {lane})" if len(lanes_of(doc, "latency")) > 1 else ""))
    return ", ".join(loads)


def markdown(doc):
    out = []
    date = (doc.get("started") or "")[:10]
    st = doc.get("settings", {})
    out.append(f"# The harvest frontier on {doc.get('gpu', '?')}, {date}\n")
    out.append(f"**GPU:** {doc.get('gpu', '?')} ({doc.get('memory', '?')}), driver {doc.get('driver', '?')}; "
               f"{doc.get('software', '')}.\n")
    out.append(f"**Command** (repository root, wall {doc.get('wall_s', '?')} s):\n\n    {doc.get('command', '')}\n")
    if doc.get("lanes"):
        out.append(f"**Lanes:** {len(doc['lanes'])}, run at the same time, one GPU each (frontier.py's FRONTIER_LANES); "
                   "each configuration is against its own lane's solo runs: "
                   + ", ".join(f"lane {x['lane']} {x.get('wall_s', '?')} s" for x in doc["lanes"]) + ".\n")
    if doc.get("calls"):
        out.append(f"**Calls:** {len(doc['calls'])} of the same run, their rounds pooled, each round against its own "
                   "call's solo phases; a server's p99 and p50 are the calls' own, averaged by rounds: "
                   + ", ".join(f"started {x.get('started', '?')}, {x.get('wall_s', '?')} s" for x in doc["calls"]) + ".\n")
    env = doc.get("environment") or {}
    if env:
        out.append("Variables: " + ", ".join(f"`{k}={v}`" for k, v in env.items()) + ".\n")
    if interleaved(doc):
        k = st["interleave"]
        out.append(f"Each pair ran as one set of processes on MPS in which every configuration, the solo phases "
                   f"included, took one phase of {st.get('window_s', 0) / k:g} s (after {st.get('settle_s', '?')} s "
                   f"unmeasured) in each of {k} rounds, the order {st.get('round_order', 'rotated one phase a round')}: "
                   f"each configuration is "
                   f"measured over {st.get('window_s', '?')} s, against the same run's solo phases, minutes apart "
                   f"at most. gslice's processes are started once; its controller meets every transition "
                   f"(a guaranteed job starting beside opportunistic work, and stopping) once a round, inside "
                   f"the measured time. The solo row's before and after are its first and last round. ")
        if any(c.get("kind") == "timeslice" for c in doc.get("configs", [])):
            out.append("`timeslice` is a native pair of processes (not MPS clients) beside the MPS server, whose "
                       "clients rest meanwhile, against the MPS clients' solo phases. ")
    else:
        out.append(f"Each configuration measured over {st.get('window_s', '?')} s, after {st.get('settle_s', '?')} s "
                   f"unmeasured (gslice: {st.get('lead_s', '?')} s together, unmeasured); figures against the mean of "
                   "the solo runs before and after. ")
    out[-1] += (f"The server's request rate is fixed at {st.get('server_load', 0.5)} of "
               f"its solo service time ({service_text(doc)} ms)"
               + (f"; the load it offered in its solo phases: {loads}" if (loads := solo_load_text(doc)) else "")
               + ". The latency pair's level: "
               f"p99 ≤ 1 + (1 − level) × {LATENCY_SLACK:.3f} of solo (+5% at 0.97).\n")
    out.append("Configurations: `timeslice` both processes native (the GPU's time-slicing); `mps-T-pQ` both MPS "
               "clients, the opportunistic one at `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=T` and `CUDA_MPS_CLIENT_PRIORITY=Q` "
               "(0 normal, 1 below normal), the guaranteed one at 100 and 0; `gslice-P` `gslice run --class guaranteed "
               "--protect P` beside `gslice run --class opportunistic`, time-sliced; `gslice-mps-P` the same as MPS "
               "clients; `gslice-mps-P-pQ` that with the opportunistic program's environment setting "
               "`CUDA_MPS_CLIENT_PRIORITY=Q` over gslice's; `gslice-mps-P-capC` the opportunistic job with "
               "`--cap=C%` (on MPS: C% of the SMs, the gate holding the rest), `gslice-mps-P-capC-time` the same "
               "with its program's environment setting `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100` (the cap held by "
               "time alone); `gslice-mps-P-smsS` the opportunistic job uncapped, its program's environment setting "
               "`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=S` (the SMs alone); `gslice-solo-P` gslice's guaranteed "
               "process alone, `gslice-solo-opp` its opportunistic one; `-progprio` its guaranteed process with `GSLICE_STREAM_PRIORITY=program` "
               "(the program's stream priorities, not the GPU's greatest); `host-spin` the plain guaranteed process "
               "beside processes that each keep one host thread busy and do no GPU work; `solo-twin` a second plain "
               "guaranteed process alone; these are shown, not judged.\n")
    out.append("## Solo runs\n")
    out.append("| pair | job | before | after | after / before |")
    out.append("|---|---|---|---|---|")
    for pair in pairs(doc):
        lanes = lanes_of(doc, pair)
        for lane in lanes:
            label = f"{pair} (lane {lane})" if len(lanes) > 1 else pair
            for (role, f), s in solo(doc, pair, lane).items():
                job = {"g": "guaranteed", "o": "opportunistic"}[role]
                out.append(f"| {label} | {job} {f} | {f3(s['before'])} | {f3(s['after'])} | {f3(s['drift'])} |")
    out.append("")
    for pair in pairs(doc):
        out.append(f"## {PAIR_LABELS[pair][0].upper() + PAIR_LABELS[pair][1:]}\n")
        per_round = interleaved(doc)
        extra_head = (" guaranteed per round | opportunistic per round |" if per_round else "")
        if pair == "latency":
            out.append("| configuration | server p99 ms (× solo) | server p50 ms (× solo) | opportunistic × solo |"
                       + extra_head + " status |")
            out.append("|---|---|---|---|" + ("---|---|" if per_round else "") + "---|")
        else:
            out.append("| configuration | guaranteed × solo | opportunistic × solo |" + extra_head + " status |")
            out.append("|---|---|---|" + ("---|---|" if per_round else "") + "---|")
        for r in rows(doc, pair):
            extra = (f" {spread(r['g_rounds'])} | {spread(r['o_rounds'])} |" if per_round else "")
            if pair == "latency":
                p99 = "n/a" if r["p99"] is None else f"{r['p99_ms']:.2f} ({r['p99']:.3f})"
                p50 = "n/a" if r["p50"] is None else f"{r['p50_ms']:.2f} ({r['p50']:.3f})"
                out.append(f"| {row_label(doc, pair, r)} | {p99} | {p50} | {f3(r['o'])} |{extra} {status_text(r)} |")
            else:
                out.append(f"| {row_label(doc, pair, r)} | {f3(r['g'])} | {f3(r['o'])} |{extra} {status_text(r)} |")
        if per_round:
            out.append("\nPer round: the configuration's figure over the solo phase's of the same round (the "
                       "server: solo p99 over its p99), each round's, in the order run.")
        side = side_by_side(doc, pair)
        if side:
            out.append("\nSide by side in the same round: each gslice configuration's figure over solo minus "
                       f"`{SIDE_BY_SIDE_PLAIN}`'s in the same round (its guaranteed process alone: minus 1), "
                       "mean ± standard error over the rounds of all lanes.\n")
            out.append("| configuration | against | rounds | guaranteed | opportunistic |")
            out.append("|---|---|---|---|---|")
            for cfg, against, g, o in side:
                out.append(f"| {cfg} | {against} | {rounds_of(g, o)} | {diff_text(g)} | {diff_text(o)} |")
        gpu = [c for c in configs(doc, pair) if c.get("gpu")]
        if gpu:
            out.append("\nThe GPU in each configuration's measured phases (nvidia-smi every 0.5 s): a job bound by "
                       "its host moves with the host; where the SM clock held and the GPU's busy share followed "
                       "the job's speed, the host set the pace.\n")
            out.append("| configuration | SM clock MHz | GPU busy % | power W |")
            out.append("|---|---|---|---|")
            for c in gpu:
                g = c["gpu"]
                out.append(f"| {row_label(doc, pair, dict(c, lane=lane_of(c)))} | {g.get('sm_mhz', 0):.0f} | "
                           f"{g.get('busy_pct', 0):.0f} | {g.get('power_w', 0):.0f} |")
        for lane, k, x, m in solo_outliers(doc, pair):
            out.append(f"\n**Solo round {k} of lane {lane}:** the server's p99 {x:.1f} ms, {x / m:.1f}× the other "
                       f"solo rounds' median ({m:.1f} ms): the lane's p99 ratios (× solo) rest on that one phase; "
                       "its other rounds' figures are in the per-round column.")
        out.append("")
    out.append("## At each protection level\n")
    out.append("gslice against the plain configuration (time-slicing or MPS) with the most opportunistic "
               "throughput among those that keep the guaranteed job at the level.\n")
    out.append("| pair | level | gslice | guaranteed / opportunistic | best plain: guaranteed / opportunistic | goal |")
    out.append("|---|---|---|---|---|---|")
    misses = []
    for pair in pairs(doc):
        for v in frontier(doc, pair):
            met = "n/a" if v["met"] is None else ("**met**" if v["met"] else "missed")
            out.append(f"| {pair} | {lv(v['level'])} | {v['mode']} | {gslice_text(pair, v['gslice'])} | "
                       f"{best_text(pair, v['best'])} | {met} |")
            misses += [f"- {pair}, {lv(v['level'])}, {v['mode']}: {m}" for m in v["misses"]]
    out.append("")
    out.append("## Misses\n")
    out += misses or ["None."]
    out.append("")
    bad = [r for r in doc.get("runs", []) if r.get("status") != "ok"]
    if bad:
        out.append("## Failed and skipped runs\n")
        out += [f"- {r['name']}: {r['status']}: {r.get('error') or ''}" for r in bad]
        out.append("")
    ran = [r for r in doc.get("runs", []) if r.get("commands")]
    if ran:
        out.append("## Runs and their processes\n")
        out.append("Each run's processes (`--sync DIR` names its rendezvous folder) and phases, in the order run.\n")
        for r in ran:
            phases = ", ".join(cfg for cfg, _ in r.get("phases", []))
            out.append(f"- {r['name']} ({r['status']}, {r.get('wall_s', '?')} s; phases {phases}):")
            out += [f"  - `{ident}`: `{cmd}`" for ident, cmd in r["commands"].items()]
        out.append("")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--table", action="store_true", help="RESULT lines and the text table instead of markdown")
    p.add_argument("--compare", action="append", default=[], metavar="A:B",
                   help="configuration A against B in the same round (B may be solo); repeatable")
    p.add_argument("json", nargs="+", help="frontier.py's JSON; several: the lanes of one plan")
    args = p.parse_args()
    wanted = []
    for spec in args.compare:
        a, sep, b = spec.partition(":")
        if not sep or not a or not b:
            sys.exit(f"frontier_report.py: --compare {spec}: want two configurations, A:B")
        wanted.append((a, b))
    docs = []
    for path in args.json:
        try:
            with open(path) as f:
                docs.append(json.load(f))
        except (OSError, ValueError) as e:
            sys.exit(f"frontier_report.py: cannot read {path}: {e}")
    doc = merge(docs)
    if wanted:
        for a, b in wanted:
            found = False
            for pair in pairs(doc):
                c = compare(doc, pair, a, b)
                if c is None:
                    continue
                found = True
                g, o = c
                n = (g or o)[2] if (g or o) else 0
                print(f"{pair}: {a} − {b}, same round: guaranteed {diff_text(g)}, opportunistic {diff_text(o)} "
                      f"({n} rounds)")
            if not found:
                sys.exit(f"frontier_report.py: --compare {a}:{b}: no interleaved rounds of both")
    elif args.table:
        print("\n".join(result_lines(doc)))
        print()
        print(text_table(doc))
    else:
        print(markdown(doc))


if __name__ == "__main__":
    main()
