#!/usr/bin/env bash
# Timelines of remote runs on a real GPU (docs/trace.md, "Remote programs"): gslice-remoted on
# the real driver serves a unix socket and loopback TCP; a few ResNet-50 training steps with
# torch.cuda.nvtx ranges run through the forwarding client under gslice run --remote --trace,
# and bench/gpu/remote/check_remote_trace.py checks the merged file: the client and the worker,
# CUPTI kernels, every worker execution inside its client call within the stated clock
# uncertainty, flows paired, network slices, the worker's kernels inside the client's step
# ranges on the aligned clock. Prints RESULT lines; files in $OUT/remote_trace/.
# Safety: plain device allocations in a 16 GiB slice; no managed memory.
set -uo pipefail
cd "$(dirname "$0")/../../.."
build="${GSLICE_BUILD:-build}"
out="${OUT:-/tmp}/remote_trace"
mkdir -p "$out"
steps="${REMOTE_TRACE_STEPS:-6}"
export PYTHONUNBUFFERED=1
unset GSLICE_SOCKET GSLICE_DAEMON GSLICE_TRACE
export GSLICE_LEDGER="/dev/shm/gslice-rtrace-$$" GSLICE_SUSPEND_BOARD="/dev/shm/gslice-rtrace-board-$$"
# Rings for every call of the run (about 25,000 a step through the client): the client's and,
# through the server's environment, the worker's.
export GSLICE_TRACE_EVENTS="${GSLICE_TRACE_EVENTS:-1048576}"
result() { echo "RESULT $1 $2 $3"; }

# CUPTI for the worker's shim: the one PyTorch's wheels bring, else the toolkit's.
if [ -z "${GSLICE_CUPTI:-}" ]; then
  cupti=$(python3 - <<'PY' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
c = []
for r in roots:
    c += sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib", "libcupti.so*")))
c += sorted(glob.glob("/usr/local/cuda*/lib64/libcupti.so*")) + sorted(glob.glob("/usr/local/cuda*/extras/CUPTI/lib64/libcupti.so*"))
print(c[0] if c else "")
PY
)
  [ -n "$cupti" ] && export GSLICE_CUPTI="$cupti"
fi
echo "CUPTI: ${GSLICE_CUPTI:-(the shim searches)}"
python3 -c "import torch, torchvision" || { result remote_trace.torch FAIL "no PyTorch with torchvision here"; exit 1; }

sock="/tmp/gslice-rtrace-$$.sock"
"$build/bin/gslice-remoted" --listen "unix:$sock" --listen tcp://127.0.0.1:0 --allow-root-tenant >"$out/gslice-remoted.log" 2>&1 &
server=$!
cleanup() { kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$sock" "$GSLICE_LEDGER" "$GSLICE_SUSPEND_BOARD"; }
trap cleanup EXIT
tcp=""
for _ in $(seq 200); do
  tcp=$(sed -n 's/.*listening on \(tcp:\/\/127\.0\.0\.1:[0-9]*\).*/\1/p' "$out/gslice-remoted.log" | head -1)
  [ -n "$tcp" ] && [ -S "$sock" ] && break
  sleep 0.1
done
if [ -z "$tcp" ] || [ ! -S "$sock" ]; then
  result remote_trace.server FAIL "gslice-remoted did not listen (remote_trace/gslice-remoted.log)"
  exit 1
fi

status=0
for side in unix tcp; do
  addr="unix:$sock"; [ "$side" = tcp ] && addr="$tcp"
  file="$out/resnet50-$side.json"
  GSLICE_LOG=info "$build/bin/gslice" run --remote "$addr" --memory 16GiB --trace "$file" -- \
    python3 bench/gpu/trace/resnet_train.py --steps "$steps" --warmup 2 --batch 32 --nvtx >"$out/traced-$side.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] || [ ! -s "$file" ]; then
    result "remote_trace.resnet50_$side" FAIL "exit $rc: $(tail -2 "$out/traced-$side.log" | tr '\n' ' ')"
    status=1
    continue
  fi
  check=$(python3 bench/gpu/remote/check_remote_trace.py "$file" "$((steps + 2))" 2>&1 | tail -1)
  result "remote_trace.resnet50_$side" "${check%% *}" "${check#* } ($(du -h "$file" | cut -f1))"
  [ "${check%% *}" = PASS ] || status=1
done
sleep 1
leftover=$(find "${TMPDIR:-/tmp}" -maxdepth 1 -name 'gslice-remote-trace-*' -newer "$out/gslice-remoted.log" 2>/dev/null | wc -l)
result remote_trace.cleanup "$([ "$leftover" -eq 0 ] && echo PASS || echo FAIL)" "$leftover worker timeline folders left"
exit $status
