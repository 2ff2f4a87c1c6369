#!/usr/bin/env bash
# Green contexts as an SM actuator for opportunistic work (bench/compute_green_ctx.cc): whether a
# green context can be made and holds a kernel of the primary context's memory and modules to
# its SMs, natively and as an MPS client; what keeping a stream's order across the two costs a
# launch; and whether a neighbour confined to a quarter of the SMs leaves a job the rest (on
# MPS) or not (time-sliced). About 90 s. $OUT/green/ holds each run's output; a short table is
# last.
#   GSLICE_BUILD=$PWD/.carry/build bash bench/gpu/suites/green_ctx.sh
# Owns an MPS control daemon with private pipe and log folders (bench/gpu/compute/mps.sh),
# stopped on exit; never changes compute mode, clocks or power.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
OUT="${OUT:-$PWD/gpu-out}"
build="${GSLICE_BUILD:-$PWD/build}"
bench="$build/bin/gslice_compute_green_bench"
logs="$OUT/green"
mkdir -p "$logs"
[ -x "$bench" ] || { echo "RESULT green.setup FAIL no $bench"; exit 1; }
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
seconds=${GREEN_LOAD_S:-8}
quarter=25

mps_dir=$(mktemp -d /tmp/gslice-green-mps-XXXXXX)
stop_mps() { bash bench/gpu/compute/mps.sh stop "$mps_dir" >>"$logs/mps.log" 2>&1; rm -rf "$mps_dir"; }
trap stop_mps EXIT

value() { sed -n "s/^$2 //p" "$1" | tail -1; }

# check: natively, then as an MPS client.
"$bench" check 50 >"$logs/check-native.log" 2>&1
native_rc=$?
if ! bash bench/gpu/compute/mps.sh start "$mps_dir" >>"$logs/mps.log" 2>&1; then
  echo "RESULT green.mps FAIL the MPS control daemon did not start (green/mps.log)"
  mps_up=0
else
  mps_up=1
fi
client() { CUDA_MPS_PIPE_DIRECTORY="$mps_dir/pipe" CUDA_MPS_LOG_DIRECTORY="$mps_dir/log" "$@"; }
mps_rc=1
if [ $mps_up = 1 ]; then
  client "$bench" check 50 >"$logs/check-mps.log" 2>&1
  mps_rc=$?
fi

# A job's speed (a wide grid back to back) alone and beside a neighbour on all the SMs or on a
# green context of a quarter of them; the neighbour starts first and outlasts it.
pair() {  # name, how (native|mps), neighbour (none|primary|green)
  local name=$1 how=$2 with=$3 run=() nb=""
  [ "$how" = mps ] && run=(client)
  if [ "$with" != none ]; then
    # At MPS client priority 1 as gslice runs opportunistic work (no meaning off MPS).
    CUDA_MPS_CLIENT_PRIORITY=1 "${run[@]}" "$bench" load $((seconds + 4)) "$with" $quarter \
      >"$logs/$name-neighbour.log" 2>&1 &
    nb=$!
    sleep 2
  fi
  "${run[@]}" "$bench" load "$seconds" primary >"$logs/$name.log" 2>&1 || echo "RESULT green.$name FAIL (green/$name.log)"
  [ -n "$nb" ] && wait "$nb"
}
neighbours=(alone:none beside-all:primary beside-green:green alone-after:none)
for how in native mps; do
  [ "$how" = mps ] && [ $mps_up = 0 ] && continue
  for c in "${neighbours[@]}"; do pair "$how-${c%%:*}" "$how" "${c#*:}"; done
done

verdict() { [ "$1" = 0 ] && echo PASS || echo FAIL; }
echo "RESULT green.check.native $(verdict $native_rc) (green/check-native.log)"
echo "RESULT green.check.mps $(verdict $mps_rc) (green/check-mps.log)"
echo
echo "== green contexts ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader -i 0 2>/dev/null))"
printf '%-8s %-10s %-8s %-8s %-10s %-10s %-10s %-10s %-10s\n' where check group/sm wide CUfunction CUkernel "host each" "host run64" "home"
for how in native mps; do
  f="$logs/check-$how.log"
  [ -f "$f" ] || continue
  printf '%-8s %-10s %-8s %-8s %-10s %-10s %-10s %-10s %-10s\n' "$how" "$(grep -q '^green ok' "$f" && echo ok || echo FAILED)" \
    "$(value "$f" group_sms)/$(value "$f" device_sms)" "$(value "$f" wide_ratio)" "$(value "$f" cufunction_on_green)" \
    "$(value "$f" cukernel_on_green)" "$(value "$f" order_moved_each_host_ns)" "$(value "$f" order_moved_runs64_host_ns)" \
    "$(value "$f" order_home_host_ns)"
done
echo
echo "A job's wide grids a second, and beside a neighbour over its speed alone (before and after):"
for how in native mps; do
  a=$(value "$logs/$how-alone.log" grids_per_s 2>/dev/null)
  b=$(value "$logs/$how-alone-after.log" grids_per_s 2>/dev/null)
  [ -n "$a" ] && [ -n "$b" ] || continue
  for c in "${neighbours[@]%%:*}"; do
    v=$(value "$logs/$how-$c.log" grids_per_s)
    printf '%-8s %-14s %10s %8s\n' "$how" "$c" "${v:-n/a}" \
      "$(python3 -c "import sys; v,a,b=sys.argv[1:]; print(f'{float(v)/((float(a)+float(b))/2):.3f}')" "${v:-0}" "$a" "$b" 2>/dev/null)"
  done
done
