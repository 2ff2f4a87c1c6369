#!/usr/bin/env bash
# Limits that hold for every path, on the real driver (docs/security.md): processes x threads
# creating contexts in one slice never hold more device memory than the slice's limit. The
# same clients run without gslice first, to show what they would hold. Prints RESULT lines
# for bench/gpu/run; details in $OUT/tenancy.json.
# Safety: contexts only (no managed memory); at most TENANCY_PROCS x (TENANCY_THREADS + 1)
# contexts at once.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export OUT="${OUT:-$PWD/gpu-out}" PYTHONUNBUFFERED=1
mkdir -p "$OUT"
exec python3 - <<'PY'
import json, os, subprocess, sys, time

B = os.environ.get("GSLICE_BUILD", "build")
OUT = os.environ["OUT"]
PROCS = int(os.environ.get("TENANCY_PROCS", "4"))
THREADS = int(os.environ.get("TENANCY_THREADS", "16"))
LIMIT_GIB = 4
client = os.path.join(B, "bin", "gslice_interpose_client")
gslice = os.path.join(B, "bin", "gslice")
env = dict(os.environ)
env["GSLICE_LEDGER"] = f"/dev/shm/gslice-tenancy-{os.getpid()}"
env["GSLICE_SUSPEND_BOARD"] = f"/dev/shm/gslice-tenancy-board-{os.getpid()}"


def used_by(pids):
    """Device memory (MiB) nvidia-smi reports for these pids."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    total = 0
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and int(parts[0]) in pids and parts[1].isdigit():
            total += int(parts[1])
    return total


def run(label, argv_prefix):
    kids = []
    for _ in range(PROCS):
        kids.append(subprocess.Popen(argv_prefix + [client, "contexts", str(THREADS)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    created = refused = 0
    lines = []
    for k in kids:
        line = k.stdout.readline().strip()
        lines.append(line)
        if not line.startswith("contexts "):
            return {"label": label, "error": f"client {k.pid}: '{line}' {k.stderr.read()[-500:]}"}
        f = dict(p.split("=") for p in line.split()[1:])
        created += (f["primary"] == "ok") + int(f["ok"])
        refused += (f["primary"] == "oom") + int(f["oom"])
    time.sleep(1)
    used = used_by({k.pid for k in kids})
    codes = []
    for k in kids:
        k.stdin.close()
        done = k.stdout.readline().strip()
        codes.append(k.wait(timeout=60))
        if done != "contexts done":
            return {"label": label, "error": f"client {k.pid} ended with '{done}' {k.stderr.read()[-500:]}"}
    return {"label": label, "created": created, "refused": refused, "used_mib": used, "exit_codes": codes,
            "lines": lines}


native = run("native", [])
sliced = run("gslice", [gslice, "run", "--no-daemon", "--name", "tenancy-contexts", "--memory", f"{LIMIT_GIB}GiB", "--"])
json.dump({"procs": PROCS, "threads": THREADS, "limit_gib": LIMIT_GIB, "native": native, "gslice": sliced},
          open(os.path.join(OUT, "tenancy.json"), "w"), indent=1)
print(json.dumps(native), json.dumps(sliced), sep="\n")
if "error" in native:
    print(f"RESULT tenancy.contexts_native FAIL {native['error']}")
else:
    print(f"RESULT tenancy.contexts_native INFO {PROCS}x{THREADS + 1} contexts without gslice: "
          f"{native['created']} created, {native['used_mib']} MiB held")
if "error" in sliced:
    print(f"RESULT tenancy.contexts_in_slice FAIL {sliced['error']}")
    sys.exit(1)
ok = sliced["used_mib"] <= LIMIT_GIB * 1024 and sliced["refused"] > 0 and all(c == 0 for c in sliced["exit_codes"])
print(f"RESULT tenancy.contexts_in_slice {'PASS' if ok else 'FAIL'} {PROCS}x{THREADS + 1} contexts in a "
      f"{LIMIT_GIB} GiB slice: {sliced['created']} created, {sliced['refused']} refused with "
      f"CUDA_ERROR_OUT_OF_MEMORY, {sliced['used_mib']} MiB held (nvidia-smi), programs exited 0")
sys.exit(0 if ok else 1)
PY
