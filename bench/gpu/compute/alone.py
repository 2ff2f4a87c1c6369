"""One training job alone: its speed under gslice's classes against native, with no other
process on the GPU or beside an idle guaranteed process (one that served a few requests
and then sleeps, its context kept). Each configuration runs ROUNDS times, interleaved, so the
host's drift spreads over all of them; every other round runs them in reverse order, so no
configuration always follows the same one.

  python3 alone.py [--workload resnet50] [--seconds 8] [--rounds 2] [--gslice PATH] [--logs DIR]
                   [--configs native,no-class,opportunistic,opportunistic-beside-idle]
  python3 alone.py job --workload W --seconds S      (one measured run; prints ALONE it/s)
  python3 alone.py idle --seconds S                  (the idle guaranteed process)
  python3 alone.py count --workload W                (kernels launched per step, by the profiler)

Configurations:
  native                     the job as it is
  no-class                   gslice run --memory=60GiB (no --class: guaranteed)
  opportunistic              gslice run --memory=60GiB --class=opportunistic
  opportunistic-beside-idle  the same beside an idle guaranteed process
The summary gives each configuration's mean speed over native's, and the median of its
per-round ratios (each against native in the same round). Separate runs of a few seconds move
with the host by several percent; the compute suite's case 5 (suite.py) measures gslice with no
limit, and the layers it is made of, against native in turns seconds apart.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def build(workload):
    """The workload's training (or inference) step, from workloads.py."""
    sys.path.insert(0, HERE)
    import workloads
    return workloads.build(workload)


def job(workload, seconds):
    import torch
    step = build(workload)
    end = time.time() + 3
    while time.time() < end:
        step()
        torch.cuda.synchronize()
    n, t0 = 0, time.time()
    while time.time() - t0 < seconds:
        step()
        n += 1
    torch.cuda.synchronize()
    print(f"ALONE {n / (time.time() - t0):.3f}", flush=True)


def count(workload):
    import torch
    step = build(workload)
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    steps = 5
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    print(f"COUNT {workload}: {len(kernels) / steps:.0f} GPU activities per step (kernels, copies, memsets)", flush=True)


def idle(seconds):
    import torch
    step = build("bert-infer")
    for _ in range(20):
        step()
        torch.cuda.synchronize()
    print("IDLE ready", flush=True)
    time.sleep(seconds)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("role", nargs="?", default="run", choices=["run", "job", "idle", "count"])
    p.add_argument("--workload", default="resnet50")
    p.add_argument("--seconds", type=float, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--gslice", default=os.path.join(HERE, "..", "..", "..", "build", "bin", "gslice"))
    p.add_argument("--logs")
    p.add_argument("--configs", default="native,no-class,opportunistic,opportunistic-beside-idle",
                   help="which configurations to run, in this order (native is always run: the others are against it)")
    args = p.parse_args()
    if args.role == "job":
        return job(args.workload, args.seconds)
    if args.role == "idle":
        return idle(args.seconds)
    if args.role == "count":
        return count(args.workload)
    g = [args.gslice, "run", "--memory=60GiB"]
    me = [sys.executable, __file__]
    known = {
        "native": ("native", [], False),
        "no-class": ("gslice, no class", g + ["--"], False),
        "opportunistic": ("opportunistic", g + ["--class=opportunistic", "--"], False),
        "opportunistic-beside-idle": ("opportunistic beside an idle guaranteed process", g + ["--class=opportunistic", "--"], True),
    }
    chosen = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in known]
    if unknown:
        p.error(f"--configs: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    if "native" not in chosen:
        chosen.insert(0, "native")
    configs = {known[c][0]: known[c][1:] for c in chosen}
    speeds = {c: [] for c in configs}
    for r in range(args.rounds):
        order = list(configs.items()) if r % 2 == 0 else list(reversed(configs.items()))
        for name, (prefix, with_idle) in order:
            peer = None
            if with_idle:
                peer = subprocess.Popen(g[:2] + ["--memory=8GiB", "--class=guaranteed", "--"] + me + ["idle", "--seconds", "120"],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                if "IDLE ready" not in peer.stdout.readline():
                    print(f"ALONE error: the idle guaranteed process did not start")
                    peer.kill()
                    return 1
                time.sleep(1)
            log = f"{args.logs}/alone-{r}-{len(speeds[name])}-{name.replace(' ', '_').replace(',', '')}.log" if args.logs else os.devnull
            with open(log, "w") as f:
                out = subprocess.run(prefix + me + ["job", "--workload", args.workload, "--seconds", str(args.seconds)],
                                     stdout=subprocess.PIPE, stderr=f, text=True).stdout
            if peer is not None:
                peer.kill()
                peer.wait()
            line = [l for l in out.splitlines() if l.startswith("ALONE ")]
            speeds[name].append(float(line[0].split()[1]) if line else float("nan"))
            print(f"round {r} {name}: {speeds[name][-1]:.2f} it/s", flush=True)
    base = statistics.fmean(speeds["native"])
    for name, v in speeds.items():
        paired = statistics.median(x / n for x, n in zip(v, speeds["native"]))
        print(f"ALONE {args.workload} {name}: {statistics.fmean(v):.2f} it/s ({statistics.fmean(v) / base:.3f} x native, "
              f"per-round median {paired:.3f}; runs {', '.join(f'{x:.2f}' for x in v)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
