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
             guaranteed >= 0.97 of solo, opportunistic >= 0.70 of solo
  4 latency  guaranteed BERT inference server at ~50% load + opportunistic ResNet-50 training:
             server p99 <= +10% of solo, training >= 0.5 of solo
  5 overhead one ResNet-50 training job under gslice with no limit >= 99% of native
Environment: COMPUTE_CASES (e.g. "1,2"; default all), COMPUTE_WINDOW_S (measured seconds per
configuration, default 5), COMPUTE_DEADLINE (epoch seconds after which configurations are
skipped), GSLICE_BUILD (build folder holding bin/gslice).
"""

import argparse
import json
import os
import shutil
import signal
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
# Configurations that would start after this time (epoch seconds) are skipped, so that the
# report is always written inside the device's time limit.
DEADLINE = float(os.environ.get("COMPUTE_DEADLINE", "0")) or None


# An opportunistic process that creates its context, runs one kernel and then only waits.
IDLE_PEER = ("import time, torch; x = torch.ones(1 << 20, device='cuda'); assert (x * 2).sum().item() == 2 << 20; "
             "time.sleep(600)")


def gslice_prefix(*flags):
    build = os.environ.get("GSLICE_BUILD", os.path.join(HERE, "..", "..", "..", "build"))
    # The memory limit is set well above what any job here uses: it is not what is measured.
    return [os.path.join(build, "bin", "gslice"), "run", "--memory=60GiB", *flags, "--"]


def throughput(workload, ident, prefix=(), env=None, warmup=2.0):
    return (ident, [*prefix, PY, JOB, "throughput", "--workload", workload, "--id", ident,
                    "--warmup", str(warmup)], env or {})


def server(ident, service_ms=None, prefix=(), env=None):
    argv = [*prefix, PY, JOB, "server", "--id", ident, "--warmup", "3"]
    if service_ms is not None:
        argv += ["--service-ms", f"{service_ms:.4f}"]
    return (ident, argv, env or {})


def mps_env(pct):
    return {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(pct)}


def run_config(name, procs, seconds=None):
    """Starts every process, waits until all are warm, opens one shared window, collects
    each process's result. Returns {ident: result} or {"error": text}."""
    seconds = seconds or WINDOW
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
        with open(os.path.join(sync, ".go"), "w") as f:
            json.dump({"t0": t0, "seconds": seconds}, f)
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
    print(f"{key}: {json.dumps(value)}", flush=True)


def phase_plain(state):
    if "1" in CASES:
        record(state, "cap/solo", run_config("cap/solo", [throughput("matmul", "a")]))
        for cap in CAPS:
            record(state, f"cap/gslice/{cap}",
                   run_config(f"cap/gslice/{cap}", [throughput("matmul", "a", gslice_prefix(f"--compute={cap}%"))]))
    if "2" in CASES:
        record(state, "split/coexec", run_config("split/coexec", [throughput("matmul", "a"), throughput("matmul", "b")]))
        for a, b in SPLITS:
            record(state, f"split/gslice/{a}-{b}", run_config(f"split/gslice/{a}-{b}", [
                throughput("matmul", "a", gslice_prefix("--class=guaranteed", f"--share={a}%")),
                throughput("matmul", "b", gslice_prefix("--class=guaranteed", f"--share={b}%"))]))
    if "3" in CASES or "4" in CASES or "5" in CASES:
        record(state, "solo/resnet50", run_config("solo/resnet50", [throughput("resnet50", "g", warmup=3)]))
    if "3" in CASES:
        record(state, "solo/bert-train", run_config("solo/bert-train", [throughput("bert-train", "o", warmup=3)]))
        record(state, "train/coexec", run_config("train/coexec", [
            throughput("resnet50", "g", warmup=3), throughput("bert-train", "o", warmup=3)]))
        record(state, "train/gslice", run_config("train/gslice", [
            throughput("resnet50", "g", gslice_prefix("--class=guaranteed"), warmup=3),
            throughput("bert-train", "o", gslice_prefix("--class=opportunistic"), warmup=3)]))
        # Diagnostics: what the guaranteed job loses to gslice itself, apart from what the
        # opportunistic job's kernels take: alone in gslice, and next to an opportunistic
        # process that holds a context but launches nothing.
        record(state, "train/gslice-alone", run_config("train/gslice-alone", [
            throughput("resnet50", "g", gslice_prefix("--class=guaranteed"), warmup=3)]))
        idle = subprocess.Popen(gslice_prefix("--class=opportunistic") + [PY, "-c", IDLE_PEER],
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            record(state, "train/gslice-idle-peer", run_config("train/gslice-idle-peer", [
                throughput("resnet50", "g", gslice_prefix("--class=guaranteed"), warmup=3)]))
        finally:
            os.killpg(idle.pid, signal.SIGKILL)
            idle.wait()
        record(state, "solo/resnet50-after", run_config("solo/resnet50-after", [throughput("resnet50", "g", warmup=3)]))
    if "4" in CASES:
        solo = run_config("solo/server", [server("s")], seconds=WINDOW + 4)
        record(state, "solo/server", solo)
        service_ms = solo.get("s", {}).get("service_ms")
        if service_ms:
            record(state, "latency/coexec", run_config("latency/coexec", [
                server("s", service_ms), throughput("resnet50", "o", warmup=3)], seconds=WINDOW + 4))
            # Diagnostic: the server under gslice, the training job plain (what the server's
            # own gate costs, apart from what the class policy does).
            record(state, "latency/gslice-server-only", run_config("latency/gslice-server-only", [
                server("s", service_ms, gslice_prefix("--class=guaranteed")),
                throughput("resnet50", "o", warmup=3)], seconds=WINDOW + 4))
            record(state, "latency/gslice", run_config("latency/gslice", [
                server("s", service_ms, gslice_prefix("--class=guaranteed")),
                throughput("resnet50", "o", gslice_prefix("--class=opportunistic"), warmup=3)],
                seconds=WINDOW + 4))
    if "5" in CASES:
        for i in (1, 2):
            record(state, f"overhead/gslice/{i}", run_config(f"overhead/gslice/{i}", [
                throughput("resnet50", "g", gslice_prefix(), warmup=3)]))
            record(state, f"overhead/native/{i}", run_config(f"overhead/native/{i}", [
                throughput("resnet50", "g", warmup=3)]))


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
            throughput("bert-train", "o", env=mps_env(MPS_OPPORTUNISTIC_PCT), warmup=3)]))
        # gslice's classes with both processes MPS clients (spatial sharing): gslice run
        # asks MPS for below-normal priority for opportunistic work.
        record(state, "train/gslice-mps", run_config("train/gslice-mps", [
            throughput("resnet50", "g", gslice_prefix("--class=guaranteed"), warmup=3),
            throughput("bert-train", "o", gslice_prefix("--class=opportunistic"), warmup=3)]))
    if "4" in CASES:
        service_ms = state.get("solo/server", {}).get("s", {}).get("service_ms")
        if service_ms:
            record(state, "latency/mps", run_config("latency/mps", [
                server("s", service_ms, env=mps_env(100)),
                throughput("resnet50", "o", env=mps_env(MPS_OPPORTUNISTIC_PCT), warmup=3)],
                seconds=WINDOW + 4))
            record(state, "latency/gslice-mps", run_config("latency/gslice-mps", [
                server("s", service_ms, gslice_prefix("--class=guaranteed")),
                throughput("resnet50", "o", gslice_prefix("--class=opportunistic"), warmup=3)],
                seconds=WINDOW + 4))


