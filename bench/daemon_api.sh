#!/usr/bin/env bash
# gsliced load and idle benchmark, on the simulated driver.
#
#   bench/daemon_api.sh [BUILD_DIR]      (default: build)
#
# 1. API throughput: wrk with 64 connections on loopback TCP (with the bearer token)
#    against GET /v1/slices (100 slices), GET /v1/node, GET /metrics and GET /healthz.
#    Target: >= 2,000 requests/s. Errors are counted by kind: connect, read/write, timeouts,
#    and non-2xx answers by status.
# 2. Idle CPU: gsliced with 100 slices and no client, CPU time over 30 s from
#    /proc/PID/stat (utime + stime). Target: < 5% of one core. Measured with the in-process
#    ledger (the node ledger holds at most 64 slices) and again with 64 slices in the node
#    ledger.
# Prints a Markdown report; bench/results/daemon_api.md is its output.
set -euo pipefail
build="${1:-build}"
root="$(cd "$(dirname "$0")/.." && pwd)"
gsliced="$root/$build/bin/gsliced"
nvml="$root/$build/lib/sim/libnvidia-ml.so.1"
for f in "$gsliced" "$nvml"; do
  [ -e "$f" ] || { echo "daemon_api.sh: $f is missing: build gsliced and gslice_sim_nvml in $build" >&2; exit 2; }
done
command -v wrk >/dev/null || { echo "daemon_api.sh: wrk is missing (apt-get install wrk)" >&2; exit 2; }

tag="gslice-bench-$$"
dir="$(mktemp -d "/tmp/$tag-XXXX")"
export GSLICE_SIM_STATE="/dev/shm/$tag-sim" GSLICE_SUSPEND_BOARD="/dev/shm/$tag-suspend-board"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  rm -rf "$dir" "/dev/shm/$tag-"*
}
trap cleanup EXIT

token="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
echo "$token" > "$dir/token"
chmod 600 "$dir/token"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

start_daemon() {  # start_daemon LEDGER
  rm -f "$dir/gsliced.db"*
  cat > "$dir/gsliced.toml" <<TOML
socket = "$dir/api.sock"
database = "$dir/gsliced.db"
ledger = "$1"
nvml_library = "$nvml"
tcp = "127.0.0.1:$port"
token_file = "$dir/token"
TOML
  "$gsliced" --config "$dir/gsliced.toml" 2>>"$dir/gsliced.log" &
  pid=$!
  for _ in $(seq 100); do
    curl -sf --unix-socket "$dir/api.sock" http://gsliced/healthz >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "gsliced did not start:" >&2; cat "$dir/gsliced.log" >&2; exit 1
}
stop_daemon() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; }

create_slices() {  # create_slices N
  for i in $(seq 1 "$1"); do
    gpu=$((i % 2))
    curl -sf --unix-socket "$dir/api.sock" -X POST http://gsliced/v1/slices \
      -d "{\"name\":\"bench-$i\",\"user\":\"user$((i % 7))\",\"class\":\"opportunistic\",\"gpus\":[\"$gpu\"],\"memory\":\"1GiB\"}" >/dev/null
  done
}

# CPU time of every thread of gsliced, in nanoseconds (schedstat's first field).
cpu_ns() { cat /proc/"$pid"/task/*/schedstat | awk '{s += $1} END {printf "%.0f", s}'; }

idle_cpu() {  # idle_cpu SECONDS -> percent of one core
  local t0 t1
  sleep 3  # let startup settle
  t0=$(cpu_ns)
  sleep "$1"
  t1=$(cpu_ns)
  python3 -c "print(f'{100.0 * ($t1 - $t0) / 1e9 / $1:.3f}')"
}

echo "# gsliced API load and idle CPU"
echo
echo "Command: \`bench/daemon_api.sh $build\` ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))."
echo "Simulated driver, 2 GPUs. Loopback TCP with the bearer token; wrk 4 threads, 64 connections, 10 s each."
echo "The machine is shared: load average at the start $(cut -d' ' -f1-3 /proc/loadavg) (wrk and gsliced share its cores)."
echo

start_daemon none
create_slices 100
echo "## Throughput (100 slices registered)"
echo
echo "Errors by kind: connect (refused or reset while connecting), read/write (the connection"
echo "failed mid-request, e.g. closed by the server), timeouts (no answer within wrk's 2 s), and"
echo "answers that are not 2xx, by status."
echo
echo "| endpoint | requests/s | latency avg | latency p99 | connect errors | read/write errors | timeouts | non-2xx by status |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
cat > "$dir/report.lua" <<'LUA'
-- Counts answers by status in every thread, and sums them at the end.
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) statuses = {} end
function response(status, headers, body)
  if status < 200 or status > 299 then statuses[status] = (statuses[status] or 0) + 1 end
end
done = function(summary, latency, requests)
  local by = {}
  for _, t in ipairs(threads) do
    for code, n in pairs(t:get("statuses")) do by[code] = (by[code] or 0) + n end
  end
  local codes = {}
  for code, n in pairs(by) do table.insert(codes, code) end
  table.sort(codes)
  local text = {}
  for _, code in ipairs(codes) do table.insert(text, code .. ": " .. by[code]) end
  local statuses_text = #text == 0 and "none" or table.concat(text, ", ")
  io.write(string.format("RESULT %.0f %.2f %.2f %d %d %d %s\n", summary.requests / (summary.duration / 1e6),
    latency.mean / 1000, latency:percentile(99) / 1000, summary.errors.connect,
    summary.errors.read + summary.errors.write, summary.errors.timeout, statuses_text))
end
LUA
for path in /v1/slices /v1/node /metrics /healthz; do
  out=$(wrk -t4 -c64 -d10s --latency -s "$dir/report.lua" -H "Authorization: Bearer $token" "http://127.0.0.1:$port$path")
  read -r _ rps avg p99 connect rw timeouts statuses <<<"$(grep RESULT <<<"$out")"
  echo "| GET $path | $rps | $avg ms | $p99 ms | $connect | $rw | $timeouts | $statuses |"
done
echo
echo "## Idle CPU (no client, sample_interval_ms = 1000)"
echo
echo "| setup | CPU over 30 s |"
echo "| --- | ---: |"
echo "| 100 slices, in-process ledger (\`ledger = \"none\"\`) | $(idle_cpu 30)% of a core |"
stop_daemon
start_daemon "/dev/shm/$tag-ledger"
create_slices 64
echo "| 64 slices (the node ledger's capacity) in the node ledger | $(idle_cpu 30)% of a core |"
stop_daemon
