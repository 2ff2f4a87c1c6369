"""The compute suite's cases, side by side: solo, plain co-execution (default time-slicing),
MPS (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) and gslice, in one run on one GPU.

  suite.py plain  --state S.json    solo, co-execution and gslice configurations
  suite.py mps    --state S.json    MPS configurations (the MPS daemon must be running)
  suite.py report --state S.json    RESULT lines and a markdown table (--md FILE)

bench/gpu/suites/compute.sh runs the three in order and owns the MPS daemon. The cases
(issue 4):
  1 cap      one compute-bound job alone, capped at 10/30/50/70%: achieved share +-2 points
  2 split    two identical jobs at guaranteed shares 30/70 and 10/90: ratio +-2 points
  3 train    guaranteed ResNet-50 training + opportunistic BERT training:
             guaranteed >= 0.97 of alone, opportunistic >= 0.70 of alone
  4 latency  guaranteed BERT inference server at ~50% load + opportunistic ResNet-50 training:
             server p99 <= +10% of alone, training >= 0.5 of alone
  5 overhead one ResNet-50 training job under gslice with no limit >= 99% of native
             (the processes take turns: see OVERHEAD below)
Cases 3 and 4 run interleaved: both processes of a configuration work through phases
(guaranteed alone, both, opportunistic alone, both; the partner of a lone job is paused with
its context kept), and each job's speed together is compared with its own speed alone in the
same run, so a host whose speed drifts between runs does not decide the result.
Environment: COMPUTE_CASES (e.g. "1,2"; default all), COMPUTE_WINDOW_S (measured seconds per
configuration, default 5), COMPUTE_PHASE_S (seconds per interleaved phase, default 4),
COMPUTE_ROUNDS (rounds of the four phases, default 3), COMPUTE_SETTLE_S (seconds at the start
of each phase not measured, default 1), COMPUTE_LEARN_S (seconds both processes of a case 3 or 4
configuration work together, unmeasured, before its phases; default 0), COMPUTE_DEADLINE (epoch seconds after which
configurations are skipped), COMPUTE_LOGS (a folder to keep every process's whole log in),
COMPUTE_SKIP (configurations not to run, by the name after the case, e.g. "coexec,mps"),
COMPUTE_SERVER_LOAD (case 4's offered load, default 0.5),
COMPUTE_OVERHEAD_ROUNDS and COMPUTE_OVERHEAD_PHASE_S (case 5's rounds of turns, default 20, and
seconds per turn, default 3), COMPUTE_OVERHEAD_LAYERS=1 (case 5 also runs the layers between
native and gslice run), GSLICE_BUILD (build folder holding bin/gslice).
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "job.py")
PY = sys.executable
WINDOW = float(os.environ.get("COMPUTE_WINDOW_S", "5"))
CASES = {c.strip() for c in os.environ.get("COMPUTE_CASES", "1,2,3,4,5").split(",") if c.strip()}
CAPS = [10, 30, 50, 70]
SPLITS = [(30, 70), (10, 90)]
MPS_OPPORTUNISTIC_PCT = 50  # MPS has no classes: the opportunistic job gets half the SMs
# Cases 3 and 4's report rows for gslice configurations beyond the table's gslice column:
# name, the row's label and the RESULT line's key.
EXTRA_GSLICE = [("gslice-mps", "gslice on MPS", "on-mps")]
# Case 4's offered load: request rate x the server's calibrated service time.
SERVER_LOAD = float(os.environ.get("COMPUTE_SERVER_LOAD", "0.5"))
# Configurations not run (the part of a configuration's name after its case).
SKIP = {c.strip() for c in os.environ.get("COMPUTE_SKIP", "").split(",") if c.strip()}
# Configurations that would start after this time (epoch seconds) are skipped, so that the
# report is always written inside the device's time limit.
DEADLINE = float(os.environ.get("COMPUTE_DEADLINE", "0")) or None
# Each configuration's process logs are kept in this folder when set (COMPUTE_LOGS).
LOGS = os.environ.get("COMPUTE_LOGS")
# Interleaved configurations (cases 3 and 4): phases of PHASE_S seconds, the pattern repeated
# ROUNDS times; the first SETTLE_S seconds of each phase are not measured (the controller's
# settling time that issue 4 allows).
PHASE_S = float(os.environ.get("COMPUTE_PHASE_S", "4"))
# Cases 3 and 4: seconds in which both processes work together before the phases, not measured.
# gslice's opportunistic controller learns what its work costs the guaranteed job from pairs
# of probes about 3 s apart, and in the phases only every other pair falls in a together
# phase, so a run of a few rounds measures mostly its first minute beside a new partner. Jobs
# that share a GPU for hours see the learned rate; this lets the phases measure that. Every
# configuration of the two cases gets it, gslice's or not, so they stay alike.
LEARN_S = float(os.environ.get("COMPUTE_LEARN_S", "0"))
ROUNDS = int(os.environ.get("COMPUTE_ROUNDS", "3"))
SETTLE_S = float(os.environ.get("COMPUTE_SETTLE_S", "1"))
# Case 3 and 4's phases: the guaranteed job alone (its partner paused, context kept), both,
# the opportunistic job alone, both. Every transition the controller meets happens once a
# round: opportunistic work starting beside busy guaranteed work, guaranteed work stopping,
# guaranteed work starting beside busy opportunistic work, opportunistic work stopping.
TOGETHER = [["g"], ["g", "o"], ["o"], ["g", "o"]]


def build_dir():
    """The gslice build: GSLICE_BUILD, else the checkout's build/."""
    return os.environ.get("GSLICE_BUILD", os.path.join(HERE, "..", "..", "..", "build"))


