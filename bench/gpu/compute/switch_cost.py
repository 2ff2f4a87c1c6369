"""What a guaranteed request pays when another process used the GPU in its idle time, even
though that work finished before the request came: on a GPU that time-slices processes the
request then needs a context switch back, and it may find caches and TLBs cold. The
overlap that the opportunistic controller measures (docs/compute.md) does not see this.

Two processes on one GPU, on one shared schedule of 10 ms periods:
  server   at the start of each period runs a request (20 bf16 matmuls, 1024^2, then a
           synchronize) and times it on the host;
  other    4 ms into each period runs a burst and synchronizes (done well before the next
           request), or nothing.
Bursts (each for PERIODS periods, in rounds so drift spreads over all): none, one tiny
kernel, a 0.1 ms matmul, a 1 ms matmul, and a 256 MiB fill (evicts the L2). Prints the
server's median request time per burst and its excess over "none" (SWITCH lines).

  python3 switch_cost.py [--periods N] [--rounds R]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PERIOD_S = 0.010
BURSTS = ["none", "tiny", "mm0.1ms", "mm1ms", "fill256MiB"]


def server(t0, slots, out):
    import torch
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    times = []
    for k in range(slots):
        at = t0 + k * PERIOD_S
        while time.time() < at:
            pass
        s = time.perf_counter()
        x = a
        for _ in range(20):
            x = torch.mm(x, b)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - s)
    with open(out, "w") as f:
        json.dump(times, f)


def other(t0, plan):
    import torch
    tiny = torch.zeros(1, device="cuda")
    m1 = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    m2 = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    fill = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    for k, burst in enumerate(plan):
        at = t0 + k * PERIOD_S + 0.004
        while time.time() < at:
            time.sleep(0.0002)
        if burst == "tiny":
            tiny.add_(1)
        elif burst == "mm0.1ms":
            torch.mm(m1, m1)
        elif burst == "mm1ms":
            torch.mm(m2, m2)
        elif burst == "fill256MiB":
            fill.fill_(k & 0xFF)
        torch.cuda.synchronize()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("role", nargs="?", default="run", choices=["run", "server", "other"])
    p.add_argument("--t0", type=float)
    p.add_argument("--plan")
    p.add_argument("--out")
    p.add_argument("--periods", type=int, default=100)
    p.add_argument("--rounds", type=int, default=4)
    args = p.parse_args()
    if args.role == "server":
        return server(args.t0, len(args.plan.split(",")), args.out)
    if args.role == "other":
        return other(args.t0, args.plan.split(","))
    # Each round runs every burst for --periods periods; the first 10 of each block are
    # not measured (the previous burst's state).
    plan = [b for _ in range(args.rounds) for b in BURSTS for _ in range(args.periods)]
    out = f"/tmp/switch-cost-{os.getpid()}.json"
    t0 = time.time() + 8.0  # both processes initialise CUDA first
    common = ["--t0", repr(t0), "--plan", ",".join(plan)]
    procs = [subprocess.Popen([sys.executable, __file__, "server", *common, "--out", out]),
             subprocess.Popen([sys.executable, __file__, "other", *common])]
    rc = [q.wait() for q in procs]
    if any(rc):
        print(f"SWITCH error: processes exited {rc}")
        return 1
    with open(out) as f:
        times = json.load(f)
    os.unlink(out)
    per = {b: [] for b in BURSTS}
    for k, (b, t) in enumerate(zip(plan, times)):
        if k % args.periods >= 10:
            per[b].append(t * 1e6)
    base = statistics.median(per["none"])
    for b in BURSTS:
        med = statistics.median(per[b])
        print(f"SWITCH {b}: request median {med:.1f} us (excess {med - base:+.1f} us over none), "
              f"p90 {statistics.quantiles(per[b], n=10)[-1]:.1f} us, n={len(per[b])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
