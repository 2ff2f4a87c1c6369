#!/usr/bin/env bash
# gsliced managing a real GPU: it discovers the GPU through NVML, admits a slice, a PyTorch job
# runs in it through `gslice run`, the daemon's view (`gslice ls --json`, /metrics) shows the
# job's memory, and restarting gsliced while the job runs disturbs nothing.
# Prints RESULT lines for bench/gpu/run's table.
set -uo pipefail
build="${GSLICE_BUILD:-build}"
out="${OUT:-/tmp}"
here="$(cd "$(dirname "$0")/../daemon" && pwd)"
tmp=$(mktemp -d /tmp/gsliced-gpu.XXXXXX)
export GSLICE_SOCKET="$tmp/gsliced.sock" GSLICE_LEDGER="/dev/shm/gslice-daemon-gpu-$$"
deps="${GSLICE_DEPS:-}"
daemon_pid=""
start_daemon() {
  LD_LIBRARY_PATH="$deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$build/bin/gsliced" \
    --set socket="$GSLICE_SOCKET" --set database="$tmp/gsliced.db" --set ledger="$GSLICE_LEDGER" \
    --set sample_interval_ms=200 >>"$out/gsliced.log" 2>&1 &
  daemon_pid=$!
  for _ in $(seq 100); do [ -S "$GSLICE_SOCKET" ] && return 0; sleep 0.1; done
  return 1
}
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null
  [ -n "${job_pid:-}" ] && kill "$job_pid" 2>/dev/null
  rm -rf "$tmp" "$GSLICE_LEDGER"
}
trap cleanup EXIT
result() { echo "RESULT $1 $2 $3"; }
get() { python3 "$here/http_unix.py" "$GSLICE_SOCKET" "$1"; }

if ! start_daemon; then result daemon.start FAIL "gsliced did not open its socket; see gsliced.log"; exit 1; fi
node=$("$build/bin/gslice" ls --json) || { result daemon.start FAIL "gslice ls failed"; exit 1; }
echo "$node" >"$out/daemon-node-before.json"
gpu=$(python3 -c 'import json,sys; g=json.load(sys.stdin)["gpus"][0]; print(g.get("name","?"), g.get("memory_total_bytes", g.get("memory_total","?")))' <<<"$node")
result daemon.discovers_gpu "$( [ -n "$gpu" ] && echo PASS || echo FAIL)" "NVML: $gpu"

if "$build/bin/gslice" create torch --gpus 0 --memory 12GiB --share 50% >"$out/daemon-create.txt" 2>&1; then
  result daemon.create_slice PASS "torch: 12 GiB, 50% guaranteed"
else
  result daemon.create_slice FAIL "$(tail -1 "$out/daemon-create.txt")"
fi
if "$build/bin/gslice" create too-big --gpus 0 --memory 500GiB >"$out/daemon-refuse.txt" 2>&1; then
  result daemon.admission_refuses FAIL "a 500 GiB slice was admitted"
else
  result daemon.admission_refuses PASS "$(head -1 "$out/daemon-refuse.txt" | cut -c1-110)"
fi

ready="$tmp/ready"
"$build/bin/gslice" run --name torch --memory 12GiB -- python3 "$here/hold.py" 4 25 "$ready" \
  >"$out/daemon-job.log" 2>&1 &
job_pid=$!
for _ in $(seq 600); do [ -f "$ready" ] && break; sleep 0.1; done
sleep 1
node=$("$build/bin/gslice" ls --json); echo "$node" >"$out/daemon-node-running.json"
used=$(python3 -c '
import json,sys
n=json.load(sys.stdin)
for s in n["slices"]:
    if s["name"]=="torch":
        print(sum(int(g.get("memory_used_bytes",0)) for g in s.get("gpus",[])) or s.get("memory_used_bytes",0))
' <<<"$node")
if [ -n "$used" ] && [ "$used" -ge $((4 << 30)) ]; then
  result daemon.sees_usage PASS "gslice ls: slice torch uses $((used >> 20)) MiB (job holds 4 GiB + context)"
else
  result daemon.sees_usage FAIL "gslice ls: slice torch uses '${used}' bytes"
fi
metric=$(get /metrics | grep '^gslice_slice_memory_used_bytes' | grep 'slice="torch"' | head -1)
echo "$metric" >"$out/daemon-metric.txt"
value=$(awk '{print int($NF)}' <<<"$metric")
if [ -n "$value" ] && [ "$value" -ge $((4 << 30)) ]; then
  result daemon.metrics PASS "${metric:0:120}"
else
  result daemon.metrics FAIL "no usage in /metrics: '${metric:0:100}'"
fi

kill -TERM "$daemon_pid"; wait "$daemon_pid" 2>/dev/null
if start_daemon; then
  sleep 1
  node=$("$build/bin/gslice" ls --json); echo "$node" >"$out/daemon-node-restarted.json"
  again=$(python3 -c 'import json,sys; print(any(s["name"]=="torch" for s in json.load(sys.stdin)["slices"]))' <<<"$node")
  result daemon.restart_readopts "$( [ "$again" = True ] && echo PASS || echo FAIL)" "slice torch present after restart: $again"
else
  result daemon.restart_readopts FAIL "gsliced did not come back"
fi
wait "$job_pid"; rc=$?; job_pid=""
result daemon.job_undisturbed "$( [ $rc -eq 0 ] && echo PASS || echo FAIL)" "$(grep -E 'inside the slice|steps=' "$out/daemon-job.log" | tr '\n' ' ' | cut -c1-140)"
