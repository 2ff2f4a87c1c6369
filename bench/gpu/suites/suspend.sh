#!/usr/bin/env bash
# Suspend, resume and move (issue 6): PyTorch workloads suspended through the driver's
# checkpoint API, raw and through gslice. Prints RESULT lines for bench/gpu/run; numbers in
# $OUT/suspend.json, a table in $OUT/suspend.md. Environment: SUSPEND_SIZES (default 1,10,40),
# SUSPEND_CASES (train,bench,gate), SUSPEND_BIN (folder of gslice-checkpoint-bench and
# gslice-suspend-agent; default $GSLICE_BUILD/bin), SUSPEND_SHIM_DIR (folder of the shim's
# libcuda.so.1; default SUSPEND_BIN/../lib/gslice).
# Safety: plain device allocations only; the largest case holds 40 GiB on the GPU and as
# much in host memory while suspended.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export OUT="${OUT:-$PWD/gpu-out}" PYTHONUNBUFFERED=1
mkdir -p "$OUT"
python3 -c 'import torch; assert torch.cuda.is_available()' || {
  echo "RESULT suspend.setup FAIL python3 lacks torch or sees no GPU"; exit 1; }
exec python3 bench/gpu/suspend/suite.py --sizes "${SUSPEND_SIZES:-1,10,40}" --cases "${SUSPEND_CASES:-train,bench,gate}"
