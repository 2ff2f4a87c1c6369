#!/usr/bin/env bash
# Live changes on a real GPU (docs/daemon.md, `gslice set`): gsliced manages the GPU; a PyTorch
# job in an 8 GiB slice allocates until refused, the slice grows to 16 GiB while it runs, and
# the job allocates the difference (its data checked after); a matmul job in a slice capped at
# 70% is capped to 30% mid-run, with its throughput and the GPU's utilisation (NVML, sampled
# outside the slice) measured before and after. Prints RESULT lines for bench/gpu/run.
# Safety: plain device allocations inside the slice's limit; no managed memory.
set -uo pipefail
cd "$(dirname "$0")/../../.."
build="${GSLICE_BUILD:-build}"
out="${OUT:-/tmp}/resize"
mkdir -p "$out"
here="$PWD/bench/gpu/daemon"
tmp=$(mktemp -d /tmp/gsliced-resize.XXXXXX)
export GSLICE_SOCKET="$tmp/gsliced.sock" GSLICE_LEDGER="/dev/shm/gslice-resize-$$" PYTHONUNBUFFERED=1
deps="${GSLICE_DEPS:-}"
daemon_pid="" job_pid="" smi_pid=""
cleanup() {
  for p in "$job_pid" "$smi_pid" "$daemon_pid"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp" "$GSLICE_LEDGER"
}
trap cleanup EXIT
result() { echo "RESULT $1 $2 $3"; }
gslice() { "$build/bin/gslice" "$@"; }

LD_LIBRARY_PATH="$deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$build/bin/gsliced" \
  --set socket="$GSLICE_SOCKET" --set database="$tmp/gsliced.db" --set ledger="$GSLICE_LEDGER" \
  --set sample_interval_ms=200 >>"$out/gsliced.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do [ -S "$GSLICE_SOCKET" ] && break; sleep 0.1; done
[ -S "$GSLICE_SOCKET" ] || { result resize.start FAIL "gsliced did not open its socket; see resize/gsliced.log"; exit 1; }

# 1. Memory: 8 GiB, then 16 GiB while the job runs.
cat >"$tmp/grow.py" <<'PY'
import os, sys, time, torch
ready, go = sys.argv[1], sys.argv[2]
chunks = []
def fill():
    while True:
        try:
            t = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        except torch.cuda.OutOfMemoryError:
            return
        t.fill_(len(chunks) % 251)
        chunks.append(t)
fill()
first = len(chunks)
free, total = torch.cuda.mem_get_info()
print(f"before: {first} chunks of 256 MiB; mem_get_info total {total / 2**30:.2f} GiB", flush=True)
open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.05)
free2, total2 = torch.cuda.mem_get_info()
fill()
ok = all(int(t[0].item()) == i % 251 and int(t[-1].item()) == i % 251 for i, t in enumerate(chunks))
print(f"after: {len(chunks)} chunks ({len(chunks) - first} more); mem_get_info total {total2 / 2**30:.2f} GiB; "
      f"data {'intact' if ok else 'CORRUPT'}", flush=True)
sys.exit(0 if ok else 3)
PY
if gslice create grow --gpus 0 --memory 8GiB >"$out/create-grow.txt" 2>&1; then
  gslice run --name grow -- python3 "$tmp/grow.py" "$tmp/grow.ready" "$tmp/grow.go" >"$out/grow.log" 2>&1 &
  job_pid=$!
  for _ in $(seq 600); do [ -f "$tmp/grow.ready" ] && break; sleep 0.1; done
  t0=$(date +%s.%N)
  gslice set grow --memory 16GiB >"$out/set-grow.txt" 2>&1; set_rc=$?
  touch "$tmp/grow.go"
  wait "$job_pid"; job_rc=$?; job_pid=""
  before=$(grep '^before:' "$out/grow.log"); after=$(grep '^after:' "$out/grow.log")
  more=$(sed -n 's/.*(\([0-9]*\) more).*/\1/p' <<<"$after")
  if [ $set_rc -eq 0 ] && [ $job_rc -eq 0 ] && [ -n "$more" ] && [ "$more" -ge 28 ]; then
    result resize.memory_grow PASS "8 -> 16 GiB mid-run: $before | $after"
  else
    result resize.memory_grow FAIL "set rc $set_rc, job rc $job_rc: ${before:-no before} | ${after:-no after} ($(tail -1 "$out/set-grow.txt"))"
  fi
  gslice delete grow >/dev/null 2>&1
