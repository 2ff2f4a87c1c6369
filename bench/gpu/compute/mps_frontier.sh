#!/usr/bin/env bash
# MPS's trade-off between a guaranteed and an opportunistic job (mps_frontier.py). Starts
# its own MPS control daemon (private pipe and log folders) and always stops it.
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
state="$OUT/mps_frontier.json"
rm -f "$state"
python3 bench/gpu/compute/mps_frontier.py solo "$state"
dir=$(mktemp -d /tmp/gslice-mps-XXXXXX)
mkdir -p "$dir/pipe" "$dir/log"
export CUDA_MPS_PIPE_DIRECTORY="$dir/pipe" CUDA_MPS_LOG_DIRECTORY="$dir/log"
stop() {
  echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
  for _ in $(seq 50); do pgrep -f "nvidia-cuda-mps-(control|server)" >/dev/null || break; sleep 0.1; done
  rm -rf "$dir"
}
trap stop EXIT INT TERM
nvidia-cuda-mps-control -d && sleep 1 && python3 bench/gpu/compute/mps_frontier.py mps "$state"