# gslice run's memory limit, set well above what any job here uses: it is not what is measured.
GSLICE_MEMORY = "60GiB"


def gslice_prefix(*flags, memory=GSLICE_MEMORY, build=None):
    """build: the build folder whose bin/gslice runs the program (None: build_dir())."""
    return [os.path.join(build or build_dir(), "bin", "gslice"), "run", f"--memory={memory}", *flags, "--"]


def throughput(workload, ident, prefix=(), env=None, warmup=2.0, args=()):
    """args: further job.py throughput flags."""
    return (ident, [*prefix, PY, JOB, "throughput", "--workload", workload, "--id", ident,
                    "--warmup", str(warmup), *args], env or {})


def server(ident, service_ms=None, prefix=(), env=None):
    argv = [*prefix, PY, JOB, "server", "--id", ident, "--warmup", "3"]
    if service_ms is not None:
        argv += ["--service-ms", f"{service_ms:.4f}", "--load", str(SERVER_LOAD)]
    return (ident, argv, env or {})


def mps_env(pct):
    return {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(pct)}


def interleaved(pattern, rounds=None, rotate=False):
    """Phases for run_config: `pattern` (a list of id lists, e.g. [["g"], ["g", "o"], ["o"]])
    repeated ROUNDS times, back to back. rotate: round k starts at the pattern's k-th entry, so
    no entry always follows the same one."""
    n = len(pattern)
    return [list(pattern[(k + i) % n if rotate else i]) for k in range(rounds or ROUNDS) for i in range(n)]


# Case 5: processes of one ResNet-50 job in each configuration below take turns on the GPU
# (the others paused, their contexts idle), OVERHEAD_PHASE_S seconds each, the order rotating
# every round. A configuration's figure is the median over rounds of its speed over native's
# in the same round, seconds apart: the hosts' drift between separate runs (native read 36-43
# it/s between 8 s runs on one H100 host) drops out. Within seconds such a host still moves
# a host-bound job by 5-8% from one turn to the next, so the report also gives the ratio of
# mean step times over all turns. With COMPUTE_OVERHEAD_LAYERS=1 the layers gslice run is
# made of run too: the shims preloaded with no class, with GSLICE_CLASS=guaranteed (gslice
# run's default class, which raises the default streams' priority), and the native job with
# its legacy stream raised by itself, no shim at all. No process samples NVML (nothing of it
# is reported here, and its thread takes the job's GIL every 50 ms).
OVERHEAD_ROUNDS = int(os.environ.get("COMPUTE_OVERHEAD_ROUNDS", "20"))
OVERHEAD_PHASE_S = float(os.environ.get("COMPUTE_OVERHEAD_PHASE_S", "3"))
# id and the row's label; overhead_procs says how each one runs.
OVERHEAD_CONFIGS = [("n", "native"), ("g", "gslice run, no limit")] + (
    [("p", "shims preloaded, no class"), ("q", "shims preloaded, GSLICE_CLASS=guaranteed"),
     ("r", "native, legacy stream raised by the job")] if os.environ.get("COMPUTE_OVERHEAD_LAYERS") == "1" else [])


def preload_prefix(*assignments):
    """The shims preloaded by hand, no gslice run (no memory limit); GSLICE_CLASS unset unless given."""
    shims = os.path.join(build_dir(), "lib", "gslice")
    return ["env", "-u", "GSLICE_CLASS", f"LD_PRELOAD={shims}/libcuda.so.1 {shims}/libnvidia-ml.so.1", *assignments]


def overhead_procs():
    how = {"n": ([], []), "g": (gslice_prefix(), []), "p": (preload_prefix(), []),
           "q": (preload_prefix("GSLICE_CLASS=guaranteed"), []), "r": ([], ["--raise-default-stream"])}
    return [throughput("resnet50", ident, how[ident][0], warmup=3, args=["--no-gpu-sampler", *how[ident][1]])
            for ident, _ in OVERHEAD_CONFIGS]


