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
  native-raised              native, its default stream raised to the device's greatest
                             priority (as the shim does for a guaranteed process), by the job
  preload                    the shims preloaded, no gslice run: no class, no memory limit
  preload-guaranteed         the same with GSLICE_CLASS=guaranteed
  no-class                   gslice run --memory=60GiB (no --class: guaranteed)
  opportunistic              gslice run --memory=60GiB --class=opportunistic
  opportunistic-beside-idle  the same beside an idle guaranteed process
The summary gives each configuration's mean speed over native's, and the median of its
per-round ratios (each against native in the same round).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def raise_default_stream():
    """Gives the legacy default stream the device's greatest priority, through the driver."""
    import ctypes
    import torch
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the primary context is current from here
    cuda = ctypes.CDLL("libcuda.so.1")
    least, greatest = ctypes.c_int(), ctypes.c_int()
    rc = cuda.cuCtxGetStreamPriorityRange(ctypes.byref(least), ctypes.byref(greatest))
    if rc != 0:
        raise SystemExit(f"cuCtxGetStreamPriorityRange failed ({rc})")
    value = (ctypes.c_char * 64)()  # CUstreamAttrValue; priority is its first int
    ctypes.c_int.from_buffer(value).value = greatest.value
    rc = cuda.cuStreamSetAttribute(ctypes.c_void_p(1), 8, ctypes.byref(value))  # CU_STREAM_LEGACY, PRIORITY
    if rc != 0:
        raise SystemExit(f"cuStreamSetAttribute(CU_STREAM_LEGACY, PRIORITY) failed ({rc})")
    print(f"default stream raised to priority {greatest.value}", file=sys.stderr, flush=True)


def build(workload):
    """The workload's training (or inference) step, from workloads.py."""
    sys.path.insert(0, HERE)
    import workloads
    return workloads.build(workload)


def job(workload, seconds):
    import torch
    if os.environ.get("ALONE_RAISE_DEFAULT_STREAM") == "1":
        raise_default_stream()
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
    shims = os.path.join(os.path.dirname(os.path.abspath(args.gslice)), "..", "lib", "gslice")
    preload = ["env", "-u", "GSLICE_CLASS", f"LD_PRELOAD={shims}/libcuda.so.1 {shims}/libnvidia-ml.so.1"]
    known = {
        "native": ("native", [], False),
        "native-raised": ("native, default stream raised", ["env", "ALONE_RAISE_DEFAULT_STREAM=1"], False),
        "preload": ("shims preloaded, no class", preload, False),
        "preload-guaranteed": ("shims preloaded, guaranteed", preload + ["GSLICE_CLASS=guaranteed"], False),
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
