#!/usr/bin/env bash
# The CUDA libraries the frameworks load, through the remote client (docs/remote.md, "The
# driver's private tables"): each check of bench/gpu/remote/libraries.py (cuFFT, cuSOLVER,
# cuSPARSE, cuRAND, NVRTC, nvJitLink, cuDNN, cuBLASLt, NCCL, and JAX's jit with XLA's defaults:
# its command buffers, CUDA graphs built by hand and by capture into them) runs locally under `gslice run`
# and through the client (`gslice run --remote unix:...` against a gslice-remoted this script
# starts), each a process of its own, and the two runs' results are compared as the check
# says: bit for bit, or within its stated tolerance. Prints `RESULT remote_lib.NAME
# PASS|FAIL|SKIP detail` per check and a short table last; in $OUT/remote_libraries/: each
# run's output, the client's log (GSLICE_LOG=info: every table, slot and call it does not
# answer is named there, with the library call that reached it) and the results (.npz).
#   REMOTE_SIM=1          the server and the local runs on the simulated driver (to try the
#                         script without a GPU: the driver check runs, checks whose framework
#                         is missing are SKIP)
#   REMOTE_LIB_JOBS       runs at once (default 4)
#   REMOTE_LIB_DEADLINE   seconds for the whole suite (default 230): runs not started by then
#                         are SKIP, a run still going is stopped at it
#   REMOTE_LIB_CHECKS     space-separated checks to run (default: all)
#   REMOTE_LIB_LOG        the client's log level (default info; debug adds every cached answer
#                         and entry point resolved, a long log)
# Safety: each run in an 8 GiB slice; plain allocations; no managed memory.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
export OUT="${OUT:-$PWD/gpu-out}" PYTHONUNBUFFERED=1
mkdir -p "$OUT/remote_libraries"
exec python3 - <<'PY'
import concurrent.futures, os, signal, subprocess, sys, time

T0 = time.monotonic()
B = os.environ.get("GSLICE_BUILD", "build")
OUT = os.path.join(os.environ["OUT"], "remote_libraries")
SIM = ["--sim"] if os.environ.get("REMOTE_SIM") == "1" else []
JOBS = int(os.environ.get("REMOTE_LIB_JOBS", "4"))
DEADLINE = T0 + float(os.environ.get("REMOTE_LIB_DEADLINE", "230"))
LIBS = os.path.abspath("bench/gpu/remote/libraries.py")
gslice = os.path.join(B, "bin", "gslice")
remoted = os.path.join(B, "bin", "gslice-remoted")
env = dict(os.environ)
env.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off (bench/gpu/run)
env["GSLICE_LEDGER"] = f"/dev/shm/gslice-remote-lib-{os.getpid()}"
env["GSLICE_SUSPEND_BOARD"] = f"/dev/shm/gslice-remote-lib-board-{os.getpid()}"
sock = f"/tmp/gslice-remote-lib-{os.getpid()}.sock"
LOG_LEVEL = os.environ.get("REMOTE_LIB_LOG", "info")
# What the client's log says it could not answer or declined: the lines kept in the details.
REFUSAL_MARKS = ("not answered", "does not know", "not forwarded", "goes on without it", "CUDA_ERROR_NOT_FOUND",
                 "CUDA_ERROR_NOT_SUPPORTED", "told there are none")


def result(name, status, detail):
    print(f"RESULT remote_lib.{name} {status} {detail}", flush=True)


listing = subprocess.run([sys.executable, LIBS, "list"], capture_output=True, text=True)
checks = [l.split("\t") for l in listing.stdout.splitlines() if l.strip()]
wanted = os.environ.get("REMOTE_LIB_CHECKS", "").split()
if wanted:
    checks = [c for c in checks if c[0] in wanted]
if listing.returncode != 0 or not checks:
    result("list", "FAIL", f"libraries.py list: exit {listing.returncode}: {listing.stderr.strip()[-200:]}")
    sys.exit(1)


