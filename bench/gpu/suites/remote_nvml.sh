#!/usr/bin/env bash
# NVML before any CUDA call through a remote client holds no GPU (docs/remote.md, "Attached only
# while used"), on the real driver: gslice-remoted on this machine, clients through the
# forwarding libraries. Checks that NVML queries (gslice_attach_probe nvml) start no worker and
# report the slice, that the first CUDA allocation attaches one and the handle NVML gave out
# before still names the device, and that nvidia-smi's queries start no worker. RESULT lines
# for bench/gpu/run; details in $OUT/remote_nvml/.
#   REMOTE_SIM=1   the server on the simulated driver (to try it without a GPU; no nvidia-smi)
# Safety: one 64 MiB device allocation in a 2 GiB slice; no managed memory.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export OUT="${OUT:-$PWD/gpu-out}" PYTHONUNBUFFERED=1
mkdir -p "$OUT/remote_nvml"
exec python3 - <<'PY'
import os, select, shutil, signal, subprocess, tempfile, time

B = os.environ.get("GSLICE_BUILD", "build")
OUT = os.path.join(os.environ["OUT"], "remote_nvml")
SIM = ["--sim"] if os.environ.get("REMOTE_SIM") == "1" else []
bin_ = lambda n: os.path.join(B, "bin", n)
tmp = tempfile.mkdtemp(prefix="gslice-remote-nvml.")
env = dict(os.environ)
env["GSLICE_LOG"] = "info"
for v in ("GSLICE_SOCKET", "GSLICE_DAEMON", "GSLICE_REMOTE"):
    env.pop(v, None)
env["GSLICE_LEDGER"] = f"/dev/shm/gslice-remote-nvml-{os.getpid()}"
env["GSLICE_SUSPEND_BOARD"] = f"/dev/shm/gslice-remote-nvml-board-{os.getpid()}"
if SIM:
    env["GSLICE_SIM_STATE"] = f"/dev/shm/gslice-remote-nvml-sim-{os.getpid()}"
sock = os.path.join(tmp, "remoted.sock")


def result(name, status, detail):
    print(f"RESULT {name} {status} {detail}", flush=True)


def workers(server_pid):
    n = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            if not argv[0].endswith(b"gslice-remoted") or b"--worker-fd" not in argv:
                continue
            p = int(pid)
            while p > 1:
                if p == server_pid:
                    n += 1
                    break
                p = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
    return n


server_log = open(os.path.join(OUT, "gslice-remoted.log"), "w")
server = subprocess.Popen([bin_("gslice-remoted"), "--listen", "unix:" + sock, "--allow-root-tenant"] + SIM, env=env, stdout=server_log,
                          stderr=subprocess.STDOUT, start_new_session=True)
client = None
try:
    deadline = time.monotonic() + 20
    while not os.path.exists(sock) and time.monotonic() < deadline and server.poll() is None:
        time.sleep(0.05)
    if not os.path.exists(sock):
        result("remote_nvml.server", "FAIL", "gslice-remoted did not listen (remote_nvml/gslice-remoted.log)")
        raise SystemExit(1)
    client = subprocess.Popen([bin_("gslice"), "run", "--remote", "unix:" + sock, "--memory", "2GiB", "--",
                               bin_("gslice_attach_probe"), "nvml"], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=open(os.path.join(OUT, "client.log"), "w"), text=True,
                              bufsize=1)

    def line(timeout=120):
        r, _, _ = select.select([client.stdout], [], [], timeout)
        return client.stdout.readline().strip() if r else ""

    def go():
        client.stdin.write("go\n")
        client.stdin.flush()

    q = line()
    w = workers(server.pid)
    f = q.split()
    ok = len(f) == 5 and f[0] == "nvml" and f[2] == str(2 << 30) and f[3] == "0" and f[4] == "0" and w == 0
    result("remote_nvml.queries_hold_nothing", "PASS" if ok else "FAIL",
           f"NVML init, count, handle, name, memory, processes ('{q}': count, total, used, processes): {w} worker(s)")
    go()
    a = line()
    w = workers(server.pid)
    result("remote_nvml.handle_survives_attach", "PASS" if a.startswith("attached same name") and w == 1 else "FAIL",
           f"after a 64 MiB allocation: '{a}' (name, used bytes), {w} worker(s)")
    go()
    s = line()
    result("remote_nvml.shutdown", "PASS" if s == "shutdown 0" else "FAIL", f"'{s}'")
    client.wait(timeout=30)

    smi = shutil.which("nvidia-smi")
    if smi and not SIM:
        p = subprocess.run([bin_("gslice"), "run", "--remote", "unix:" + sock, "--memory", "2GiB", "--", smi,
                            "--query-gpu=name,memory.total,memory.used", "--format=csv,noheader"], env=env,
                           capture_output=True, text=True, timeout=120)
        with open(os.path.join(OUT, "nvidia-smi.log"), "w") as log:
            log.write(f"rc={p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}\n")
        attached = "worker pid" in p.stderr
        ok = p.returncode == 0 and "2048 MiB" in p.stdout and not attached
        result("remote_nvml.nvidia_smi_holds_nothing", "PASS" if ok else "FAIL",
               f"exit {p.returncode}: {(p.stdout.strip().splitlines() or ['(no output)'])[0][:120]}; "
               f"{'a worker was started' if attached else 'no worker started'}")
    else:
        result("remote_nvml.nvidia_smi_holds_nothing", "INFO",
               "no nvidia-smi here" if not smi else "skipped on the simulated driver")
finally:
    if client is not None and client.poll() is None:
        client.kill()
        client.wait(timeout=10)
    try:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        server.kill()
    shutil.rmtree(tmp, ignore_errors=True)
    for path in (env["GSLICE_LEDGER"], env["GSLICE_SUSPEND_BOARD"], env.get("GSLICE_SIM_STATE", "")):
        if path:
            subprocess.run(["rm", "-rf", path])
PY
