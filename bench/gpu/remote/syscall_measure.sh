#!/usr/bin/env bash
# The system calls a remote worker and the real driver make, and whether the worker's filter
# lets them work (docs/remote.md, "System calls"). Two passes over the same programs, each run
# through the forwarding client (`gslice run --remote unix:...`) against gslice-remoted on a
# unix socket:
#   1. measure: gslice-remoted --syscall-filter off --syscall-log FOLDER; every session writes
#      the calls it, `gslice run` and the worker made; printed: their union, sorted, with
#      counts, and whether any call the filter refuses is among them;
#   2. enforce: gslice-remoted with its filter on (the default); every program must succeed as
#      in pass 1.
# Programs: gslice-example (also under --trace), gslice_remote_probe's modes of the remote suite (graph, pointer,
# callbacks, memops, settings, nvml-cuda, threads, handoff), gslice_cudart_probe (runtime,
# cublas, sgemm) where built, and a short PyTorch program (a matmul, a convolution, 20 training
# steps) where torch imports.
#   bench/gpu/remote/syscall_measure.sh
# Environment: GSLICE_BUILD (default build), OUT (default ./gpu-out; logs in $OUT/syscall/),
# SYSCALL_SIM=1 (the simulated driver, to try the script without a GPU), SYSCALL_BUDGET
# (seconds for both passes, default 110: programs past it are skipped and said so),
# SYSCALL_PYTHON (default python3).
# Prints RESULT lines: remote.syscall_measure (the distinct calls; FAIL when a refused call was
# used), remote.syscall_filter (PASS when every program that ran in pass 1 succeeds filtered).
set -uo pipefail
cd "$(dirname "$0")/../../.."
export OUT="${OUT:-$PWD/gpu-out}" PYTHONUNBUFFERED=1
mkdir -p "$OUT/syscall"
exec "${SYSCALL_PYTHON:-python3}" - <<'PY'
import glob, os, shutil, signal, subprocess, sys, time

B = os.environ.get("GSLICE_BUILD", "build")
OUT = os.path.join(os.environ["OUT"], "syscall")
SIM = ["--sim"] if os.environ.get("SYSCALL_SIM") == "1" else []
BUDGET = float(os.environ.get("SYSCALL_BUDGET", "110"))
PYTHON = os.environ.get("SYSCALL_PYTHON", "python3")
START = time.monotonic()
gslice = os.path.join(B, "bin", "gslice")
remoted = os.path.join(B, "bin", "gslice-remoted")
probe = os.path.join(B, "bin", "gslice_remote_probe")
cudart_probe = os.path.join(B, "bin", "gslice_cudart_probe")
env = dict(os.environ)
env["GSLICE_LEDGER"] = f"/dev/shm/gslice-syscall-{os.getpid()}"
env["GSLICE_SUSPEND_BOARD"] = f"/dev/shm/gslice-syscall-board-{os.getpid()}"

TORCH = r"""
import torch
torch.manual_seed(0)
a = torch.randn(512, 512, device="cuda")
print("matmul", float((a @ a).sum().item()) != 0.0)
conv = torch.nn.Conv2d(3, 8, 3).cuda()
print("conv", tuple(conv(torch.randn(2, 3, 32, 32, device="cuda")).shape))
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(128, 64, device="cuda"), torch.randint(0, 10, (128,), device="cuda")
first = None
for step in range(20):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    first = first if first is not None else loss.item()
torch.cuda.synchronize()
print("trained", loss.item() < first)
"""


def result(name, status, detail):
    print(f"RESULT {name} {status} {detail}", flush=True)


def programs(name):
    """(label, argv after `--`, text the output must hold, memory) of each program; the traced
    one takes gslice run's --trace (the worker then records through CUPTI)."""
    example = [os.path.join(B, "bin", "gslice-example")]
    trace = os.path.join(OUT, f"{name}-example-trace.json")
    out = [("example", example, "all checks passed", "4GiB"),
           ("example-traced", example, "all checks passed", "4GiB --trace " + trace)]
    for mode in ("graph", "pointer", "callbacks", "memops", "settings", "nvml-cuda"):
        out.append((f"probe-{mode}", [probe, mode], "", "4GiB"))
    out.append(("probe-threads", [probe, "threads", "2000"], "done while the other thread synchronised: yes", "1GiB"))
    out.append(("probe-handoff", [probe, "handoff"], "handoff: 0 words wrong", "1GiB"))
    if os.path.exists(cudart_probe):
        for mode, want in (("runtime", "cudart done"), ("cublas", "cublas done"), ("sgemm", "product right")):
            out.append((f"cudart-{mode}", [cudart_probe, mode], want, "4GiB"))
    if not SIM and subprocess.run([PYTHON, "-c", "import torch"], capture_output=True).returncode == 0:
        out.append(("torch", [PYTHON, "-c", TORCH], "trained True", "8GiB"))
    return out


