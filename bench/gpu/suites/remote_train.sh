#!/usr/bin/env bash
# Frameworks and training through the forwarding client on the real driver (docs/remote.md):
# gslice-remoted serves a unix socket and loopback TCP on this machine; each check and each
# training run goes locally (gslice run) and through the client, the answers compared. The
# client runs with the GPU's device files hidden (bench/gpu/remote/without_gpu_files.sh, root).
#   checks: torch tensor op, expandable segments (torch_exp), torch.compile, JAX, CuPy:
#           the same value locally and remotely; hostshare: page-locked memory used as the
#           driver allows (gslice_remote_probe hostshare: zero-copy memset and kernel, copies
#           in stream order, a captured copy replayed), the same output locally and remotely
#   training: ResNet-50 (batch 32; resnet50_loader: each batch copied from page-locked memory
#           without blocking) and BERT-base (batch 8 x 128) for TRAIN_STEPS steps
#           (default 100), deterministic, fixed seeds: losses bit for bit equal to local over
#           unix: with the shared-memory rings (unix, the default) and without them
#           (unix_socket, GSLICE_REMOTE_SHM=off), and over loopback TCP; steps/s remote / local;
#           the client's calls per step (cached, sent without waiting, round trips).
# Prints RESULT lines and, last, a short table; logs in $OUT/remote_train/.
# Safety: plain device allocations in 16 GiB slices; no managed memory.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export OUT="${OUT:-$PWD/gpu-out}" PYTHONUNBUFFERED=1
mkdir -p "$OUT/remote_train"
exec python3 - <<'PY'
import os, re, signal, subprocess, sys, time

B = os.environ.get("GSLICE_BUILD", "build")
OUT = os.path.join(os.environ["OUT"], "remote_train")
STEPS = int(os.environ.get("TRAIN_STEPS", "100"))
WORKLOADS = [w for w in os.environ.get("TRAIN_WORKLOADS", "resnet50,bert").split(",") if w]
CHECKS = [c for c in os.environ.get("TRAIN_CHECKS", "tensor,torch_exp,compile,jax,jax_noautotune,cupy,hostshare").split(",") if c]
gslice = os.path.join(B, "bin", "gslice")
remoted = os.path.join(B, "bin", "gslice-remoted")
script = os.path.abspath("bench/gpu/remote/train.py")
env = dict(os.environ)
env["GSLICE_LEDGER"] = f"/dev/shm/gslice-rtrain-{os.getpid()}"
env["GSLICE_SUSPEND_BOARD"] = f"/dev/shm/gslice-rtrain-board-{os.getpid()}"
env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
sock = f"/tmp/gslice-rtrain-{os.getpid()}.sock"
rows = []


def result(name, status, detail):
    print(f"RESULT {name} {status} {detail}", flush=True)
    rows.append((name, status, detail))


