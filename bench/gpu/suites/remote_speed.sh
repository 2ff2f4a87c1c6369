#!/usr/bin/env bash
# Remote GPU speed (docs/remote.md, "Speed"): training steps locally and through the forwarding
# client, side by side in one run, interleaved (local first and last).
#   cases:  ResNet-50 batch 32 and BERT-base batch 32 x 128 (the GPU busy), ResNet-50 batch 1
#           (launch-bound); REMOTE_CASES="resnet50:32,bert:32,resnet50:1" to change
#   sides:  local; unix: with the same-host shared-memory rings (shm) and without them
#           (socket, GSLICE_REMOTE_SHM=off); loopback TCP; unix with every call waited for
#           (wait: GSLICE_REMOTE_WAIT=1, synchronous forwarding); REMOTE_SIDES to change
#           (names: local shm socket tcp wait, and unix: the default, the rings)
# Each remote run's losses are compared bit for bit with the local run's. Reports steps/s, the
# ratio to the mean of the local runs, the client's calls and round trips per step, and the
# client process's CPU time per step. Prints RESULT lines and, last, a table; logs in
# $OUT/remote_speed/. Safety: plain device allocations in 16 GiB slices.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export OUT="${OUT:-$PWD/gpu-out}" PYTHONUNBUFFERED=1
mkdir -p "$OUT/remote_speed"
exec python3 - <<'PY'
import os, re, subprocess, sys, time

B = os.environ.get("GSLICE_BUILD", "build")
OUT = os.path.join(os.environ["OUT"], "remote_speed")
STEPS = int(os.environ.get("TRAIN_STEPS", "30"))
CASES = [(c.split(":")[0], int(c.split(":")[1])) for c in
         os.environ.get("REMOTE_CASES", "resnet50:32,bert:32,resnet50:1").split(",") if c]
SIDES = [s for s in os.environ.get("REMOTE_SIDES", "local,shm,socket,tcp,wait,local").split(",") if s]
gslice = os.path.join(B, "bin", "gslice")
remoted = os.path.join(B, "bin", "gslice-remoted")
script = os.path.abspath("bench/gpu/remote/train.py")
env = dict(os.environ)
env["GSLICE_LEDGER"] = f"/dev/shm/gslice-rspeed-{os.getpid()}"
env["GSLICE_SUSPEND_BOARD"] = f"/dev/shm/gslice-rspeed-board-{os.getpid()}"
env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
sock = f"/tmp/gslice-rspeed-{os.getpid()}.sock"
rows = []


def result(name, status, detail):
    print(f"RESULT {name} {status} {detail}", flush=True)


