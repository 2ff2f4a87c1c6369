"""What a guaranteed job sees when an opportunistic job beside it faults, on MPS and time-sliced.

Each case runs a guaranteed job (a PyTorch loop of bf16 matrix products, each result checked
against the first) and, once it is running, an opportunistic job that fails one way:

  illegal   a kernel writes through a bad address (CUDA_ERROR_ILLEGAL_ADDRESS, a fatal fault)
  killed    SIGKILL while its kernel spins on the GPU (a process that dies mid-kernel)
  oom       allocates until the device refuses (an ordinary error, not a fault)
  trap      a kernel executes a trap instruction (a fatal fault of another kind)

on two substrates: time-sliced (no MPS: separate contexts) and MPS (both clients of one
control daemon, one uid: one MPS server). For each: whether the guaranteed job kept running
and computing right, its error if any, its speed before and after the fault, and whether a new
client of the same substrate can start a context afterwards.

  mps_faults.py --out FILE.json     (bench/gpu/suites/mps_faults.sh owns the MPS daemon)
Environment: MPS_FAULTS_CASES (default all), MPS_FAULTS_SUBSTRATES (timeslice,mps),
MPS_PIPE (the daemon's CUDA_MPS_PIPE_DIRECTORY), MPS_LOG.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

PY = sys.executable
CASES = [c for c in os.environ.get("MPS_FAULTS_CASES", "illegal,killed,oom,trap").split(",") if c]
SUBSTRATES = [s for s in os.environ.get("MPS_FAULTS_SUBSTRATES", "timeslice,mps").split(",") if s]

GUARANTEED = r'''
import json, os, sys, time, torch
out = sys.argv[1]
seconds = float(sys.argv[2])  # at most; it stops 5 s after the stop file appears
stop = out + ".stop"
torch.manual_seed(0)
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
ref = (a @ b).float().sum().item()
steps, wrong, error, t0 = [], 0, None, time.time()
open(out + ".ready", "w").close()
try:
    while time.time() - t0 < seconds and not (os.path.exists(stop) and time.time() > os.path.getmtime(stop) + 5):
        for _ in range(8):
            c = a @ b
        v = c.float().sum().item()
        if v != ref:
            wrong += 1
        steps.append(time.time())
except Exception as e:  # what the fault beside did to this process
    error = f"{type(e).__name__}: {e}"[:400]
json.dump({"steps": steps, "wrong": wrong, "error": error, "t0": t0}, open(out, "w"))
'''

OPPORTUNISTIC = r'''
import ctypes, os, sys, time
case = sys.argv[1]
mark = sys.argv[2]
if case == "oom":
    import torch
    held = []
    try:
        while True:
            held.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
    except Exception as e:
        open(mark, "w").write(f"{type(e).__name__}: {e}"[:300])
    time.sleep(1)
    sys.exit(0)
import cupy as cp
src = r"""
extern "C" __global__ void bad(int* p) { *(volatile int*)(p + (1ull << 40)) = 1; }
extern "C" __global__ void spin(long long cycles) { long long s = clock64(); while (clock64() - s < cycles) {} }
extern "C" __global__ void trapper() { asm volatile("trap;"); }
"""
mod = cp.RawModule(code=src)
x = cp.zeros(16, dtype=cp.int32)
open(mark + ".armed", "w").close()
try:
    if case == "illegal":
        mod.get_function("bad")((1,), (1,), (x,))
    elif case == "trap":
        mod.get_function("trapper")((1,), (1,), ())
    elif case == "killed":
        mod.get_function("spin")((132,), (128,), (cp.int64(60 * 2_000_000_000),))
    cp.cuda.Device().synchronize()
    open(mark, "w").write("no error")
except Exception as e:
    open(mark, "w").write(f"{type(e).__name__}: {e}"[:300])
'''

NEW_CLIENT = r'''
import torch
x = torch.ones(1024, device="cuda")
print(float(x.sum().item()))
'''


def run_case(substrate, case, env, folder):
    g_out = os.path.join(folder, f"{substrate}-{case}-g.json")
    mark = os.path.join(folder, f"{substrate}-{case}-o.txt")
    seconds = 150.0
    g = subprocess.Popen([PY, "-c", GUARANTEED, g_out, str(seconds)], env=env, stdout=subprocess.DEVNULL,
                         stderr=open(g_out + ".log", "w"))
    deadline = time.time() + 120
    while not os.path.exists(g_out + ".ready") and time.time() < deadline and g.poll() is None:
        time.sleep(0.05)
    time.sleep(3)  # the guaranteed job's speed before
    t_fault = time.time()
    o_env = dict(env, CUDA_MPS_CLIENT_PRIORITY="1")
    o = subprocess.Popen([PY, "-c", OPPORTUNISTIC, case, mark], env=o_env, stdout=subprocess.DEVNULL,
                         stderr=open(mark + ".log", "w"), start_new_session=True)
    if case == "killed":
        until = time.time() + 60
        while not os.path.exists(mark + ".armed") and time.time() < until and o.poll() is None:
            time.sleep(0.05)
        time.sleep(2)  # the spin kernel is running
        t_fault = time.time()
        os.killpg(o.pid, signal.SIGKILL)
    try:
        o_rc = o.wait(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(o.pid, signal.SIGKILL)
        o_rc = o.wait()
    open(g_out + ".stop", "w").close()  # the guaranteed job's speed after: 5 s more
    try:
        g_rc = g.wait(timeout=60)
    except subprocess.TimeoutExpired:
        g.kill()
        g_rc = "hung"
    doc = {"substrate": substrate, "case": case, "o_rc": o_rc, "g_rc": g_rc,
           "o_saw": open(mark).read() if os.path.exists(mark) else None}
    try:
        r = json.load(open(g_out))
        steps = r["steps"]
        before = [t for t in steps if t < t_fault]
        after = [t for t in steps if t > t_fault + 1]
        rate = lambda ts: (len(ts) - 1) / (ts[-1] - ts[0]) if len(ts) > 2 else 0.0  # noqa: E731
        doc.update(g_error=r["error"], g_wrong=r["wrong"], g_steps_before=len(before), g_steps_after=len(after),
                   g_rate_before=rate(before), g_rate_after=rate(after))
    except (OSError, ValueError, KeyError) as e:
        doc.update(g_error=f"no result: {e}", g_log=open(g_out + ".log").read()[-400:] if os.path.exists(g_out + ".log") else "")
    n = subprocess.run([PY, "-c", NEW_CLIENT], env=env, capture_output=True, text=True, timeout=120)
    doc["new_client"] = "ok" if n.returncode == 0 and n.stdout.strip() == "1024.0" else f"rc {n.returncode}: {n.stderr[-300:]}"
    doc["g_survived"] = g_rc == 0 and doc.get("g_error") is None and doc.get("g_wrong", 1) == 0 and doc.get("g_steps_after", 0) > 0
    print(f"RESULT mps_faults.{substrate}.{case} {json.dumps(doc)}", flush=True)
    return doc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="gslice-faults-")
    base = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
    results = []
    for substrate in SUBSTRATES:
        env = dict(base)
        if substrate == "mps":
            env.update(CUDA_MPS_PIPE_DIRECTORY=os.environ["MPS_PIPE"], CUDA_MPS_LOG_DIRECTORY=os.environ["MPS_LOG"])
        for case in CASES:
            results.append(run_case(substrate, case, env, folder))
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)
    print("\n| substrate | opportunistic fault | it saw | guaranteed job | its error | speed after/before | new client |")
    print("|---|---|---|---|---|---|---|")
    for d in results:
        ratio = (d.get("g_rate_after", 0) / d["g_rate_before"]) if d.get("g_rate_before") else 0
        print(f"| {d['substrate']} | {d['case']} | {(d.get('o_saw') or '')[:40]} | "
              f"{'survived' if d['g_survived'] else 'HURT'} | {(d.get('g_error') or '-')[:60]} | {ratio:.2f} | {d['new_client'][:30]} |")


if __name__ == "__main__":
    main()