def run(label, argv, timeout):
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = 124, (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timed out"
    wall = time.monotonic() - t0
    with open(os.path.join(OUT, label + ".log"), "w") as f:
        f.write(f"$ {' '.join(argv)}\nrc={rc} wall={wall:.1f}s\n--- stdout\n{out}\n--- stderr\n{err}\n")
    return rc, out, err


def last_err(err):
    lines = [l for l in err.strip().splitlines() if l.strip()]
    return (lines or ["(no output)"])[-1][:200]


sys.path.insert(0, os.path.abspath("bench/gpu/remote"))
import serve
server, tcp = serve.start(remoted, env, sock, os.path.join(OUT, "gslice-remoted.log"))
try:
    if tcp is None:
        result("remote_train.server", "FAIL", "gslice-remoted did not listen (remote_train/gslice-remoted.log)")
        sys.exit(1)
    # The client runs where the GPU's device files are out of reach (a mount namespace with
    # /dev/nvidia* hidden), checked first: there a local PyTorch finds no GPU.
    hide = [os.path.abspath("bench/gpu/remote/without_gpu_files.sh")]
    rc, out, err = run("hidden-local", hide + [sys.executable, "-c",
                       "import torch; print('cuda', torch.cuda.is_available())"], 120)
    if rc == 0 and "cuda False" in out:
        result("remote_train.no_gpu_files", "PASS",
               "with /dev/nvidia* hidden a local PyTorch finds no GPU; every remote run below is made so")
    else:
        result("remote_train.no_gpu_files", "INFO",
               f"cannot hide the device files here (exit {rc}: {last_err(err) if rc else out.strip()}); remote runs see them")
        hide = []
    sides = {"local": [gslice, "run", "--memory", "16GiB", "--"],
             "unix": hide + [gslice, "run", "--remote", "unix:" + sock, "--memory", "16GiB", "--"],
             "unix_socket": hide + ["env", "GSLICE_REMOTE_SHM=off", gslice, "run", "--remote", "unix:" + sock,
                                    "--memory", "16GiB", "--"],
             "tcp": hide + [gslice, "run", "--remote", tcp, "--memory", "16GiB", "--"]}

    for name in CHECKS:
        vals = {}
        for side in ("local", "unix"):
            if name == "hostshare":
                # The probe's whole output is the value (every line verified by the probe).
                argv = sides[side] + [os.path.join(B, "bin", "gslice_remote_probe"), "hostshare"]
                rc, out, err = run(f"check-{name}-{side}", argv, 300)
                vals[side] = out.strip().replace("\n", "; ") if rc == 0 and "verified" in out else None
                if vals[side] is None:
                    vals[side + "_err"] = f"exit {rc}: {last_err(err or out)}"
                continue
            rc, out, err = run(f"check-{name}-{side}", sides[side] + [sys.executable, script, "check", name], 300)
            v = [l.split(None, 1)[1] for l in out.splitlines() if l.startswith("value ")]
            vals[side] = v[0] if rc == 0 and v and "ok" in out.splitlines() else None
            if vals[side] is None:
                vals[side + "_err"] = f"exit {rc}: {last_err(err)}"
        if vals["local"] is None:
            result(f"remote_train.check.{name}", "INFO", "does not run locally: " + vals["local_err"])
        elif vals["unix"] is None:
            result(f"remote_train.check.{name}", "FAIL", "through the client: " + vals["unix_err"])
        else:
            same = vals["local"] == vals["unix"]
            result(f"remote_train.check.{name}", "PASS" if same else "FAIL",
                   f"local {vals['local']} remote {vals['unix']}" + ("" if same else " (differ)"))

    for wl in WORKLOADS:
        got = {}
        for side in ("local", "unix", "unix_socket", "tcp", "local"):
            label = f"train-{wl}-{side}" + ("-after" if side == "local" and "local" in got else "")
            rc, out, err = run(label, sides[side] + [sys.executable, script, wl, str(STEPS)], 400)
            losses = [l.split()[2] for l in out.splitlines() if l.startswith("loss ")]
            sps = [float(l.split()[1]) for l in out.splitlines() if l.startswith("steps_per_s ")]
            calls = [l for l in out.splitlines() if l.startswith("calls per step")]
            entry = {"rc": rc, "losses": losses, "sps": sps[0] if sps else None, "calls": calls[0] if calls else "",
                     "err": last_err(err)}
            if side == "local" and "local" in got:
                got["local_after"] = entry
            else:
                got[side] = entry
        loc = got["local"]
        if loc["rc"] != 0 or len(loc["losses"]) < STEPS:
            result(f"remote_train.{wl}", "FAIL", f"local run failed: exit {loc['rc']}: {loc['err']}")
            continue
        local_sps = [x["sps"] for x in (got["local"], got.get("local_after", {})) if x.get("sps")]
        local_mean = sum(local_sps) / len(local_sps)
        for side in ("unix", "unix_socket", "tcp"):
            r = got[side]
            if r["rc"] != 0 or len(r["losses"]) < len(loc["losses"]):
                result(f"remote_train.{wl}.{side}", "FAIL", f"exit {r['rc']}: {r['err']}")
                continue
            same = r["losses"] == loc["losses"]
            first_diff = next((i for i, (a, b) in enumerate(zip(r["losses"], loc["losses"])) if a != b), None)
            detail = (f"{len(r['losses'])} losses {'bit for bit equal to local' if same else f'differ from step {first_diff}'}"
                      f" (last {r['losses'][-1]}); steps/s {r['sps']:.2f} vs local {local_mean:.2f} "
                      f"(before/after {'/'.join(f'{x:.2f}' for x in local_sps)}) = {r['sps'] / local_mean:.3f}; {r['calls']}")
            result(f"remote_train.{wl}.{side}", "PASS" if same else "FAIL", detail)
finally:
    serve.stop(server, sock)
    for p in (env["GSLICE_LEDGER"], env["GSLICE_SUSPEND_BOARD"]):
        subprocess.run(["rm", "-rf", p])
    print("\nremote_train: check / workload, result")
    for name, status, detail in rows:
        print(f"  {name:34s} {status:5s} {detail[:150]}")
PY
