"""What gslice costs guaranteed work on MPS beside an active opportunistic job, and where.

Both jobs are MPS clients of one control daemon (bench/gpu/suites/mps_launch.sh owns it).
The training pair (ResNet-50 guaranteed, BERT-base training opportunistic) runs interleaved
(suite.py's phases: guaranteed alone, both, opportunistic alone, both), so each job's speed
together is compared with its own speed alone in the same run:

  plain-p1        both plain; the opportunistic job at MPS client priority 1 (below normal)
  g-gslice        the guaranteed job under gslice run, the opportunistic job plain at priority 1:
                  what gslice costs the guaranteed job by itself (nothing throttles the other)
  gslice          both under gslice run (guaranteed, opportunistic): the product
  gslice-90       the same with the guaranteed job at --protect=0.9
  ...-base        the same with the build in GSLICE_BUILD_BASE (when set): before and after

Then the launch benchmark (bench/interpose_launch.cc, host mode: the host's cost per launch
call) natively and under gslice run --class=guaranteed in turn (MPS_LAUNCH_ROUNDS times,
default 6), alone and beside an opportunistic BERT-base training job under gslice (idle peer:
warmed up and waiting, its context kept; busy peer: training). Each round also runs the
benchmark's pair mode under gslice and natively: bursts through the shim's hook and through
the driver's own cuLaunchKernel alternate in one process, so the hook's cost is read without
two processes' drift (natively both sides are the driver: the method's noise).

  mps_launch.py --out FILE.json     runs everything, prints RESULT lines and a table
Environment: GSLICE_BUILD (the build measured), GSLICE_BUILD_BASE (optional, the one compared),
COMPUTE_PHASE_S / COMPUTE_ROUNDS / COMPUTE_SETTLE_S (suite.py's), MPS_LAUNCH_CONFIGS (names
to run, comma-separated; default all), MPS_LAUNCH_PASSES (the training configurations run this
many times in turn, A B C A B C, so that drift in the call touches each alike; default 1).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite  # noqa: E402

BUILD = os.environ.get("GSLICE_BUILD", os.path.join(suite.HERE, "..", "..", "..", "build"))
BASE = os.environ.get("GSLICE_BUILD_BASE", "")
WANT = {c.strip() for c in os.environ.get("MPS_LAUNCH_CONFIGS", "").split(",") if c.strip()}
LOW = {"CUDA_MPS_CLIENT_PRIORITY": "1"}


def gslice(build, cls, protect=None):
    extra = [f"--protect={protect}"] if protect else []
    return [os.path.join(build, "bin", "gslice"), "run", "--memory=60GiB", f"--class={cls}", *extra, "--"]


def train_configs():
    out = [("plain-p1", (), ())]
    for tag, build in (("", BUILD), ("-base", BASE)):
        if not build:
            continue
        out.append((f"g-gslice{tag}", gslice(build, "guaranteed"), ()))
        out.append((f"gslice{tag}", gslice(build, "guaranteed"), gslice(build, "opportunistic")))
        out.append((f"gslice-90{tag}", gslice(build, "guaranteed", "0.9"), gslice(build, "opportunistic")))
    return [c for c in out if not WANT or c[0] in WANT]


def speeds(state, key, ident):
    """ident's steps per second in its alone phases and in the together phases."""
    counts = suite.phase_counts(state, key, ident)
    if not counts:
        return None
    alone, together = [], []
    for who, steps, secs in counts:
        if secs <= 0 or ident not in who:
            continue
        (together if len(who) > 1 else alone).append(steps / secs)
    if not alone or not together:
        return None
    return {"alone": statistics.mean(alone), "together": statistics.mean(together),
            "ratio": statistics.mean(together) / statistics.mean(alone)}


def mean_of(passes):
    """Each job's ratio together/alone over the passes of one configuration: their mean."""
    out = {}
    for job in ("g", "o"):
        ratios = [p[job]["ratio"] for p in passes if p.get(job)]
        out[job] = {"ratio": statistics.mean(ratios), "ratios": ratios} if ratios else None
    return out


