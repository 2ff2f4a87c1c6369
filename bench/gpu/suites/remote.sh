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
# Safety: plain device allocations inside a 4 GiB slice; no managed memory. PyTorch runs the
# local and remote checks with the same seeds; answers must agree.
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
probe = os.path.join(B, "bin", "gslice_remote_probe")
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
server = subprocess.Popen([remoted, "--listen", "unix:" + sock, "--allow-root-tenant"] + SIM, env=env, stdout=server_log,
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

    # 3. Real cudart (the CUDA toolkit's, as CI runs it on the simulated driver) and cuBLAS
    # through the client: the driver's private tables answered on the client; sgemm: one
    # cublasSgemm (cuBLASLt's own tables), its product checked.
    cudart_probe = os.path.join(B, "bin", "gslice_cudart_probe")
    if os.path.exists(cudart_probe):
        for mode, done in (("runtime", "cudart done"), ("cublas", "cublas done"), ("sgemm", "product right")):
            rc, out, err, _ = run(f"cudart-{mode}", [gslice, "run", "--remote", "unix:" + sock, "--memory", "4GiB",
                                                   "--", cudart_probe, mode], timeout=120)
            last = (out.strip().splitlines() or ["(no output)"])[-1][:200]
            if "error while loading shared libraries" in err or (rc == 2 and "no libcublas" in out):
                result(f"remote.cudart.{mode}", "SKIP", "no CUDA toolkit runtime on this machine (/usr/local/cuda/lib64)")
                continue
            result(f"remote.cudart.{mode}", "PASS" if rc == 0 and done in out else "FAIL",
                   f"gslice_cudart_probe {mode} through the client: " + (done if rc == 0 and done in out else f"exit {rc}: {last}"))
    else:
        result("remote.cudart", "SKIP", "no build/bin/gslice_cudart_probe (built when the toolkit has libcudart)")

    # 4. PyTorch through the client, each check also run locally and the answers compared: a
    # tensor op (cudart, PyTorch's kernels), a matmul (cuBLAS/cuBLASLt) and a convolution
    # (cuDNN). GSLICE_LOG=info on the client: the private-table slots and calls the libraries
    # reached that the client does not answer or declines are listed (remote/torch-*.log).
    torch_checks = r"""
import sys, torch
check = sys.argv[1]
torch.manual_seed(0)
if check == "tensor":
    x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    print("value", float((x * 2 + 1).sum()))
elif check == "matmul":
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(512, 512, device="cuda")
    b = torch.randn(512, 512, device="cuda")
    print("value", float((a @ b).double().abs().sum()))
elif check == "conv":
    torch.backends.cudnn.enabled = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    conv = torch.nn.Conv2d(3, 16, 3, padding=1).cuda()
    x = torch.randn(8, 3, 64, 64, device="cuda")
    y = conv(x)
    y.sum().backward()
    print("cudnn", torch.backends.cudnn.version())
    print("value", float(y.double().abs().sum()) + float(conv.weight.grad.double().abs().sum()))
torch.cuda.synchronize()
print("ok")
"""
    for check in ("tensor", "matmul", "conv"):
        values = {}
        for label, argv in (("local", [gslice, "run"] + SIM + ["--memory", "4GiB", "--"]),
                            ("remote", [gslice, "run", "--remote", "unix:" + sock, "--memory", "4GiB", "--"])):
            saved = env.get("GSLICE_LOG")
            if label == "remote":
                env["GSLICE_LOG"] = "info"
            rc, out, err, _ = run(f"torch-{check}-{label}", argv + [sys.executable, "-c", torch_checks, check], timeout=300)
            if saved is None:
                env.pop("GSLICE_LOG", None)
            else:
                env["GSLICE_LOG"] = saved
            v = [l.split()[1] for l in out.splitlines() if l.startswith("value ")]
            values[label] = (rc, float(v[0]) if v and rc == 0 and "ok" in out.splitlines() else None,
                             (err.strip().splitlines() or ["(no output)"])[-1][:200])
            if label == "remote":
                refused = sorted({l.split("remote: ", 1)[1][:120] for l in err.splitlines()
                                  if "not answered" in l or "does not know" in l or "not forwarded" in l
                                  or "goes on without it" in l})
                if refused:
                    result(f"remote.torch.{check}.refusals", "INFO", " | ".join(refused)[:900])
        (lrc, lv, lerr), (rrc, rv, rerr) = values["local"], values["remote"]
        if lv is None:
            result(f"remote.torch.{check}", "FAIL", f"local run failed: exit {lrc}: {lerr}")
        elif rv is None:
            result(f"remote.torch.{check}", "FAIL", f"remote run failed: exit {rrc}: {rerr}")
        else:
            same = abs(lv - rv) <= 1e-6 * max(1.0, abs(lv))
            result(f"remote.torch.{check}", "PASS" if same else "FAIL",
                   f"local {lv!r} remote {rv!r}" + ("" if same else " (differ)"))

    # 5. The driver API beyond launches, locally and remotely (same output): a stream captured
    # into a graph and replayed three times with verified results, pointer attributes, stream
    # callbacks and host functions in order, stream memory operations, context/function/stream
    # settings and occupancy; and NVML through the
    # forwarding libnvidia-ml.so.1 (the slice's memory, its process). Needs the PTX test kernels
    # (a build with nvcc).
    for mode in ("graph", "pointer", "callbacks", "memops", "settings", "nvml-cuda"):
        rl, lout, lerr, _ = run(f"probe-{mode}-local", [gslice, "run"] + SIM + ["--memory", "4GiB", "--", probe, mode])
        rr, rout, rerr, _ = run(f"probe-{mode}-remote", [gslice, "run", "--remote", "unix:" + sock, "--memory", "4GiB",
                                                         "--", probe, mode])
        if rl != 0:
            last = ((lout + lerr).strip().splitlines() or ["(no output)"])[-1][:160]
            result(f"remote.{mode}", "INFO", f"does not run locally: exit {rl}: {last}")
            continue
        ok = rr == 0 and rout == lout
        last = ((rout + rerr).strip().splitlines() or ["(no output)"])[-1][:160]
        result(f"remote.{mode}", "PASS" if ok else "FAIL",
               "same output as local" if ok else f"remote exit {rr}, outputs differ (remote/probe-{mode}-*.log): {last}")

    # 6. nvidia-smi through the client: the GPU's memory is the slice's 4 GiB.
    smi = subprocess.run(["which", "nvidia-smi"], capture_output=True, text=True).stdout.strip()
    if smi and not SIM:
        rc, out, err, _ = run("nvidia-smi", [gslice, "run", "--remote", "unix:" + sock, "--memory", "4GiB", "--", smi,
                                             "--query-gpu=name,memory.total,memory.used", "--format=csv,noheader"])
        line = (out.strip().splitlines() or ["(no output)"])[0][:160]
        result("remote.nvidia-smi", "PASS" if rc == 0 and "4096 MiB" in out else "FAIL",
               f"nvidia-smi through the client: exit {rc}: {line}")
        run("nvidia-smi-full", [gslice, "run", "--remote", "unix:" + sock, "--memory", "4GiB", "--", smi])
    else:
        result("remote.nvidia-smi", "INFO", "no nvidia-smi here" if not smi else "skipped on the simulated driver")

    # 7. Client threads: one thread in a 2 s cuStreamSynchronize, another's calls complete
    # meanwhile; work one thread queued is in its stream before another thread's later calls.
    for mode, args, want in (("threads", ["2000"], "done while the other thread synchronised: yes"),
                             ("handoff", [], "handoff: 0 words wrong")):
        rc, out, err, _ = run(f"probe-{mode}", [gslice, "run", "--remote", "unix:" + sock, "--memory", "1GiB", "--",
                                                probe, mode] + args)
        line = (out.strip().splitlines() or [f"exit {rc}: " + ((err.strip().splitlines() or [""])[-1])[:200]])[0]
        result(f"remote.{mode}", "PASS" if rc == 0 and want in out else "FAIL", line)

    # 8. tls:// with a token (certificates made here with the openssl command): gslice-example
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
                                       "--key", f"{tls_dir}/server.key", "--token-file", f"{tls_dir}/token", "--token-user", "root",
                                       "--allow-root-tenant"] + SIM,
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
