#!/usr/bin/env bash
# A cap on MPS is held once (bench/gpu/compute/mps_cap.py): a 50%-capped job on half the SMs
# against the same job on half the SMs without gslice, and free. $OUT/mps_cap.json holds the
# figures, $OUT/mps_cap/ the logs; a short table is last.
#   GSLICE_BUILD=$PWD/.carry/build bash bench/gpu/suites/mps_cap.sh
# Owns an MPS control daemon with private pipe and log folders (bench/gpu/compute/mps.sh),
# stopped on exit; never changes compute mode, clocks or power.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
OUT="${OUT:-$PWD/gpu-out}"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
dir=bench/gpu/compute
mkdir -p "$OUT/mps_cap"
export COMPUTE_LOGS="$OUT/mps_cap"
bash "$dir/mps.sh" run "$OUT/mps_cap/mps.log" -- python3 "$dir/mps_cap.py" --out "$OUT/mps_cap.json" 2>&1 |
  tee "$OUT/mps_cap/run.log" | grep -v '^--- \|^  File\|^gslice: '