# ---- report ---------------------------------------------------------------------------

def solo_resnet(state):
    """ResNet-50's solo speed: the mean of the runs before and after the pairs, when both ran."""
    runs = [x for x in (rate(state, "solo/resnet50", "g"), rate(state, "solo/resnet50-after", "g")) if x]
    return sum(runs) / len(runs) if runs else None


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
    if "3" in CASES:
        sg, so = solo_resnet(state), rate(state, "solo/bert-train", "o")
        vals = {}
        for cfg in ("coexec", "mps", "gslice", "gslice-mps"):
            g, o = rate(state, f"train/{cfg}", "g"), rate(state, f"train/{cfg}", "o")
            vals[cfg] = (None if g is None or not sg else g / sg, None if o is None or not so else o / so)
        rows.append(("3 train", "guaranteed ResNet-50", "× solo", fmt(sg, "{:.2f} it/s"),
                     *(fmt(vals[c][0], "{:.3f}") for c in ("coexec", "mps", "gslice")), "≥0.97", err(state, "train/gslice")))
        rows.append(("3 train", "opportunistic BERT", "× solo", fmt(so, "{:.2f} it/s"),
                     *(fmt(vals[c][1], "{:.3f}") for c in ("coexec", "mps", "gslice")), "≥0.70", ""))
        for key, label in (("train/gslice-alone", "diagnostic: guaranteed alone in gslice"),
                           ("train/gslice-idle-peer", "diagnostic: guaranteed next to an idle opportunistic process"),
                           ("solo/resnet50-after", "solo again, after the pairs (drift)")):
            if key in state:
                x = rate(state, key, "g")
                rows.append(("3 train", label, "× solo", "", "", "", fmt(None if x is None or not sg else x / sg, "{:.3f}"), "", err(state, key)))
        if "train/gslice-mps" in state:
            gm, om = vals["gslice-mps"]
            rows.append(("3 train", "gslice on MPS: guaranteed / opportunistic", "× solo", "", "", "",
                         f"{fmt(gm, '{:.3f}')} / {fmt(om, '{:.3f}')}", "≥0.97 / ≥0.70", err(state, "train/gslice-mps")))
            result("compute.train.on-mps", None, f"gslice classes on MPS: guaranteed {fmt(gm, '{:.3f}')}, opportunistic {fmt(om, '{:.3f}')} × solo")
        g, o = vals["gslice"]
        result("compute.train.guaranteed", g is not None and g >= 0.97, f"gslice {fmt(g, '{:.3f}')}× solo (≥0.97); plain {fmt(vals['coexec'][0], '{:.3f}')}, MPS {fmt(vals['mps'][0], '{:.3f}')}")
        result("compute.train.opportunistic", o is not None and o >= 0.70, f"gslice {fmt(o, '{:.3f}')}× solo (≥0.70); plain {fmt(vals['coexec'][1], '{:.3f}')}, MPS {fmt(vals['mps'][1], '{:.3f}')}")
    if "4" in CASES:
        solo = state.get("solo/server", {}).get("s")
        so = solo_resnet(state)
        p99 = {}
        tr = {}
        for cfg in ("coexec", "mps", "gslice", "gslice-mps"):
            r = state.get(f"latency/{cfg}") or {}
            p99[cfg] = r.get("s", {}).get("p99_ms") if "error" not in r else None
            t = rate(state, f"latency/{cfg}", "o")
            tr[cfg] = None if t is None or not so else t / so
        sp99 = solo["p99_ms"] if solo else None
        rel = {c: (None if p99[c] is None or not sp99 else p99[c] / sp99) for c in p99}
        rows.append(("4 latency", "guaranteed server p99", "ms (× solo)", fmt(sp99, "{:.2f} ms"),
                     *(f"{fmt(p99[c], '{:.2f}')} ({fmt(rel[c], '{:.2f}')}×)" for c in ("coexec", "mps", "gslice")),
                     "≤1.10×", err(state, "latency/gslice")))
        rows.append(("4 latency", "opportunistic ResNet-50", "× solo", fmt(so, "{:.2f} it/s"),
                     *(fmt(tr[c], "{:.3f}") for c in ("coexec", "mps", "gslice")), "≥0.50", ""))
        if "latency/gslice-mps" in state:
            rows.append(("4 latency", "gslice on MPS: server p99 / opportunistic", "× solo", "", "", "",
                         f"{fmt(rel['gslice-mps'], '{:.2f}')}× / {fmt(tr['gslice-mps'], '{:.3f}')}", "≤1.10× / ≥0.50",
                         err(state, "latency/gslice-mps")))
            result("compute.latency.on-mps", None, f"gslice classes on MPS: server p99 {fmt(rel['gslice-mps'], '{:.2f}')}× solo, opportunistic {fmt(tr['gslice-mps'], '{:.3f}')} × solo")
        if solo:
            rows.append(("4 latency", "server solo", "p50 / service / load", f"{solo['p50_ms']:.2f} ms",
                         f"service {solo['service_ms']:.2f} ms", f"{solo['rate_per_s']:.0f} req/s", f"{solo['requests']} requests", "", ""))
        def load(key):
            r = state.get(key) or {}
            return None if "error" in r else r.get("s", {}).get("offered_load")
        rows.append(("4 latency", "server's offered load (rate × service time in the window)", "", fmt(load("solo/server"), "{:.2f}"),
                     *(fmt(load(f"latency/{c}"), "{:.2f}") for c in ("coexec", "mps", "gslice")), "", ""))
        d = state.get("latency/gslice-server-only") or {}
        if "error" not in d and "s" in d and sp99:
            dt = rate(state, "latency/gslice-server-only", "o")
            rows.append(("4 latency", "diagnostic: server in gslice, training plain", "p99 ms (× solo) / training × solo", "",
                         f"{d['s']['p99_ms']:.2f} ({d['s']['p99_ms'] / sp99:.2f}×) / {fmt(None if dt is None or not so else dt / so, '{:.3f}')}",
                         "", "", "", ""))
        r = rel["gslice"]
        result("compute.latency.p99", r is not None and r <= 1.10, f"gslice p99 {fmt(p99['gslice'], '{:.2f}')} ms = {fmt(r, '{:.3f}')}× solo {fmt(sp99, '{:.2f}')} ms (≤1.10); plain {fmt(rel['coexec'], '{:.2f}')}×, MPS {fmt(rel['mps'], '{:.2f}')}×")
        result("compute.latency.opportunistic", tr["gslice"] is not None and tr["gslice"] >= 0.5, f"gslice {fmt(tr['gslice'], '{:.3f}')}× solo (≥0.50); plain {fmt(tr['coexec'], '{:.3f}')}, MPS {fmt(tr['mps'], '{:.3f}')}")
    if "5" in CASES:
        nat = [rate(state, f"overhead/native/{i}", "g") for i in (1, 2)] + [rate(state, "solo/resnet50", "g")]
        gsl = [rate(state, f"overhead/gslice/{i}", "g") for i in (1, 2)]
        nat = [x for x in nat if x]
        gsl = [x for x in gsl if x]
        ratio = None if not nat or not gsl else (sum(gsl) / len(gsl)) / (sum(nat) / len(nat))
        rows.append(("5 overhead", "ResNet-50 training, no limit", "× native", fmt(sum(nat) / len(nat) if nat else None, "{:.2f} it/s"),
                     "-", "-", fmt(ratio, "{:.4f}"), "≥0.99", err(state, "overhead/gslice/1")))
        result("compute.overhead", ratio is not None and ratio >= 0.99,
               f"gslice/native {fmt(ratio, '{:.4f}')} (≥0.99); native runs {', '.join(f'{x:.2f}' for x in nat)} it/s, gslice {', '.join(f'{x:.2f}' for x in gsl)}")

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