sys.path.insert(0, os.path.abspath("bench/gpu/remote"))
import serve
server, tcp = serve.start(remoted, env, sock, os.path.join(OUT, "gslice-remoted.log"))
try:
    if tcp is None:
        result("remote_speed.server", "FAIL", "gslice-remoted did not listen")
        sys.exit(1)
    remote_unix = [gslice, "run", "--remote", "unix:" + sock, "--memory", "16GiB", "--"]
    sides = {"local": ([gslice, "run", "--memory", "16GiB", "--"], {}),
             "unix": (remote_unix, {}),
             "tcp": ([gslice, "run", "--remote", tcp, "--memory", "16GiB", "--"], {}),
             "wait": (remote_unix, {"GSLICE_REMOTE_WAIT": "1"}),
             "shm": (remote_unix, {"GSLICE_REMOTE_SHM": "on"}),
             "socket": (remote_unix, {"GSLICE_REMOTE_SHM": "off"})}
    for wl, batch in CASES:
        case = f"{wl}-b{batch}"
        got = []
        for i, side in enumerate(SIDES):
            argv, extra = sides[side]
            label = f"{case}-{i}-{side}"
            e = dict(env, **extra)
            t0 = time.monotonic()
            try:
                p = subprocess.run(argv + [sys.executable, script, wl, str(STEPS), str(batch)], env=e,
                                   capture_output=True, text=True, timeout=500)
                rc, out, err = p.returncode, p.stdout, p.stderr
            except subprocess.TimeoutExpired:
                rc, out, err = 124, "", "timed out"
            with open(os.path.join(OUT, label + ".log"), "w") as f:
                f.write(f"$ {' '.join(argv)} ({extra})\nrc={rc} wall={time.monotonic() - t0:.1f}s\n--- stdout\n{out}\n--- stderr\n{err}\n")
            get = lambda key: next((float(l.split()[1]) for l in out.splitlines() if l.startswith(key + " ")), None)
            calls = next((l for l in out.splitlines() if l.startswith("calls per step")), "")
            m = re.search(r"calls per step: ([\d.]+) \(cached ([\d.]+), async ([\d.]+), round trips ([\d.]+)\)", calls)
            got.append({"side": side, "rc": rc, "sps": get("steps_per_s"), "cpu": get("cpu_per_step"),
                        "losses": [l.split()[2] for l in out.splitlines() if l.startswith("loss ")],
                        "calls": float(m.group(1)) if m else None, "trips": float(m.group(4)) if m else None,
                        "err": (err.strip().splitlines() or ["?"])[-1][:160]})
        local = [g for g in got if g["side"] == "local" and g["rc"] == 0 and g["sps"]]
        if not local:
            result(f"remote_speed.{case}", "FAIL", "no local run succeeded")
            continue
        local_sps = sum(g["sps"] for g in local) / len(local)
        local_cpu = sum(g["cpu"] for g in local) / len(local)
        for g in got:
            if g["side"] == "local":
                rows.append((case, "local", f"{g['sps']:.2f}", "1", "-", "-", f"{g['cpu'] * 1e3:.1f}", "-", "-"))
                continue
            if g["rc"] != 0 or not g["sps"]:
                result(f"remote_speed.{case}.{g['side']}", "FAIL", f"exit {g['rc']}: {g['err']}")
                rows.append((case, g["side"], "FAIL", "-", "-", "-", "-", "-", "-"))
                continue
            same = g["losses"] == local[0]["losses"]
            ratio = g["sps"] / local_sps
            per_call = (g["cpu"] - local_cpu) / g["calls"] * 1e6 if g["calls"] else float("nan")
            result(f"remote_speed.{case}.{g['side']}", "PASS" if same else "FAIL",
                   f"{ratio:.3f} of local ({g['sps']:.2f} / {local_sps:.2f} steps/s), losses "
                   f"{'bit for bit equal' if same else 'DIFFER'}, {g['calls']:.0f} calls and {g['trips']:.0f} round trips per step")
            rows.append((case, g["side"], f"{g['sps']:.2f}", f"{ratio:.3f}", f"{g['calls']:.0f}", f"{g['trips']:.0f}",
                         f"{g['cpu'] * 1e3:.1f}", f"{per_call:+.2f}", "equal" if same else "DIFFER"))
        waits = [g for g in got if g["side"] == "wait" and g["sps"]]
        asyncs = [g for g in got if g["side"] in ("shm", "unix") and g["sps"]]
        if waits and asyncs:
            result(f"remote_speed.{case}.async_vs_wait", "INFO", f"{asyncs[0]['sps'] / waits[0]['sps']:.2f}x")
finally:
    serve.stop(server, sock)
    for p in (env["GSLICE_LEDGER"], env["GSLICE_SUSPEND_BOARD"]):
        subprocess.run(["rm", "-rf", p])

print()
print(f"remote speed, {STEPS} steps after 5 warm-up; ratio to the mean of the local runs")
hdr = ("case", "side", "steps/s", "x local", "calls/step", "round trips/step", "client CPU ms/step",
       "CPU us/call vs local", "losses")
w = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
for r in [hdr] + rows:
    print("  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)))
PY