else
  result resize.memory_grow FAIL "create: $(tail -1 "$out/create-grow.txt")"
fi

# 2. Compute: a cap of 70%, then 30% while the job runs.
cat >"$tmp/matmul.py" <<'PY'
import json, sys, time, torch
seconds, log = float(sys.argv[1]), sys.argv[2]
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
for _ in range(20):
    c = a @ b
torch.cuda.synchronize()
ends = []
t_end = time.time() + seconds
while time.time() < t_end:
    for _ in range(10):
        c = a @ b
    torch.cuda.synchronize()
    ends.append(time.time())
ok = bool(torch.isfinite(c).all().item())
json.dump({"ends": ends, "finite": ok}, open(log, "w"))
PY
if gslice create cap --gpus 0 --memory 8GiB >"$out/create-cap.txt" 2>&1 &&
   gslice set cap --cap 70% >"$out/set-cap70.txt" 2>&1; then
  nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 250 >"$out/util.csv" 2>/dev/null &
  smi_pid=$!
  start=$(date +%s.%N)
  gslice run --name cap -- python3 "$tmp/matmul.py" 26 "$out/matmul.json" >"$out/matmul.log" 2>&1 &
  job_pid=$!
  sleep 14
  switch=$(date +%s.%N)
  gslice set cap --cap 30% >"$out/set-cap30.txt" 2>&1; set_rc=$?
  wait "$job_pid"; job_rc=$?; job_pid=""
  kill "$smi_pid" 2>/dev/null; smi_pid=""
  python3 - "$out/matmul.json" "$out/util.csv" "$switch" "$set_rc" "$job_rc" <<'PY'
import datetime, json, sys
log, util, switch, set_rc, job_rc = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
try:
    d = json.load(open(log))
except Exception as e:
    print(f"RESULT resize.compute_cap FAIL no job output ({e}); set rc {set_rc}, job rc {job_rc}")
    sys.exit(0)
ends = d["ends"]
def rate(t0, t1):
    n = sum(1 for t in ends if t0 <= t < t1)
    return n * 10 / (t1 - t0)
first = ends[0] if ends else switch
before = rate(max(first, switch - 6), switch)
after = rate(switch + 2, switch + 8)
samples = []
for line in open(util):
    parts = [p.strip() for p in line.split(",")]
    try:
        ts = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        samples.append((ts, float(parts[1])))
    except (ValueError, IndexError):
        pass
def util_in(t0, t1):
    xs = [u for t, u in samples if t0 <= t < t1]
    return sum(xs) / len(xs) if xs else float("nan")
u_before, u_after = util_in(switch - 6, switch), util_in(switch + 2, switch + 8)
ok = set_rc == 0 and job_rc == 0 and d["finite"] and after < 0.6 * before
status = "PASS" if ok else "FAIL"
print(f"RESULT resize.compute_cap {status} cap 70% -> 30% mid-run: matmuls/s {before:.1f} -> {after:.1f} "
      f"({after / before if before else float('nan'):.2f}x); GPU utilisation (NVML) {u_before:.1f}% -> {u_after:.1f}%; "
      f"outputs finite: {d['finite']}")
PY
else
  result resize.compute_cap FAIL "create/set: $(tail -1 "$out/create-cap.txt") $(tail -1 "$out/set-cap70.txt" 2>/dev/null)"
fi
