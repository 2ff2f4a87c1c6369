#!/usr/bin/env bash
# Remote GPUs attached only while used (docs/remote.md, "Attached only while used"), on the real
# driver: gsliced and gslice-remoted on this machine, one client (gslice_attach_probe) through
# the forwarding libcuda.so.1 with --idle-timeout. Checks that device queries start no worker,
# that the first allocation does, that gsliced suspends the idle worker (its device memory
# back to the GPU) and that the next call resumes it with the data intact; reports how long
# that first call took (to compare with the driver's restore of the same 64 MiB, e.g.
# gslice-checkpoint-bench). RESULT lines for bench/gpu/run; details in $OUT/remote_idle/.
#   REMOTE_SIM=1   gsliced and the server on the simulated driver (to try it without a GPU)
#   IDLE_TIMEOUT   the client's --idle-timeout (default 5s)
# Safety: one 64 MiB device allocation in a 2 GiB slice; no managed memory.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export OUT="${OUT:-$PWD/gpu-out}" PYTHONUNBUFFERED=1
mkdir -p "$OUT/remote_idle"
exec python3 - <<'PY'
import json, re, os, select, shutil, signal, subprocess, sys, tempfile, time

B = os.environ.get("GSLICE_BUILD", "build")
OUT = os.path.join(os.environ["OUT"], "remote_idle")
SIM = ["--sim"] if os.environ.get("REMOTE_SIM") == "1" else []
IDLE = os.environ.get("IDLE_TIMEOUT", "5s")
bin_ = lambda n: os.path.join(B, "bin", n)
tmp = tempfile.mkdtemp(prefix="gslice-remote-idle.")
env = dict(os.environ)
env["GSLICE_SOCKET"] = os.path.join(tmp, "gsliced.sock")
env["GSLICE_LEDGER"] = f"/dev/shm/gslice-remote-idle-{os.getpid()}"
env["GSLICE_SUSPEND_BOARD"] = f"/dev/shm/gslice-remote-idle-board-{os.getpid()}"
if SIM:
    env["GSLICE_SIM_STATE"] = f"/dev/shm/gslice-remote-idle-sim-{os.getpid()}"
sock = os.path.join(tmp, "remoted.sock")
procs = []


def result(name, status, detail):
    print(f"RESULT {name} {status} {detail}", flush=True)


def start(name, argv, **kw):
    log = open(os.path.join(OUT, name + ".log"), "w")
    p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **kw)
    procs.append(p)
    return p


def node():
    p = subprocess.run([bin_("gslice"), "ls", "--json"], env=env, capture_output=True, text=True, timeout=20)
    return json.loads(p.stdout) if p.returncode == 0 else None


def remote_slice():
    n = node() or {}
    for s in n.get("slices", []):
        if s.get("remote"):
            return s, n
    return None, n


def workers(server_pid):
    return len(worker_pids(server_pid))


def worker_pids(server_pid):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            # The worker itself (`gslice run`, its parent while gsliced holds the slice, names
            # it in its arguments too).
            if not argv[0].endswith(b"gslice-remoted") or b"--worker-fd" not in argv:
                continue
            p = int(pid)
            while p > 1:
                if p == server_pid:
                    found.append(int(pid))
                    break
                p = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
    return found