def run_pass(name, extra):
    """Serves with `extra`, runs every program; {label: (rc, ok, last line)}; None if no server."""
    sock = f"/tmp/gslice-syscall-{os.getpid()}-{name}.sock"
    log = open(os.path.join(OUT, f"{name}-gslice-remoted.log"), "w")
    server = subprocess.Popen([remoted, "--listen", "unix:" + sock, "--allow-root-tenant"] + SIM + extra, env=env,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    outcomes = {}
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(sock) and time.monotonic() < deadline and server.poll() is None:
            time.sleep(0.05)
        if not os.path.exists(sock):
            return None
        for label, argv, want, memory in programs(name):
            left = BUDGET - (time.monotonic() - START)
            if left < 5:
                outcomes[label] = (None, False, "skipped: out of time (SYSCALL_BUDGET)")
                continue
            cmd = [gslice, "run", "--remote", "unix:" + sock, "--memory"] + memory.split() + ["--"] + argv
            t0 = time.monotonic()
            try:
                p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=min(60, left))
                rc, o, e = p.returncode, p.stdout, p.stderr
            except subprocess.TimeoutExpired as x:
                rc = -9
                o = x.stdout.decode(errors="replace") if isinstance(x.stdout, bytes) else (x.stdout or "")
                e = (x.stderr.decode(errors="replace") if isinstance(x.stderr, bytes) else (x.stderr or "")) + "\n(timed out)"
            with open(os.path.join(OUT, f"{name}-{label}.log"), "w") as f:
                f.write(f"$ {' '.join(cmd)}\nrc={rc} wall={time.monotonic() - t0:.3f}s\n--- stdout\n{o}\n--- stderr\n{e}\n")
            last = ((o + e).strip().splitlines() or ["(no output)"])[-1][:160]
            outcomes[label] = (rc, rc == 0 and want in o, last)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
    return outcomes


def read_logs(folder):
    """{name: count} over every session's file, and the names the filter refuses."""
    union, refused = {}, set()
    for path in sorted(glob.glob(os.path.join(folder, "syscalls-*.txt"))):
        for line in open(path):
            parts = line.split()
            if len(parts) < 2:
                continue
            union[parts[0]] = union.get(parts[0], 0) + int(parts[1])
            if "refused" in parts[2:]:
                refused.add(parts[0])
    return union, refused


def server_said(name, text):
    path = os.path.join(OUT, f"{name}-gslice-remoted.log")
    return any(text in line for line in open(path)) if os.path.exists(path) else False


try:
    driver = "simulated driver" if SIM else "real driver"
    # Pass 1: measure.
    logs = os.path.join(OUT, "calls")
    shutil.rmtree(logs, ignore_errors=True)
    os.makedirs(logs)
    os.chmod(logs, 0o777)  # written by each session as its client's user
    measured = run_pass("measure", ["--syscall-filter", "off", "--syscall-log", logs])
    union, refused = read_logs(logs)
    if measured is None:
        result("remote.syscall_measure", "FAIL", "gslice-remoted did not listen (syscall/measure-gslice-remoted.log)")
    elif server_said("measure", "cannot start measuring system calls"):
        result("remote.syscall_measure", "SKIP", "this kernel has no seccomp user notification (gVisor?): "
               "nothing measured (syscall/measure-gslice-remoted.log)")
    else:
        for label, (rc, ok, last) in measured.items():
            print(f"measure {label}: {'ok' if ok else 'FAILED'} (exit {rc}): {last}")
        names = sorted(union)
        print(f"union of the calls of {len(glob.glob(os.path.join(logs, 'syscalls-*.txt')))} sessions "
              f"and their workers ({driver}): {len(names)} distinct")
        for i in range(0, len(names), 5):
            print("  " + "".join(f"{n} {union[n]}".ljust(30) for n in names[i:i + 5]))
        used = sorted(refused)
        # clone3 is refused with ENOSYS by design: libc then uses clone, whose flags are checked.
        harmful = [n for n in used if n != "clone3"]
        print("refused calls among them: " + (", ".join(used) if used else "none") +
              (" (clone3: refused with ENOSYS, libc falls back to clone)" if "clone3" in used else ""))
        # Programs that fail unfiltered (the simulator lacks some calls) are the filter's
        # concern only in pass 2, where they are compared with this pass.
        result("remote.syscall_measure", "PASS" if not harmful else "FAIL",
               f"{len(names)} distinct calls ({driver}), {sum(ok for _, ok, _ in measured.values())}/{len(measured)} "
               f"programs ran; refused calls used: {', '.join(harmful) if harmful else 'none'} "
               f"(full lists: syscall/calls/)")
    # Pass 2: enforce.
    enforced = run_pass("enforce", [])
    if enforced is None:
        result("remote.syscall_filter", "FAIL", "gslice-remoted did not listen (syscall/enforce-gslice-remoted.log)")
        sys.exit(1)
    # A program counts when it succeeded unfiltered (pass 1), or pass 1 did not run it.
    failed, counted, unfiltered_failures = [], 0, []
    for label, (rc, ok, last) in enforced.items():
        before = measured.get(label) if measured else None
        print(f"enforce {label}: {'ok' if ok else 'FAILED'} (exit {rc}): {last}")
        if rc is None:
            continue
        if before is not None and before[0] is not None and not before[1]:
            unfiltered_failures.append(label)
            continue
        counted += 1
        if not ok:
            failed.append(f"{label} (exit {rc}: {last})")
    skipped = [label for label, (rc, _, _) in enforced.items() if rc is None]
    result("remote.syscall_filter", "PASS" if not failed and counted > 0 else "FAIL",
           f"filter on ({driver}): {counted - len(failed)}/{counted} programs succeeded" +
           (f"; failed: {'; '.join(failed)}" if failed else "") +
           (f"; not counted, failing unfiltered too: {', '.join(unfiltered_failures)}" if unfiltered_failures else "") +
           (f"; skipped (time): {', '.join(skipped)}" if skipped else "") +
           f"; {time.monotonic() - START:.0f}s in all")
finally:
    for p in (env["GSLICE_LEDGER"], env["GSLICE_SUSPEND_BOARD"]):
        subprocess.run(["rm", "-rf", p])
PY