def run(name, side):
    """One check on one side; returns (rc, last line, refusals)."""
    left = DEADLINE - time.monotonic()
    if left < 5:
        return None, "not started: the suite's time was up", []
    npz = os.path.join(OUT, f"{name}.{side}.npz")
    if os.path.exists(npz):
        os.unlink(npz)
    if side == "local":
        argv = [gslice, "run"] + SIM + ["--memory", "8GiB", "--"]
        run_env = env
    else:
        argv = [gslice, "run", "--remote", "unix:" + sock, "--memory", "8GiB", "--"]
        run_env = dict(env, GSLICE_LOG=LOG_LEVEL)
    argv += [sys.executable, LIBS, "run", name, npz]
    t = time.monotonic()
    with open(os.path.join(OUT, f"{name}.{side}.log"), "w") as log:
        log.write(f"$ {' '.join(argv)}\n")
        log.flush()
        p = subprocess.Popen(argv, env=run_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout=min(150, left))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = -9
        log.write(f"\nrc={rc} wall={time.monotonic() - t:.1f}s\n")
    text = open(os.path.join(OUT, f"{name}.{side}.log"), errors="replace").read()
    lines = [l for l in text.splitlines()[1:] if l.strip() and not l.startswith(("rc=", "[gslice"))]
    last = next((l for l in reversed(lines) if l.startswith(("done ", "SKIP "))), None)
    if last is None:
        errors = [l for l in lines if "Error" in l or "error" in l]
        last = (errors[-1] if errors else (lines[-1] if lines else "(no output)")) + ("" if rc != -9 else " (timed out)")
    refusals = sorted({l.split("remote: ", 1)[1][:150] for l in lines  # less cudart's f8cff951, always declined
                       if "remote: " in l and any(m in l for m in REFUSAL_MARKS) and "f8cff951" not in l})
    return rc, last[:220], refusals


server_log = open(os.path.join(OUT, "gslice-remoted.log"), "w")
server = subprocess.Popen([remoted, "--listen", "unix:" + sock, "--allow-root-tenant"] + SIM, env=env, stdout=server_log,
                          stderr=subprocess.STDOUT, start_new_session=True)
table = []
try:
    deadline = time.monotonic() + 20
    while not os.path.exists(sock) and time.monotonic() < deadline and server.poll() is None:
        time.sleep(0.05)
    if not os.path.exists(sock):
        result("server", "FAIL", "gslice-remoted did not listen (see remote_libraries/gslice-remoted.log)")
        sys.exit(1)
    print(f"gslice-remoted on {'the simulated' if SIM else 'the real'} driver; {len(checks)} checks, {JOBS} runs at once",
          flush=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=JOBS) as pool:
        futures = {(c[0], side): pool.submit(run, c[0], side) for c in checks for side in ("remote", "local")}
        for name, rule, what in checks:
            (lrc, llast, _), (rrc, rlast, refusals) = futures[(name, "local")].result(), futures[(name, "remote")].result()
            refused = (" | refused: " + " | ".join(refusals))[:700] if refusals else ""
            if lrc == 3 or (lrc is None and rrc is None):
                status, detail = "SKIP", (llast if lrc == 3 else rlast).replace(f"SKIP {name}: ", "")
            elif lrc != 0:
                status, detail = "FAIL", f"local run failed: exit {lrc}: {llast}"
            elif rrc != 0:
                status, detail = "FAIL", f"remote run failed: exit {rrc}: {rlast}{refused}"
            else:
                cmp = subprocess.run([sys.executable, LIBS, "compare", name, os.path.join(OUT, f"{name}.local.npz"),
                                      os.path.join(OUT, f"{name}.remote.npz")], capture_output=True, text=True)
                verdict = (cmp.stdout.strip() or cmp.stderr.strip() or "(no verdict)").splitlines()[-1]
                status = "PASS" if cmp.returncode == 0 and verdict.startswith("PASS") else "FAIL"
                detail = verdict.split(" ", 1)[1] if verdict.startswith(("PASS ", "FAIL ")) else verdict
                detail += refused
            result(name, status, f"{what}: {detail}")
            table.append((name, status, rule, len(refusals), (detail.split(" | ")[0])[:70]))
finally:
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
    for p in (env["GSLICE_LEDGER"], env["GSLICE_SUSPEND_BOARD"], sock):
        subprocess.run(["rm", "-rf", p])
print(f"\n{'check':<16} {'result':<6} {'compared':<22} {'refusals':>8}  detail")
for name, status, rule, refusals, detail in table:
    print(f"{name:<16} {status:<6} {rule:<22} {refusals:>8}  {detail}")
print(f"({time.monotonic() - T0:.0f} s; logs, client logs and results in {OUT})")
PY
