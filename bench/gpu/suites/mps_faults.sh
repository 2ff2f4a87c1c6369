#!/usr/bin/env bash
# What a guaranteed job sees when an opportunistic job beside it faults (illegal address,
# killed mid-kernel, out of memory, trap), time-sliced and on MPS (bench/gpu/compute/mps_faults.py).
# $OUT/mps_faults.json holds every case; a short table is last.
#
#   bash bench/gpu/suites/mps_faults.sh
# Owns an MPS control daemon with private pipe and log folders (bench/gpu/compute/mps.sh),
# stopped on exit; never changes compute mode, clocks or power.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
OUT="${OUT:-$PWD/gpu-out}"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
dir=bench/gpu/compute
mkdir -p "$OUT"
mps_dir=$(mktemp -d /tmp/gslice-mps-XXXXXX)
stop_mps() {
  if [ -n "${mps_dir:-}" ]; then
    bash "$dir/mps.sh" stop "$mps_dir" >>"$OUT/mps_faults-mps.log" 2>&1
    cp "$mps_dir"/log/*.log "$OUT/" 2>/dev/null
    rm -rf "$mps_dir"
    mps_dir=
  fi
}
trap stop_mps EXIT INT TERM
if ! bash "$dir/mps.sh" start "$mps_dir" >>"$OUT/mps_faults-mps.log" 2>&1; then
  echo "RESULT mps_faults.setup FAIL the MPS daemon did not start"
  exit 1
fi
MPS_PIPE="$mps_dir/pipe" MPS_LOG="$mps_dir/log" python3 "$dir/mps_faults.py" --out "$OUT/mps_faults.json"
