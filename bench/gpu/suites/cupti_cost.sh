#!/usr/bin/env bash
# What CUPTI's kernel activity records cost, natively and as an MPS client: the launch
# benchmark's host cost per call with collection off, on, and off again, the cost of switching
# it, and how well records time kernels (bench/compute_cupti_cost.cc); then ResNet-50 bf16
# training with collection off and on in alternating phases (bench/gpu/compute/cupti_train.py).
# Logs under $OUT/cupti_cost/, a short table last.
#
#   GSLICE_BUILD=$PWD/.carry/build bash bench/gpu/suites/cupti_cost.sh
# Owns an MPS control daemon with private pipe and log folders (bench/gpu/compute/mps.sh) for
# the MPS half, stopped on exit; never changes compute mode, clocks or power.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
OUT="${OUT:-$PWD/gpu-out}"
BUILD="${GSLICE_BUILD:-$PWD/.carry/build}"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
dir=bench/gpu/compute
logs="$OUT/cupti_cost"
mkdir -p "$logs"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,compute_mode --format=csv >"$logs/gpus.csv" 2>&1
lib=
for c in /usr/local/cuda/lib64/libcupti.so /usr/local/cuda/extras/CUPTI/lib64/libcupti.so \
         /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so \
         $(python3 -c 'import nvidia, glob; print(" ".join(glob.glob(nvidia.__path__[0] + "/**/libcupti.so*", recursive=True)))' 2>/dev/null); do
  [ -z "$lib" ] && [ -e "$c" ] && lib=$c
done
[ -n "$lib" ] || { echo "RESULT cupti.setup FAIL no libcupti.so found"; exit 1; }
echo "libcupti: $lib" | tee "$logs/lib.txt"
rc=0
run() {  # NAME COMMAND...
  local name=$1
  shift
  "$@" >"$logs/$name.log" 2>&1 || { echo "RESULT cupti.$name FAIL (rc $?, $logs/$name.log)"; rc=1; }
}
bench="$BUILD/bin/gslice_compute_cupti_bench 20000 9 40 $lib"
run bench_native $bench
run train_native python3 "$dir/cupti_train.py" --libcupti "$lib" --phase-s 5 --rounds 4
run bench_mps bash "$dir/mps.sh" run "$logs/mps.log" -- $bench
run train_mps bash "$dir/mps.sh" run "$logs/mps.log" -- python3 "$dir/cupti_train.py" --libcupti "$lib" --phase-s 5 --rounds 4
echo "== table =="
for where in native mps; do
  f="$logs/bench_$where.log"
  printf '%-7s host ns/launch before %s on %s off-after %s on-again %s | pace ns off %s on %s | enable us %s disable us %s | %s\n' "$where" \
    "$(awk '$1=="host_ns_per_launch_before"{print $2}' "$f")" "$(awk '$1=="host_ns_per_launch_on"{print $2}' "$f")" \
    "$(awk '$1=="host_ns_per_launch_off_after"{print $2}' "$f")" "$(awk '$1=="host_ns_per_launch_on_again"{print $2}' "$f")" \
    "$(awk '$1=="gpu_pace_ns_off"{print $2}' "$f")" "$(awk '$1=="gpu_pace_ns_on"{print $2}' "$f")" \
    "$(awk '$1=="enable_us_median"{print $2}' "$f")" "$(awk '$1=="disable_us_median"{print $2}' "$f")" \
    "$(grep '^records ' "$f" | tail -1)"
  grep '^busy_' "$f" | sed "s/^/$where /"
  grep -o '"on_over_off": \[[^]]*\], "on_over_off_median": [0-9.]*' "$logs/train_$where.log" | sed "s/^/$where train /"
done
exit $rc
