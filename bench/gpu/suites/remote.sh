#!/usr/bin/env bash
# Remote GPUs on the real driver (docs/remote.md): gslice-remoted serves a unix socket on this
# machine; the forwarding libcuda.so.1 runs programs against it. The same programs run
# locally under gslice run first, and their outputs are compared. Prints RESULT lines for
# bench/gpu/run; details in $OUT/remote/.
#   REMOTE_REPEAT   runs of each program per side, for the wall-time ratio (default 3)
#   REMOTE_SIM=1    the server and the local runs on the simulated driver (to try the script
#                   on a machine without a GPU)
# Also: client threads (one blocked in a synchronisation, the others served) and tls:// with
# a token (test certificates made with the openssl command).
# Safety: plain device allocations inside a 4 GiB slice; no managed memory.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export OUT="${OUT:-$PWD/gpu-out}" PYTHONUNBUFFERED=1
mkdir -p "$OUT/remote"
exec python3 - <<'PY'
import os, signal, statistics, subprocess, sys, time

B = os.environ.get("GSLICE_BUILD", "build")
OUT = os.path.join(os.environ["OUT"], "remote")
REPEAT = int(os.environ.get("REMOTE_REPEAT", "3"))
SIM = ["--sim"] if os.environ.get("REMOTE_SIM") == "1" else []
gslice = os.path.join(B, "bin", "gslice")
remoted = os.path.join(B, "bin", "gslice-remoted")
example = os.path.join(B, "bin", "gslice-example")
env = dict(os.environ)
env["GSLICE_LEDGER"] = f"/dev/shm/gslice-remote-{os.getpid()}"
env["GSLICE_SUSPEND_BOARD"] = f"/dev/shm/gslice-remote-board-{os.getpid()}"
sock = f"/tmp/gslice-remote-{os.getpid()}.sock"


def result(name, status, detail):
    print(f"RESULT {name} {status} {detail}", flush=True)


def run(label, argv, timeout=120):
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = -9, e.stdout or "", (e.stderr or "") + "\n(timed out)"
        out = out if isinstance(out, str) else out.decode(errors="replace")
        err = err if isinstance(err, str) else err.decode(errors="replace")
    wall = time.monotonic() - t0
    with open(os.path.join(OUT, f"{label}.log"), "a") as f:
        f.write(f"$ {' '.join(argv)}\nrc={rc} wall={wall:.3f}s\n--- stdout\n{out}\n--- stderr\n{err}\n")
    return rc, out, err, wall


server_log = open(os.path.join(OUT, "gslice-remoted.log"), "w")
server = subprocess.Popen([remoted, "--listen", "unix:" + sock] + SIM, env=env, stdout=server_log,
                          stderr=subprocess.STDOUT, start_new_session=True)
