#!/usr/bin/env bash
# What gslice costs guaranteed work on MPS beside an active opportunistic job, and where
# (bench/gpu/compute/mps_launch.py): the training pair interleaved, plain MPS at client
# priority 1 against gslice (the guaranteed job alone under gslice, then both), and the launch
# benchmark's host cost per call natively and under gslice, alone and beside a peer. With
# GSLICE_BUILD_BASE it also runs the gslice configurations of that build (before and after).
# $OUT/mps_launch.json holds the figures, $OUT/mps_launch/ the logs; a short table is last.
#
#   GSLICE_BUILD=$PWD/.carry/build GSLICE_BUILD_BASE=$PWD/.carry/base bash bench/gpu/suites/mps_launch.sh
# Owns an MPS control daemon with private pipe and log folders (bench/gpu/compute/mps.sh),
# stopped on exit; never changes compute mode, clocks or power.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
OUT="${OUT:-$PWD/gpu-out}"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
dir=bench/gpu/compute
mkdir -p "$OUT/mps_launch"
export COMPUTE_LOGS="$OUT/mps_launch"
bash "$dir/mps.sh" run "$OUT/mps_launch/mps.log" -- python3 "$dir/mps_launch.py" --out "$OUT/mps_launch.json" 2>&1 |
  tee "$OUT/mps_launch/run.log" | grep -v '^--- \|^  File\|^gslice: '
