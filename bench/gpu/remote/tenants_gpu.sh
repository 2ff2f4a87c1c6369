#!/usr/bin/env bash
# Two local users share one gslice-remoted on the real driver (docs/remote.md, "Tenants"):
# the server runs as root with --socket-mode 0666; uid 65534 (nobody) and uid 1 (daemon)
# each run a PyTorch program through the forwarding client at the same time (a matmul
# checked against the CPU, then a pause). While they run, each worker's /proc status must
# show its client's uid, no capabilities, no_new_privs and the system-call filter.
#   bench/gpu/remote/tenants_gpu.sh
# Environment: GSLICE_BUILD (default build), OUT (default ./gpu-out; logs in $OUT/tenants/),
# TENANTS_PYTHON (default python3), TENANTS_SIM=1 (the simulated driver, and the probe's busy
# kernel instead of PyTorch: to try the script without a GPU). Needs root and setpriv.
# Prints RESULT lines.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export OUT="${OUT:-$PWD/gpu-out}" PYTHONUNBUFFERED=1
mkdir -p "$OUT/tenants"
exec "${TENANTS_PYTHON:-python3}" - <<'PY'
import os, shutil, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.abspath("bench/gpu/remote"))
import serve  # noqa: E402

OUT = os.path.join(os.environ["OUT"], "tenants")
PY = os.environ.get("TENANTS_PYTHON", sys.executable)
src = os.path.abspath(os.environ.get("GSLICE_BUILD", "build"))
SIM = os.environ.get("TENANTS_SIM") == "1"
USERS = [65534, 1]
PROGRAM = r'''
import time, torch
a = torch.randn(512, 512, generator=torch.Generator().manual_seed(7))
g = (a.cuda() @ a.cuda()).cpu()
ok = torch.allclose(g, a @ a, rtol=1e-3, atol=1e-3)
time.sleep(6)
print("tenant program", "right" if ok else "WRONG", flush=True)
'''


def result(name, status, detail):
    print(f"RESULT remote_tenants.{name} {status} {detail}", flush=True)


if os.geteuid() != 0 or shutil.which("setpriv") is None:
    result("setup", "SKIP", "needs root and setpriv")
    sys.exit(0)
# A copy every user can read and run: the checkout may sit in a folder only root enters.
top = tempfile.mkdtemp(prefix="gslice-tenants-")
os.chmod(top, 0o755)
build = os.path.join(top, "build")
shutil.copytree(src, build, symlinks=True)
subprocess.run(["chmod", "-R", "a+rX", top], check=True)
sock_dir = os.path.join(top, "sock")
os.mkdir(sock_dir)
os.chmod(sock_dir, 0o755)
sock = os.path.join(sock_dir, "remoted.sock")
env = dict(os.environ, NCCL_NVLS_ENABLE="0", HOME="/tmp")
server, address = serve.start(os.path.join(build, "bin", "gslice-remoted"), env, sock,
                              os.path.join(OUT, "gslice-remoted.log"), tcp=False,
                              extra=["--socket-mode", "0666"] + (["--sim"] if SIM else []))
clients = {}
try:
    if address is None:
        result("server", "FAIL", "gslice-remoted did not listen (tenants/gslice-remoted.log)")
        sys.exit(1)
    for uid in USERS:
        out = open(os.path.join(OUT, f"client-{uid}.log"), "w")
        program = ([os.path.join(build, "bin", "gslice_remote_probe"), "busy", "6000"] if SIM else [PY, "-c", PROGRAM])
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", os.path.join(build, "bin", "gslice"),
               "run", "--remote", "unix:" + sock, "--memory", "1GiB" if SIM else "4GiB", "--"] + program
        clients[uid] = (subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd="/tmp"), out)
    # The workers: the server's descendants that run as a client's uid.
    seen = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(seen) < len(USERS) and all(p.poll() is None for p, _ in clients.values()):
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                status = open(f"/proc/{pid}/status").read()
                sid = os.getsid(int(pid))
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            uid = int(fields["Uid"].split()[0])
            if sid == server.pid and uid in USERS and uid not in seen:
                seen[uid] = {k: fields.get(k, "?").strip() for k in ("Uid", "CapEff", "NoNewPrivs", "Seccomp", "Name")}
        time.sleep(0.2)
    for uid in USERS:
        s = seen.get(uid)
        if s is None:
            result(f"worker_{uid}", "FAIL", "no process of this uid under gslice-remoted while its client ran")
            continue
        uids = s["Uid"].split()
        ok = all(int(u) == uid for u in uids) and int(s["CapEff"], 16) == 0 and s["NoNewPrivs"] == "1" and s["Seccomp"] == "2"
        result(f"worker_{uid}", "PASS" if ok else "FAIL",
               f"{s['Name']}: Uid {s['Uid']}, CapEff {s['CapEff']}, NoNewPrivs {s['NoNewPrivs']}, Seccomp {s['Seccomp']}")
    for uid, (p, out) in clients.items():
        try:
            rc = p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = -9
        out.close()
        text = open(os.path.join(OUT, f"client-{uid}.log")).read()
        right = ("busy" in text) if SIM else ("tenant program right" in text)
        result(f"program_{uid}", "PASS" if rc == 0 and right else "FAIL",
               f"exit {rc}; {(text.strip().splitlines() or ['(no output)'])[-1][:150]}")
finally:
    serve.stop(server, sock)
    shutil.rmtree(top, ignore_errors=True)
PY