def run_config(name, procs, seconds=None, phases=None, phase_s=None):
    """Starts every process, waits until all are warm, opens one shared window (or, with
    `phases` from interleaved(), a run of phases of phase_s seconds (PHASE_S) in which only
    the named processes work), collects each process's result. Returns {ident: result} or
    {"error": text}; a phased result also carries "phases": [[start, end, ids], ...], the
    measured ones, and, for cases 3 and 4 with LEARN_S, "learn": [start, end] before them."""
    seconds = seconds or WINDOW
    phase_s = phase_s or PHASE_S
    learn_s = LEARN_S if phases is not None and name.split("/", 1)[0] in ("train", "latency") else 0
    if phases is not None:
        seconds = learn_s + len(phases) * phase_s
    if name.split("/", 1)[-1] in SKIP:
        print(f"config {name}: skipped (COMPUTE_SKIP)", flush=True)
        return {"error": "skipped: COMPUTE_SKIP"}
    if DEADLINE is not None and time.time() + seconds + 10 > DEADLINE:
        print(f"config {name}: skipped (suite time budget spent)", flush=True)
        return {"error": "skipped: suite time budget spent"}
    sync = tempfile.mkdtemp(prefix="gslice-compute-")
    children, logs = [], {}
    t_start = time.time()
    try:
        for ident, argv, extra in procs:
            env = dict(os.environ, **extra)
            log = open(os.path.join(sync, f"{ident}.log"), "w")
            logs[ident] = log
            children.append((ident, subprocess.Popen(argv + ["--sync", sync],
                                                     env=env, stdout=log, stderr=subprocess.STDOUT,
                                                     start_new_session=True)))
        deadline = time.time() + 150
        while not all(os.path.exists(os.path.join(sync, f"{i}.ready")) for i, _ in children):
            for ident, p in children:
                if p.poll() is not None:
                    return {"error": f"{ident} exited {p.returncode} before its window: "
                                     + tail(os.path.join(sync, f"{ident}.log"))}
            if time.time() > deadline:
                return {"error": "timed out waiting for warm-up"}
            time.sleep(0.05)
        ready = {}
        for ident, _ in children:
            with open(os.path.join(sync, f"{ident}.ready")) as f:
                ready[ident] = json.load(f)
        t0 = time.time() + 0.5
        go = {"t0": t0, "seconds": seconds}
        if phases is not None:
            first = t0 + learn_s
            measured = [[first + i * phase_s, first + (i + 1) * phase_s, ids] for i, ids in enumerate(phases)]
            learn = [t0, first] if learn_s > 0 else None
            go = {"phases": ([learn + [[ident for ident, _, _ in procs]]] if learn else []) + measured}
        with open(os.path.join(sync, ".go"), "w") as f:
            json.dump(go, f)
        os.rename(os.path.join(sync, ".go"), os.path.join(sync, "go"))
        deadline = t0 + seconds + 60
        results = {}
        for ident, p in children:
            try:
                p.wait(timeout=max(1.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                return {"error": f"{ident} did not finish its window"}
            path = os.path.join(sync, f"{ident}.json")
            if p.returncode != 0 or not os.path.exists(path):
                return {"error": f"{ident} exited {p.returncode}: " + tail(os.path.join(sync, f"{ident}.log"))}
            with open(path) as f:
                results[ident] = dict(json.load(f), **{"ready": ready[ident]})
        if phases is not None:
            results["phases"] = measured
            if learn:
                results["learn"] = learn
        return results
    finally:
        for _, p in children:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        for log in logs.values():
            log.close()
        for ident in logs:
            print(f"--- {name}/{ident} log ---\n" + tail(os.path.join(sync, f"{ident}.log"), 1500))
            if LOGS:
                shutil.copy(os.path.join(sync, f"{ident}.log"), os.path.join(LOGS, f"{name.replace('/', '_')}_{ident}.log"))
        print(f"config {name}: {time.time() - t_start:.1f}s wall", flush=True)
        shutil.rmtree(sync, ignore_errors=True)


def tail(path, n=600):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:].strip()
    except OSError:
        return ""


def record(state, key, value):
    state[key] = value
    # Printed without the per-step and per-request times (they stay in the state file).
    brief = {k: ({f: x for f, x in v.items() if f not in ("step_ends", "requests_at")} if isinstance(v, dict) else v)
             for k, v in value.items() if k != "phases"}
    print(f"{key}: {json.dumps(brief)}", flush=True)


def phase_plain(state):
    if "1" in CASES:
        record(state, "cap/solo", run_config("cap/solo", [throughput("matmul", "a")]))
        for cap in CAPS:
            record(state, f"cap/gslice/{cap}",
                   run_config(f"cap/gslice/{cap}", [throughput("matmul", "a", gslice_prefix(f"--cap={cap}%"))]))
    if "2" in CASES:
        record(state, "split/coexec", run_config("split/coexec", [throughput("matmul", "a"), throughput("matmul", "b")]))
        for a, b in SPLITS:
            record(state, f"split/gslice/{a}-{b}", run_config(f"split/gslice/{a}-{b}", [
                throughput("matmul", "a", gslice_prefix("--class=guaranteed", f"--share={a}%")),
                throughput("matmul", "b", gslice_prefix("--class=guaranteed", f"--share={b}%"))]))
    if "3" in CASES:
        # Interleaved (TOGETHER): each job's speed together is compared with its own speed
        # alone in the same run. The alone phases under gslice double as the diagnostics
        # "guaranteed alone in gslice" and "next to an idle opportunistic process".
        record(state, "train/coexec", run_config("train/coexec", [
            throughput("resnet50", "g", warmup=3), throughput("bert-train", "o", warmup=3)], phases=interleaved(TOGETHER)))
        record(state, "train/gslice", run_config("train/gslice", [
            throughput("resnet50", "g", gslice_prefix("--class=guaranteed"), warmup=3),
            throughput("bert-train", "o", gslice_prefix("--class=opportunistic"), warmup=3)],
            phases=interleaved(TOGETHER)))
    if "4" in CASES:
        # The server's load is set from its service time alone (job.py measures it).
        solo = run_config("solo/server", [server("s")])
        record(state, "solo/server", solo)
        service_ms = solo.get("s", {}).get("service_ms")
        if service_ms:
            for cfg, sp, op in (("coexec", (), ()),
                                ("gslice", gslice_prefix("--class=guaranteed"), gslice_prefix("--class=opportunistic")),
                                # Diagnostic: the server under gslice, the training job plain
                                # (what the server's own gate costs, apart from the policy).
                                ("gslice-server-only", gslice_prefix("--class=guaranteed"), ())):
                record(state, f"latency/{cfg}", run_config(f"latency/{cfg}", [
                    server("g", service_ms, sp), throughput("resnet50", "o", op, warmup=3)],
                    phases=interleaved(TOGETHER)))
    if "5" in CASES:
        record(state, "overhead", run_config("overhead", overhead_procs(), phase_s=OVERHEAD_PHASE_S,
                                             phases=interleaved([[i] for i, _ in OVERHEAD_CONFIGS],
                                                                rounds=OVERHEAD_ROUNDS, rotate=True)))


def phase_mps(state):
    if "1" in CASES:
        for cap in CAPS:
            record(state, f"cap/mps/{cap}", run_config(f"cap/mps/{cap}", [throughput("matmul", "a", env=mps_env(cap))]))
    if "2" in CASES:
        for a, b in SPLITS:
            record(state, f"split/mps/{a}-{b}", run_config(f"split/mps/{a}-{b}", [
                throughput("matmul", "a", env=mps_env(a)), throughput("matmul", "b", env=mps_env(b))]))
    if "3" in CASES:
        record(state, "train/mps", run_config("train/mps", [
            throughput("resnet50", "g", env=mps_env(100), warmup=3),
            throughput("bert-train", "o", env=mps_env(MPS_OPPORTUNISTIC_PCT), warmup=3)], phases=interleaved(TOGETHER)))
        # gslice's classes with both processes MPS clients (spatial sharing): gslice run
        # asks MPS for below-normal priority for opportunistic work.
        record(state, "train/gslice-mps", run_config("train/gslice-mps", [
            throughput("resnet50", "g", gslice_prefix("--class=guaranteed"), warmup=3),
            throughput("bert-train", "o", gslice_prefix("--class=opportunistic"), warmup=3)], phases=interleaved(TOGETHER)))
    if "4" in CASES:
        service_ms = state.get("solo/server", {}).get("s", {}).get("service_ms")
        if service_ms:
            record(state, "latency/mps", run_config("latency/mps", [
                server("g", service_ms, env=mps_env(100)),
                throughput("resnet50", "o", env=mps_env(MPS_OPPORTUNISTIC_PCT), warmup=3)], phases=interleaved(TOGETHER)))
            record(state, "latency/gslice-mps", run_config("latency/gslice-mps", [
                server("g", service_ms, gslice_prefix("--class=guaranteed")),
                throughput("resnet50", "o", gslice_prefix("--class=opportunistic"), warmup=3)],
                phases=interleaved(TOGETHER)))


# ---- report ---------------------------------------------------------------------------

def phase_counts(state, key, ident, settle=None):
    """For each phase of an interleaved configuration, in order: (the ids that worked, ident's
    steps between the first and last that ended inside it, the seconds between them), each
    phase measured from `settle` seconds (default SETTLE_S) after its start ((ids, 0, 0.0)
    where fewer than two ended). None when the configuration has no such result."""
    settle = SETTLE_S if settle is None else settle
    r = state.get(key)
    if not r or "error" in r or ident not in r or "phases" not in r:
        return None
    ends = r[ident].get("step_ends") or []
    counts = []
    for a, b, who in r["phases"]:
        inside = [t for t in ends if a + settle <= t <= b]
        counts.append((who, len(inside) - 1, inside[-1] - inside[0]) if len(inside) >= 2 else (who, 0, 0.0))
    return counts


def phase_steps(state, key, ident, ids, settle=None):
    """ident's steps per second over the phases in which exactly `ids` worked (interleaved
    configurations), summed over the phases (phase_counts)."""
    counts = phase_counts(state, key, ident, settle)
    if counts is None:
        return None
    mine = [(n, sec) for who, n, sec in counts if sorted(who) == sorted(ids)]
    seconds = sum(sec for _, sec in mine)
    return sum(n for n, _ in mine) / seconds if seconds > 0 else None


def turn_rates(state, key, ident):
    """ident's steps per second in each phase in which it worked alone, in phase order (None
    where fewer than two steps ended)."""
    return [n / sec if n else None for who, n, sec in phase_counts(state, key, ident) or [] if who == [ident]]


def round_ratios(state, key, ident, base):
    """ident's speed over base's, round by round (the k-th turn of each is in round k)."""
    return [x / y for x, y in zip(turn_rates(state, key, ident), turn_rates(state, key, base)) if x and y]


# Case 3's held-back diagnostic: the together phases in which the opportunistic job did at
# most HELD_BACK of its speed alone (held back at its gate). There its GPU work can have cost
# the guaranteed job little more than that share; a larger loss against the guaranteed job's
# alone phase just before comes from something else (the host between phases, or the partner
# process being live at all), which no opportunistic rate can take back. The selection leans
# towards the host's slow moments: controllers cut the rate when they read the guaranteed job
# slow, whatever the cause.
HELD_BACK = 0.15


def held_back_ratios(state, key, g="g", o="o"):
    """g's speed in each together phase in which o did at most HELD_BACK of its speed alone,
    over g's speed in its most recent alone phase before it, in phase order (None when the
    configuration has no such result)."""
    gc, oc, o_alone = phase_counts(state, key, g), phase_counts(state, key, o), phase_steps(state, key, o, [o])
    if gc is None or oc is None or not o_alone:
        return None
    ratios, last_alone = [], None
    for (who, n, sec), (_, m, o_sec) in zip(gc, oc):
        if sorted(who) == [g]:
            last_alone = n / sec if n else None
        elif sorted(who) == sorted([g, o]) and last_alone and n and (m / o_sec if m else 0.0) <= HELD_BACK * o_alone:
            ratios.append(n / sec / last_alone)
    return ratios


def quartiles(xs):
    """(lower quartile, median, upper quartile) of xs, or None for fewer than two values."""
    if len(xs) < 2:
        return None
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[1], q[2]


def phase_latency(state, key, ident, ids, settle=None):
    """The server's p50/p99 (ms), request count and offered load over requests that arrived
    in the phases in which exactly `ids` worked, from `settle` seconds (default SETTLE_S)
    after each phase's start."""
    settle = SETTLE_S if settle is None else settle
    r = state.get(key)
    if not r or "error" in r or ident not in r or "phases" not in r:
        return None
    reqs = r[ident].get("requests_at") or []
    lat, svc = [], []
    for a, b, who in r["phases"]:
        if sorted(who) == sorted(ids):
            for t, latency, service in reqs:
                if a + settle <= t <= b:
                    lat.append(latency)
                    svc.append(service)
    if not lat:
        return None
    lat.sort()

    def pct(p):
        return lat[min(len(lat) - 1, int(p / 100.0 * len(lat)))] * 1e3

    return {"p50_ms": pct(50), "p99_ms": pct(99), "requests": len(lat),
            "offered_load": r[ident]["rate_per_s"] * sum(svc) / len(svc)}


def rate(state, key, ident):
    r = state.get(key)
    if not r or "error" in r or ident not in r:
        return None
    return r[ident].get("steps_per_s")


def field(state, key, ident, name):
    r = state.get(key)
    if not r or "error" in r or ident not in r:
        return None
    return r[ident].get(name)


def err(state, key):
    r = state.get(key)
    if r is None:
        return "not run"
    return r.get("error", "")[:160] if "error" in r else ""


def fmt(x, spec="{:.1f}"):
    return "n/a" if x is None else spec.format(x)


def report(state, md_path):
    rows, results = [], []

    def result(name, ok, detail):
        status = "INFO" if ok is None else ("PASS" if ok else "FAIL")
        results.append(f"RESULT {name} {status} {detail}")

    if LEARN_S > 0 and CASES & {"3", "4"}:
        result("compute.learn", None, f"cases 3 and 4: both processes of each configuration worked together "
                                      f"{LEARN_S:g} s, not measured, before its phases (COMPUTE_LEARN_S)")

    if "1" in CASES:
        solo = rate(state, "cap/solo", "a")
        solo_util = field(state, "cap/solo", "a", "util_pct")
        rows.append(("1 cap", "solo", "GPU util (NVML) % / SM MHz / W / power-capped", "/".join(
            fmt(field(state, "cap/solo", "a", k), "{:.0f}") for k in ("util_pct", "sm_mhz", "power_w")) +
            " / " + fmt(field(state, "cap/solo", "a", "power_capped"), "{:.0%}"), "-", "-", "-", "", ""))
        for cap in CAPS:
            g = rate(state, f"cap/gslice/{cap}", "a")
            m = rate(state, f"cap/mps/{cap}", "a")
            gs = None if g is None or not solo else 100 * g / solo
            ms = None if m is None or not solo else 100 * m / solo
            # The share of GPU time, measured independently of gslice: NVML's utilisation
            # (time a kernel ran) relative to the solo run's.
            def tshare(key):
                u = field(state, key, "a", "util_pct")
                return None if u is None or not solo_util else 100 * u / solo_util
            gt, mt = tshare(f"cap/gslice/{cap}"), tshare(f"cap/mps/{cap}")
            rows.append(("1 cap", f"cap {cap}%", "GPU time share (NVML util vs solo, %)", "100", "-", fmt(mt), fmt(gt),
                         f"{cap}±2", err(state, f"cap/gslice/{cap}")))
            rows.append(("1 cap", f"cap {cap}%", "throughput share (%) [SM MHz, power-capped]", "100", "-",
                         f"{fmt(ms)} [{fmt(field(state, f'cap/mps/{cap}', 'a', 'sm_mhz'), '{:.0f}')}]",
                         f"{fmt(gs)} [{fmt(field(state, f'cap/gslice/{cap}', 'a', 'sm_mhz'), '{:.0f}')}, "
                         f"{fmt(field(state, f'cap/gslice/{cap}', 'a', 'power_capped'), '{:.0%}')}]", f"{cap}±2", ""))
            ok = gt is not None and abs(gt - cap) <= 2
            result(f"compute.cap.{cap}", ok, f"gslice GPU time {fmt(gt)}% (target {cap}±2), throughput {fmt(gs)}% of solo; "
                                             f"MPS time {fmt(mt)}%, throughput {fmt(ms)}% {err(state, f'cap/gslice/{cap}')}")
    if "2" in CASES:
        ca, cb = rate(state, "split/coexec", "a"), rate(state, "split/coexec", "b")
        cx = None if ca is None or cb is None else 100 * ca / (ca + cb)
        for a, b in SPLITS:
            ga, gb = rate(state, f"split/gslice/{a}-{b}", "a"), rate(state, f"split/gslice/{a}-{b}", "b")
            ma, mb = rate(state, f"split/mps/{a}-{b}", "a"), rate(state, f"split/mps/{a}-{b}", "b")
            gx = None if ga is None or gb is None else 100 * ga / (ga + gb)
            mx = None if ma is None or mb is None else 100 * ma / (ma + mb)
            rows.append(("2 split", f"{a}/{b}", "first job's part of total (%)", "-", fmt(cx), fmt(mx), fmt(gx),
                         f"{a}±2", err(state, f"split/gslice/{a}-{b}")))
            ok = gx is not None and abs(gx - a) <= 2
            result(f"compute.split.{a}-{b}", ok, f"gslice {fmt(gx)}:{fmt(None if gx is None else 100 - gx)} (target {a}:{b} ±2), "
                                                 f"MPS {fmt(mx)}, plain {fmt(cx)}")
    def ratio(x, y):
        return None if x is None or not y else x / y

    configs = ("coexec", "mps", "gslice")  # the table's columns after solo
    extra = tuple(cfg for cfg, *_ in EXTRA_GSLICE)  # cases 3 and 4's further gslice configurations
    if "3" in CASES:
        # Interleaved: together / alone for the same process in the same run (phase_steps).
        alone, both = {}, {}
        for cfg in configs + extra:
            key = f"train/{cfg}"
            alone[cfg] = {j: phase_steps(state, key, j, [j]) for j in ("g", "o")}
            both[cfg] = {j: ratio(phase_steps(state, key, j, ["g", "o"]), alone[cfg][j]) for j in ("g", "o")}
        native = alone["coexec"]
        for j, label, target in (("g", "guaranteed ResNet-50", "≥0.97"), ("o", "opportunistic BERT", "≥0.70")):
            rows.append(("3 train", label, "together × alone (same run)", fmt(native[j], "{:.2f} it/s"),
                         *(fmt(both[c][j], "{:.3f}") for c in configs), target, err(state, "train/gslice")))
        for j, label in (("g", "guaranteed alone"), ("o", "opportunistic alone")):
            rows.append(("3 train", f"{label} (partner paused)", "it/s (× plain's alone)", fmt(native[j], "{:.2f}"),
                         *(f"{fmt(alone[c][j], '{:.2f}')} ({fmt(ratio(alone[c][j], native[j]), '{:.3f}')})" for c in configs),
                         "", "MPS: opportunistic at its thread share"))
        for cfg, label, key in EXTRA_GSLICE:
            if f"train/{cfg}" not in state:
                continue
            gm, om = both[cfg]["g"], both[cfg]["o"]
            rows.append(("3 train", f"{label}: guaranteed / opportunistic", "together × alone",
                         "", "", "", f"{fmt(gm, '{:.3f}')} / {fmt(om, '{:.3f}')}", "≥0.97 / ≥0.70", err(state, f"train/{cfg}")))
            result(f"compute.train.{key}", None, f"{label}: guaranteed {fmt(gm, '{:.3f}')}, opportunistic {fmt(om, '{:.3f}')} × alone")
        for cfg in configs + extra:
            held = held_back_ratios(state, f"train/{cfg}")
            if not held:
                continue
            detail = f"median {fmt(statistics.median(held), '{:.3f}')} over {len(held)} phase{'s' if len(held) != 1 else ''} ({fmt(min(held), '{:.2f}')}–{fmt(max(held), '{:.2f}')})"
            rows.append(("3 train", f"{cfg}: guaranteed beside a held-back partner (≤{HELD_BACK:.0%} of its speed alone)",
                         "× its alone phase before", "", "", "", detail, "", "not the partner's GPU work"))
            result(f"compute.train.held_back.{cfg}", None, f"guaranteed beside the opportunistic job held to ≤{HELD_BACK:.0%} "
                                                         f"of its speed alone, × its alone phase before: {detail}")
        g, o = both["gslice"]["g"], both["gslice"]["o"]
        result("compute.train.guaranteed", g is not None and g >= 0.97, f"gslice {fmt(g, '{:.3f}')}× alone (≥0.97); plain {fmt(both['coexec']['g'], '{:.3f}')}, MPS {fmt(both['mps']['g'], '{:.3f}')}")
        result("compute.train.opportunistic", o is not None and o >= 0.70, f"gslice {fmt(o, '{:.3f}')}× alone (≥0.70); plain {fmt(both['coexec']['o'], '{:.3f}')}, MPS {fmt(both['mps']['o'], '{:.3f}')}")
    if "4" in CASES:
        lat, tr, tr_alone = {}, {}, {}
        for cfg in configs + ("gslice-server-only",) + extra:
            key = f"latency/{cfg}"
            lat[cfg] = (phase_latency(state, key, "g", ["g"]), phase_latency(state, key, "g", ["g", "o"]))
            tr_alone[cfg] = phase_steps(state, key, "o", ["o"])
            tr[cfg] = ratio(phase_steps(state, key, "o", ["g", "o"]), tr_alone[cfg])

        def p99(cfg, which):
            x = lat[cfg][which]
            return None if x is None else x["p99_ms"]

        rel = {c: ratio(p99(c, 1), p99(c, 0)) for c in lat}
        rows.append(("4 latency", "guaranteed server p99 together (× alone, same run)", "ms", fmt(p99("coexec", 0), "{:.2f} ms alone"),
                     *(f"{fmt(p99(c, 1), '{:.2f}')} ({fmt(rel[c], '{:.2f}')}×)" for c in configs), "≤1.10×", err(state, "latency/gslice")))
        rows.append(("4 latency", "server p99 alone (partner paused)", "ms", fmt(p99("coexec", 0), "{:.2f}"),
                     *(fmt(p99(c, 0), "{:.2f}") for c in configs), "", ""))
        rows.append(("4 latency", "opportunistic ResNet-50", "together × alone (same run)", fmt(tr_alone["coexec"], "{:.2f} it/s"),
                     *(fmt(tr[c], "{:.3f}") for c in configs), "≥0.50", ""))
        rows.append(("4 latency", "server requests measured alone / together; offered load together", "", "",
                     *(" / ".join(fmt(None if x is None else x["requests"], "{:d}") for x in lat[c]) + "; " +
                       fmt(None if lat[c][1] is None else lat[c][1]["offered_load"], "{:.2f}") for c in configs), "", ""))
        for cfg, label, key in EXTRA_GSLICE:
            if f"latency/{cfg}" not in state:
                continue
            rows.append(("4 latency", f"{label}: server p99 / opportunistic", "× alone", "", "", "",
                         f"{fmt(rel[cfg], '{:.2f}')}× / {fmt(tr[cfg], '{:.3f}')}", "≤1.10× / ≥0.50", err(state, f"latency/{cfg}")))
            result(f"compute.latency.{key}", None, f"{label}: server p99 {fmt(p99(cfg, 1), '{:.2f}')} ms = {fmt(rel[cfg], '{:.2f}')}× alone, "
                                                   f"opportunistic {fmt(tr[cfg], '{:.3f}')} × alone")
        if "latency/gslice-server-only" in state:
            rows.append(("4 latency", "diagnostic: server in gslice, training plain", "p99 × alone / training × alone", "",
                         f"{fmt(rel['gslice-server-only'], '{:.2f}')}× / {fmt(tr['gslice-server-only'], '{:.3f}')}", "", "", "",
                         err(state, "latency/gslice-server-only")))
        solo = state.get("solo/server", {}).get("s")
        if solo:
            rows.append(("4 latency", "server calibration (solo)", "service / rate", f"{solo['service_ms']:.2f} ms",
                         f"{solo['rate_per_s']:.0f} req/s", "", "", "", ""))
        r = rel["gslice"]
        result("compute.latency.p99", r is not None and r <= 1.10, f"gslice p99 {fmt(p99('gslice', 1), '{:.2f}')} ms = {fmt(r, '{:.3f}')}× alone {fmt(p99('gslice', 0), '{:.2f}')} ms (≤1.10); plain {fmt(rel['coexec'], '{:.2f}')}×, MPS {fmt(rel['mps'], '{:.2f}')}×")
        result("compute.latency.opportunistic", tr["gslice"] is not None and tr["gslice"] >= 0.5, f"gslice {fmt(tr['gslice'], '{:.3f}')}× alone (≥0.50); plain {fmt(tr['coexec'], '{:.3f}')}, MPS {fmt(tr['mps'], '{:.3f}')}")
    if "5" in CASES:
        native = [x for x in turn_rates(state, "overhead", "n") if x]
        native_median = statistics.median(native) if native else None
        for ident, label in OVERHEAD_CONFIGS[1:]:
            rr = round_ratios(state, "overhead", ident, "n")
            q = quartiles(rr)
            med = None if q is None else q[1]
            spread = "n/a" if q is None else f"quartiles {q[0]:.3f}-{q[2]:.3f} of {len(rr)} rounds"
            rows.append(("5 overhead", f"ResNet-50 training: {label}", "× native (median of rounds)",
                         fmt(native_median, "{:.2f} it/s"), "-", "-",
                         f"{fmt(med, '{:.4f}')} ({spread})", "≥0.99" if ident == "g" else "", err(state, "overhead")))
            # Steps over seconds in all its turns: the ratio of mean step times.
            rate_n, rate_x = phase_steps(state, "overhead", "n", ["n"]), phase_steps(state, "overhead", ident, [ident])
            by_mean = None if not rate_n or not rate_x else rate_x / rate_n
            detail = (f"{label}: {fmt(med, '{:.4f}')} × native, median of per-round ratios ({spread}; "
                      f"by mean step time over all turns {fmt(by_mean, '{:.4f}')}; "
                      f"native {fmt(native_median, '{:.2f}')} it/s, per round "
                      f"{', '.join(f'{x:.3f}' for x in rr)})")
            if ident == "g":
                result("compute.overhead", med is not None and med >= 0.99, detail)
            else:
                result(f"compute.overhead.{ident}", None, detail)

    head = ("case", "configuration", "metric", "solo", "plain co-exec", "MPS", "gslice", "target", "note")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    table = "\n".join(lines)
    if md_path:
        with open(md_path, "w") as f:
            f.write(table + "\n")
    print(table)
    for line in results:
        print(line)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("phase", choices=["plain", "mps", "report"])
    p.add_argument("--state", required=True)
    p.add_argument("--md")
    args = p.parse_args()
    state = {}
    if os.path.exists(args.state):
        with open(args.state) as f:
            state = json.load(f)
    try:
        if args.phase == "plain":
            phase_plain(state)
        elif args.phase == "mps":
            phase_mps(state)
        else:
            report(state, args.md)
    finally:
        with open(args.state, "w") as f:
            json.dump(state, f, indent=1)


if __name__ == "__main__":
    main()