class Client:
    def __init__(self, argv):
        self.p = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=open(os.path.join(OUT, "client.log"), "w"), text=True, bufsize=1)
        procs.append(self.p)

    def line(self, timeout=120):
        r, _, _ = select.select([self.p.stdout], [], [], timeout)
        return self.p.stdout.readline().strip() if r else ""

    def go(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()


try:
    start("gsliced", [bin_("gsliced")] + SIM + ["--set", "socket=" + env["GSLICE_SOCKET"],
                                                "--set", "database=" + os.path.join(tmp, "gsliced.db"),
                                                "--set", "ledger=" + env["GSLICE_LEDGER"],
                                                "--set", "sample_interval_ms=200"])
    deadline = time.monotonic() + 30
    while node() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if node() is None:
        result("remote_idle.start", "FAIL", "gsliced did not answer (remote_idle/gsliced.log)")
        sys.exit(1)
    server = start("gslice-remoted", [bin_("gslice-remoted"), "--listen", "unix:" + sock, "--allow-root-tenant"] + SIM)
    while not os.path.exists(sock) and time.monotonic() < deadline:
        time.sleep(0.05)
    c = Client([bin_("gslice"), "run", "--remote", "unix:" + sock, "--memory", "2GiB", "--idle-timeout", IDLE,
                "--", bin_("gslice_attach_probe")])
    q = c.line()
    s, _ = remote_slice()
    w = workers(server.pid)
    result("remote_idle.queries_hold_nothing", "PASS" if q.startswith("queried") and s is None and w == 0 else "FAIL",
           f"after cuInit and device queries ('{q}'): {w} worker(s), remote slice {'listed' if s else 'none'}")
    c.go()
    t0 = time.monotonic()
    wrote = c.line()
    attach_s = time.monotonic() - t0
    s, _ = remote_slice()
    w = workers(server.pid)
    result("remote_idle.first_call_attaches", "PASS" if wrote == "written" and s and w == 1 else "FAIL",
           f"context + 64 MiB written in {attach_s:.2f}s incl. the worker's start; {w} worker(s); "
           f"listed: {json.dumps(s.get('remote')) if s else 'no'}")
    t0 = time.monotonic()
    suspended, n = None, None
    while time.monotonic() - t0 < 120:
        s, n = remote_slice()
        if s and s["remote"]["state"] == "suspended":
            suspended = time.monotonic() - t0
            break
        time.sleep(0.2)
    time.sleep(1)  # one more of gsliced's samples of the GPU
    n = node() or n
    gpu_used = n["gpus"][0].get("memory_used_bytes") if n and n.get("gpus") else None
    slice_used = s.get("memory_used_bytes") if s else None
    result("remote_idle.suspended", "PASS" if suspended is not None else "FAIL",
           (f"suspended {suspended:.1f}s after the last call (idle timeout {IDLE}); GPU memory in use "
            f"{gpu_used} B, slice {slice_used} B" if suspended is not None else f"not suspended within 120 s: {s}"))
    c.go()
    t0 = time.monotonic()
    back = c.line()
    first_call_s = time.monotonic() - t0
    result("remote_idle.resumed_intact", "PASS" if back == "intact" else "FAIL",
           f"first call after the idle release (a 64 MiB read back) took {first_call_s:.2f}s: '{back}'")
    reread = c.line()
    reread_s = float(reread.split()[1]) if reread.startswith("reread ") else 0.0
    pinned = c.line()
    result("remote_idle.pinned_after_release", "PASS" if pinned == "pinned intact" else "FAIL",
           f"4 MiB of page-locked memory (shared with the worker) copied back from the GPU after the "
           f"release: '{pinned}'")
    # The driver's own restore of the same process, at once (before the idle timeout comes
    # round again): lock, checkpoint, hold, then restore + unlock timed, the raw driver calls.
    pids = worker_pids(server.pid)
    bench = bin_("gslice-checkpoint-bench")
    if pids and os.path.exists(bench):
        bench_env = dict(env)
        if SIM:  # the simulated driver's libcuda.so.1
            bench_env["LD_LIBRARY_PATH"] = os.path.join(B, "lib", "sim") + ":" + env.get("LD_LIBRARY_PATH", "")
        cp = subprocess.run([bench, "--pid", str(pids[-1]), "--mode", "raw", "--action", "cycle", "--hold-ms", "500"],
                            env=bench_env, capture_output=True, text=True, timeout=120)
        with open(os.path.join(OUT, "checkpoint-bench.log"), "w") as f:
            f.write(cp.stdout + cp.stderr)
        m = re.search(r"restore_s=([\d.]+) unlock_s=([\d.]+)", cp.stdout)
        if cp.returncode == 0 and m:
            driver_s = float(m.group(1)) + float(m.group(2))
            # What the release added to the call: its time less the same read with nothing to
            # resume (the 64 MiB copy itself).
            added_s = first_call_s - reread_s
            ratio = added_s / driver_s
            result("remote_idle.vs_driver_restore", "PASS" if ratio <= 1.5 else "FAIL",
                   f"the release added {added_s:.3f}s to the first call ({first_call_s:.3f}s, the same read "
                   f"again {reread_s:.3f}s) = {ratio:.2f}x the driver's restore + unlock of the same worker "
                   f"({driver_s:.3f}s; goal <= 1.5x)")
        else:
            result("remote_idle.vs_driver_restore", "FAIL",
                   f"gslice-checkpoint-bench exit {cp.returncode}: {(cp.stderr.strip().splitlines() or ['?'])[-1]}")
    else:
        result("remote_idle.vs_driver_restore", "INFO", "no worker pid or no gslice-checkpoint-bench to compare with")
    c.go()
    c.p.wait(timeout=30)
finally:
    for p in reversed(procs):  # the client first, then the server and gsliced (own sessions)
        if p.poll() is not None:
            continue
        try:
            if p.args[0] == bin_("gslice"):
                p.kill()
            else:
                os.killpg(p.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
    shutil.rmtree(tmp, ignore_errors=True)
    for path in (env["GSLICE_LEDGER"], env["GSLICE_SUSPEND_BOARD"], env.get("GSLICE_SIM_STATE", "")):
        if path:
            subprocess.run(["rm", "-rf", path])
PY
