#!/usr/bin/env bash
# Where a process with no limit loses speed under gslice (issue 4, case 5), layer by layer,
# in one call on the GPU machine:
#   1. the host's cost per launch call (gslice_interpose_launch_bench, host mode, on the
#      legacy default stream as PyTorch launches): native, the shims preloaded with no class,
#      and with GSLICE_CLASS=guaranteed (what gslice run sets when no class is given: the
#      default streams are raised to the class's priority);
#   2. GPU activities per ResNet-50 training step (alone.py count), to turn 1 into a share of
#      a step;
#   3. ResNet-50 alone, the compute suite's case 5 (suite.py): native, gslice run with no
#      limit, the shims preloaded with no class, with GSLICE_CLASS=guaranteed, and native with
#      its legacy stream raised by the job itself (no shim), taking turns on the GPU.
# Full output under $OUT; the last lines are the table.
#   GSLICE_BUILD=$PWD/.carry/build bash bench/gpu/compute/overhead.sh
# Knobs: OVERHEAD_LB_ROUNDS (5); COMPUTE_OVERHEAD_ROUNDS (10 here), COMPUTE_OVERHEAD_PHASE_S (suite.py).
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT="${OUT:-$PWD/gpu-out}"
B="${GSLICE_BUILD:-$PWD/build}"
S="$B/lib/gslice"
mkdir -p "$OUT/logs"
log="$OUT/overhead.log"
: >"$log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv >>"$log" 2>&1
{ nproc; grep -m1 "model name" /proc/cpuinfo; } >>"$log"

bench() {  # env... -> median ns per launch call
  env "$@" "$B/bin/gslice_interpose_launch_bench" 20000 9 host legacy 2>>"$OUT/logs/launch_bench.err" | tail -1
}
declare -a lb_native lb_shim lb_guaranteed
for r in $(seq "${OVERHEAD_LB_ROUNDS:-5}"); do
  n=$(bench -u GSLICE_CLASS)
  s=$(bench -u GSLICE_CLASS "LD_PRELOAD=$S/libcuda.so.1")
  g=$(bench GSLICE_CLASS=guaranteed "LD_PRELOAD=$S/libcuda.so.1")
  echo "launch round $r: native $n shim $s guaranteed $g ns" | tee -a "$log"
  lb_native+=("$n"); lb_shim+=("$s"); lb_guaranteed+=("$g")
done
python3 bench/gpu/compute/alone.py count --workload resnet50 2>"$OUT/logs/count.err" | tee -a "$log"
export GSLICE_BUILD="$B" COMPUTE_CASES=5 COMPUTE_OVERHEAD_LAYERS=1 COMPUTE_OVERHEAD_ROUNDS="${COMPUTE_OVERHEAD_ROUNDS:-10}" COMPUTE_LOGS="$OUT/logs" PYTHONUNBUFFERED=1
timeout 480 python3 bench/gpu/compute/suite.py plain --state "$OUT/overhead.json" >>"$log" 2>&1
python3 bench/gpu/compute/suite.py report --state "$OUT/overhead.json" --md "$OUT/overhead.md" 2>&1 | tee -a "$log"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >>"$log" 2>&1

echo
echo "== overhead (case 5) =="
python3 - "${lb_native[*]}" "${lb_shim[*]}" "${lb_guaranteed[*]}" "$log" <<'PY'
import re, statistics, sys
cols = [[float(x) for x in a.split() if x] for a in sys.argv[1:4]]
def pairs(a, b):
    d = [y - x for x, y in zip(a, b)]
    return f"{statistics.fmean(d):+.0f} ns (rounds {', '.join(f'{x:+.0f}' for x in d)})" if d else "no data"
if cols[0]:
    print(f"launch call, native median of rounds   {statistics.median(cols[0]):.0f} ns")
print(f"shim, no class - native                {pairs(cols[0], cols[1])}")
print(f"shim, guaranteed - native              {pairs(cols[0], cols[2])}")
text = open(sys.argv[4]).read()
for m in re.finditer(r"^COUNT .*$", text, re.M):
    print(m.group(0))
for m in re.finditer(r"^RESULT compute\.overhead\S* \S+ (.*)$", text, re.M):
    print(m.group(1))
PY