def bench_once(build, prefix):
    """Median ns per launch call (host mode) of one run of the launch benchmark, or None."""
    bench = os.path.join(build, "bin", "gslice_interpose_launch_bench")
    r = subprocess.run([*prefix, bench, "20000", "9", "host"], capture_output=True, text=True, timeout=120)
    try:  # the median ns per launch, on its last stdout line
        return float(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else None
    except (ValueError, IndexError):
        return None


def pair_once(build, prefix):
    """(hooked, driver, hooked - driver) medians, ns per launch call, of one pair-mode run, or None."""
    bench = os.path.join(build, "bin", "gslice_interpose_launch_bench")
    r = subprocess.run([*prefix, bench, "20000", "9", "pair"], capture_output=True, text=True, timeout=120)
    try:
        return [float(x) for x in r.stdout.strip().splitlines()[-1].split()] if r.returncode == 0 else None
    except (ValueError, IndexError):
        return None


def parts_once(build):
    """What a launch path may spend besides the launch (the benchmark's parts mode, natively):
    {name: ns per call}, or None."""
    bench = os.path.join(build, "bin", "gslice_interpose_launch_bench")
    r = subprocess.run([bench, "20000", "5", "parts"], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return None
    try:
        return {k: float(v) for k, v in (line.split() for line in r.stdout.strip().splitlines())}
    except ValueError:
        return None


def start_peer(prefix, runs):
    """An opportunistic BERT-base training job under gslice: working (runs) or warmed up and
    waiting for a window that never comes (idle, its context kept). Returns (process, folder)."""
    sync = tempfile.mkdtemp(prefix="gslice-launch-")
    argv = [*prefix, suite.PY, suite.JOB, "throughput", "--workload", "bert-train", "--id", "p", "--warmup", "2",
            "--sync", sync]
    peer = subprocess.Popen(argv, env=dict(os.environ, **LOW), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.time() + 120
    while not os.path.exists(os.path.join(sync, "p.ready")) and time.time() < deadline and peer.poll() is None:
        time.sleep(0.05)
    if runs:
        with open(os.path.join(sync, "go"), "w") as f:
            json.dump({"t0": time.time(), "seconds": 600}, f)
        time.sleep(2)
    return peer, sync


def stop_peer(peer, sync):
    if peer.poll() is None:
        os.killpg(peer.pid, 9)
        peer.wait()
    subprocess.run(["rm", "-rf", sync])


def launch_rounds(build, peer, rounds):
    """Native and gslice run --class=guaranteed in turn, `rounds` times each: the medians, and
    the median of the per-round differences (gslice - native), which the host's drift between
    rounds does not enter."""
    native, shimmed, hook, noise = [], [], [], []
    for _ in range(rounds):
        native.append(bench_once(build, []))
        shimmed.append(bench_once(build, gslice(build, "guaranteed")))
        hook.append(pair_once(build, gslice(build, "guaranteed")))
        noise.append(pair_once(build, []))
    pairs = [(a, b) for a, b in zip(native, shimmed) if a is not None and b is not None]
    out = {"peer": peer, "native_ns": native, "gslice_ns": shimmed, "pair_gslice": hook, "pair_native": noise}
    if pairs:
        out.update(native_median=statistics.median(a for a, _ in pairs), gslice_median=statistics.median(b for _, b in pairs),
                   diff_median=statistics.median(b - a for a, b in pairs))
    hooks = [h[2] for h in hook if h]
    noises = [h[2] for h in noise if h]
    if hooks:
        out["hook_ns_median"] = statistics.median(hooks)
    if noises:
        out["noise_ns_median"] = statistics.median(noises)
    print(f"RESULT mps_launch.launch.{peer} {json.dumps(out)}", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    state, doc = {}, {"train": {}, "launch": {}, "parts": None}
    passes = int(os.environ.get("MPS_LAUNCH_PASSES", "1"))
    for n in range(passes):
        for name, gp, op in train_configs():
            key = f"train/{name}/{n}"
            res = suite.run_config(key, [
                suite.throughput("resnet50", "g", gp, warmup=3),
                suite.throughput("bert-train", "o", op, env=(LOW if not op else None), warmup=3)],
                phases=suite.interleaved(suite.TOGETHER))
            state[key] = res
            one = {"g": speeds(state, key, "g"), "o": speeds(state, key, "o"), "error": res.get("error")}
            print(f"RESULT mps_launch.train.{name}.{n} {json.dumps(one)}", flush=True)
            doc["train"].setdefault(name, {"passes": []})["passes"].append(one)
            doc["train"][name].update(mean_of(doc["train"][name]["passes"]))
            with open(args.out, "w") as f:
                json.dump(doc, f, indent=1)
    if not WANT or "launch" in WANT:
        rounds = int(os.environ.get("MPS_LAUNCH_ROUNDS", "6"))
        doc["parts"] = parts_once(BUILD)
        print(f"RESULT mps_launch.parts {json.dumps(doc['parts'])}", flush=True)
        doc["launch"]["alone"] = launch_rounds(BUILD, "alone", rounds)
        for runs, label in ((False, "idle-peer"), (True, "busy-peer")):
            peer, sync = start_peer(gslice(BUILD, "opportunistic"), runs)
            try:
                doc["launch"][label] = launch_rounds(BUILD, label, rounds)
            finally:
                stop_peer(peer, sync)
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
    print("\n| configuration | guaranteed together/alone (mean; passes) | opportunistic together/alone (mean; passes) |")
    print("|---|---|---|")
    for name, v in doc["train"].items():
        f = lambda s: f"{s['ratio']:.3f}; " + " ".join(f"{r:.3f}" for r in s["ratios"]) if s else "n/a"  # noqa: E731
        print(f"| {name} | {f(v['g'])} | {f(v['o'])} |")
    print("\n| launch call (host, ns, medians of turns) | native | gslice guaranteed | gslice - native "
          "| hook - driver, one process | the same natively (noise) |")
    print("|---|---|---|---|---|---|")
    for name, v in doc["launch"].items():
        print(f"| {name} | {v.get('native_median')} | {v.get('gslice_median')} | {v.get('diff_median')} "
              f"| {v.get('hook_ns_median')} | {v.get('noise_ns_median')} |")

if __name__ == "__main__":
    main()