try:
    deadline = time.monotonic() + 20
    while not os.path.exists(sock) and time.monotonic() < deadline and server.poll() is None:
        time.sleep(0.05)
    if not os.path.exists(sock):
        result("remote.server", "FAIL", "gslice-remoted did not listen (see remote/gslice-remoted.log)")
        sys.exit(1)
    result("remote.server", "PASS", "gslice-remoted listening on a unix socket, " + ("simulated driver" if SIM else "real driver"))

    # 1. gslice-example (allocations to the slice's limit, a fill kernel, read-back): the same
    # output locally and remotely.
    local = [gslice, "run"] + SIM + ["--memory", "4GiB", "--", example]
    remote = [gslice, "run", "--remote", "unix:" + sock, "--memory", "4GiB", "--", example]
    walls = {"local": [], "remote": []}
    outs = {}
    ok = True
    for i in range(REPEAT):  # interleaved
        for label, argv in (("local", local), ("remote", remote)):
            rc, out, err, wall = run(f"example-{label}", argv)
            walls[label].append(wall)
            outs.setdefault(label, out)
            if rc != 0:
                ok = False
                result(f"remote.example.{label}", "FAIL", f"exit {rc}: {err.strip().splitlines()[-1] if err.strip() else ''}")
    same = outs.get("local") == outs.get("remote")
    if ok:
        ratio = statistics.median(walls["remote"]) / statistics.median(walls["local"])
        result("remote.example", "PASS" if same else "FAIL",
               ("same output" if same else "outputs differ (remote/example-*.log)") +
               f"; wall median remote {statistics.median(walls['remote']):.3f}s vs local "
               f"{statistics.median(walls['local']):.3f}s ({ratio:.2f}x), {REPEAT} each, interleaved")

    # 2. Over the limit: an allocation past the remote slice's 4 GiB is refused there.
    rc, out, err, _ = run("over-limit", [gslice, "run", "--remote", "unix:" + sock, "--memory", "1GiB", "--", example])
    got = [l for l in out.splitlines() if l.startswith(("GPU 0:", "allocated"))]
    result("remote.limit", "PASS" if rc == 0 and len(got) == 2 else "FAIL",
           f"gslice-example in a 1 GiB remote slice: exit {rc}; " + ("; ".join(got) or "(no output)"))

    # 3. PyTorch through the forwarding client: what happens today (cudart asks the driver's
    # private tables, which the client does not answer yet).
    rc, out, err, _ = run("torch", [gslice, "run", "--remote", "unix:" + sock, "--memory", "4GiB", "--",
                                    sys.executable, "-c",
                                    "import torch; x = torch.ones(1024, device='cuda'); print('sum', float(x.sum()))"],
                          timeout=90)
    last = (err.strip().splitlines() or ["(no output)"])[-1][:200]
    result("remote.torch", "PASS" if rc == 0 and "sum 1024.0" in out else "INFO",
           "torch.ones on the remote GPU: " + ("sum 1024.0" if rc == 0 and "sum 1024.0" in out else f"exit {rc}: {last}"))

    # 4. Client threads: one thread in a 2 s cuStreamSynchronize, another's calls complete
    # meanwhile; work one thread queued is in its stream before another thread's later calls.
    probe = os.path.join(B, "bin", "gslice_remote_probe")
    for mode, args, want in (("threads", ["2000"], "done while the other thread synchronised: yes"),
                             ("handoff", [], "handoff: 0 words wrong")):
        rc, out, err, _ = run(f"probe-{mode}", [gslice, "run", "--remote", "unix:" + sock, "--memory", "1GiB", "--",
                                                probe, mode] + args)
        line = (out.strip().splitlines() or [f"exit {rc}: " + ((err.strip().splitlines() or [""])[-1])[:200]])[0]
        result(f"remote.{mode}", "PASS" if rc == 0 and want in out else "FAIL", line)

    # 5. tls:// with a token (certificates made here with the openssl command): gslice-example
    # gives the same output as locally; a wrong token is refused without a worker.
    tls_dir = os.path.join(OUT, "tls")
    os.makedirs(tls_dir, mode=0o700, exist_ok=True)
    ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
    made = subprocess.run(
        f"cd {tls_dir} && openssl req -x509 {ec} -keyout ca.key -out ca.pem -days 1 -subj /CN=gslice-bench-ca && "
        f"openssl req {ec} -keyout server.key -out server.csr -subj /CN=gslice-bench && "
        "printf 'subjectAltName=IP:127.0.0.1\\n' > ext && "
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 1 -extfile ext && "
        "openssl rand -hex 32 > token && echo wrong-token-0123456789 > wrong && chmod 600 token wrong",
        shell=True, capture_output=True, text=True)
    if made.returncode != 0:
        result("remote.tls", "FAIL", "openssl could not make the test certificates: " + made.stderr.strip()[-200:])
    else:
        tls_log_path = os.path.join(OUT, "gslice-remoted-tls.log")
        tls_log = open(tls_log_path, "w")
        tls_server = subprocess.Popen([remoted, "--listen", "tls://127.0.0.1:0", "--cert", f"{tls_dir}/server.pem",
                                       "--key", f"{tls_dir}/server.key", "--token-file", f"{tls_dir}/token"] + SIM,
                                      env=env, stdout=tls_log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            address = None
            deadline = time.monotonic() + 20
            while address is None and time.monotonic() < deadline and tls_server.poll() is None:
                for l in open(tls_log_path).read().splitlines():
                    if "listening on tls://" in l:
                        address = l.split("listening on ")[1].split()[0]
                time.sleep(0.05)
            if address is None:
                result("remote.tls", "FAIL", "gslice-remoted did not listen on tls:// (see remote/gslice-remoted-tls.log)")
            else:
                env["GSLICE_REMOTE_CA"] = f"{tls_dir}/ca.pem"
                env["GSLICE_REMOTE_TOKEN_FILE"] = f"{tls_dir}/token"
                tls_walls = []
                tls_out = None
                for i in range(REPEAT):
                    rc, out, err, wall = run("example-tls", [gslice, "run", "--remote", address, "--memory", "4GiB", "--",
                                                             example])
                    tls_walls.append(wall)
                    tls_out = tls_out if tls_out is not None else (out if rc == 0 else None)
                same = tls_out is not None and tls_out == outs.get("local")
                detail = ("same output as local" if same else "output differs from local or failed (remote/example-tls.log)")
                if walls["local"]:
                    detail += (f"; wall median tls {statistics.median(tls_walls):.3f}s vs local "
                               f"{statistics.median(walls['local']):.3f}s")
                result("remote.tls", "PASS" if same else "FAIL", detail)
                env["GSLICE_REMOTE_TOKEN_FILE"] = f"{tls_dir}/wrong"
                rc, out, err, _ = run("tls-wrong-token", [gslice, "run", "--remote", address, "--memory", "1GiB", "--",
                                                          example])
                refused = "wrong token" in err and "worker pid" not in err
                result("remote.tls.wrong_token", "PASS" if refused else "FAIL",
                       "refused: wrong token" if refused else f"exit {rc}: not refused as expected (remote/tls-wrong-token.log)")
        finally:
            for k in ("GSLICE_REMOTE_CA", "GSLICE_REMOTE_TOKEN_FILE"):
                env.pop(k, None)
            os.killpg(tls_server.pid, signal.SIGTERM)
            try:
                tls_server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(tls_server.pid, signal.SIGKILL)
            subprocess.run(["rm", "-rf", tls_dir])
finally:
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
    for p in (env["GSLICE_LEDGER"], env["GSLICE_SUSPEND_BOARD"]):
        subprocess.run(["rm", "-rf", p])
PY
