#!/usr/bin/env bash
# The interposer's GPU suite and benchmarks, on a machine with an NVIDIA GPU (issue 3):
# every allocation path against the real driver, cuGetProcAddress, the example program,
# PyTorch in a 10 GiB slice (mem_get_info, OutOfMemoryError, free + allocate again, with and
# without expandable segments), nvidia-smi inside the slice, CUDA graph capture and replay, a
# training loop in a slice vs native, and the overhead benchmarks (launch, cuMemAlloc/Free
# alone and 8 processes at once, 64 processes initialising at once).
#
#   tests/gpu/run_interpose.sh          # GSLICE_BUILD (default build/), OUT (default ./gpu-out)
#
# Prints "RESULT <name> <PASS|FAIL|INFO> <detail>" lines (bench/gpu/run's table format) and
# a short table last; full logs go to $OUT/interpose.log. Plain device allocations only.
set -uo pipefail
cd "$(dirname "$0")/../.."
B="${GSLICE_BUILD:-$PWD/build}"
B="$(cd "$B" && pwd)"
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
LOG="$OUT/interpose.log"
TABLE="$OUT/interpose-table.txt"
: >"$LOG"
: >"$TABLE"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
export GSLICE_LEDGER="/dev/shm/gslice-gpu-ledger-$$"
GS="$B/bin/gslice"
CLIENT="$B/bin/gslice_interpose_client"
EXAMPLE="$B/bin/gslice-example"
LAUNCH="$B/bin/gslice_interpose_launch_bench"
SHIMS="$B/lib/gslice/libcuda.so.1 $B/lib/gslice/libnvidia-ml.so.1"
REAL=""
for p in /usr/local/nvidia/lib64/libcuda.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so.1 /lib/libcuda.so.1 /usr/lib64/libcuda.so.1; do
  [ -e "$p" ] && { REAL="$p"; break; }
done
export LD_LIBRARY_PATH="$(dirname "${REAL:-/usr/local/nvidia/lib64/x}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
trap 'rm -rf "$GSLICE_LEDGER" "$GSLICE_LEDGER-u$(id -u)"' EXIT

result() {
  echo "RESULT $1 $2 ${3:-}"
  printf '%-34s %-5s %s\n' "$1" "$2" "${3:-}" >>"$TABLE"
}
log() { echo "== $*" >>"$LOG"; }
# INTERPOSE_CASES="paths alloc ..." runs only those sections (default: all): overhead paths
# torch train launch alloc init.
want() { [ -z "${INTERPOSE_CASES:-}" ] || [[ " $INTERPOSE_CASES " == *" $1 "* ]]; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

for f in "$GS" "$CLIENT" "$B/lib/gslice/libcuda.so.1"; do
  [ -e "$f" ] || { echo "run_interpose: missing $f (build first, carry build/)" >&2; exit 2; }
done
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
echo "GPU: $gpu; real driver: $REAL" | tee -a "$LOG"
python3 -c 'import torch; print("torch", torch.__version__)' >>"$LOG" 2>&1

if want overhead; then
# --- context overhead, measured natively (what GSLICE_CONTEXT_OVERHEAD charges) -------------
log "context overhead"
overhead=$(python3 - 2>>"$LOG" <<'EOF'
import subprocess, torch
def used():
    return int(subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True).stdout.split()[0])
before = used()
x = torch.zeros(1, device="cuda") + 1
torch.cuda.synchronize()
after = used()
print(after - before)
EOF
)
result context_overhead_mib INFO "${overhead:-?} MiB (nvidia-smi used, torch context + 1 small tensor)"
fi

if want paths; then
# --- every allocation path against the real driver ---------------------------------------
for kind in linear pitch async pool vmm array array3d mipmapped graph; do
  log "paths $kind"
  if LD_PRELOAD="$SHIMS" GSLICE_MEMORY=64MiB GSLICE_CONTEXT_OVERHEAD=0 GSLICE_SLICE="path-$kind" \
      "$CLIENT" paths "$kind" >>"$LOG" 2>&1; then
    result "path_$kind" PASS "40 MiB counted, 2nd refused (OOM) at 64 MiB, free+retry ok"
  else
    result "path_$kind" FAIL "see interpose.log"
  fi
done
log procaddress
if out=$(LD_PRELOAD="$SHIMS" GSLICE_MEMORY=64MiB GSLICE_CONTEXT_OVERHEAD=0 GSLICE_SLICE=procaddress \
    GSLICE_REAL_DRIVER="$REAL" "$CLIENT" procaddress 2>>"$LOG"); then
  result cuGetProcAddress PASS "$out"
else
  result cuGetProcAddress FAIL "see interpose.log"
fi
log example
if "$GS" run --memory 4GiB -- "$EXAMPLE" >>"$LOG" 2>&1; then
  result example_4GiB PASS "$(grep -o 'allocated [0-9]* chunks[^(]*' "$LOG" | tail -1)"
else
  result example_4GiB FAIL "see interpose.log"
fi
fi

if want torch; then
# --- PyTorch in a 10 GiB slice -------------------------------------------------------------
torch_case() {  # prefix, env..., -- args
  local prefix=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  log "torch $prefix $*"
  local out
  out=$(env "${envs[@]}" "$GS" run --memory 10GiB -- python3 tests/gpu/torch_slice.py "$@" 2>>"$LOG")
  local rc=$?
  echo "$out" >>"$LOG"
  echo "$out" | grep '^CHECK ' | while read -r _ name status detail; do result "${prefix}_$name" "$status" "$detail"; done
  [ $rc -eq 0 ] || echo "$out" | grep -q '^CHECK .* FAIL' || result "${prefix}_run" FAIL "exit $rc, see interpose.log"
}
torch_case torch -- memory 10
torch_case torch_expandable PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- memory 10
torch_case smi -- smi 10
torch_case graph -- graph
fi

if want train; then
# --- training loop: slice vs native, alternating ---------------------------------------------
log train
native=() sliced=()
for i in 1 2 3; do
  n=$(python3 tests/gpu/torch_slice.py train 300 2>>"$LOG" | sed -n 's/^TRAIN samples_per_s=\([0-9.]*\).*/\1/p')
  s=$("$GS" run --memory 10GiB -- python3 tests/gpu/torch_slice.py train 300 2>>"$LOG" | sed -n 's/^TRAIN samples_per_s=\([0-9.]*\).*/\1/p')
  echo "train native=$n slice=$s" >>"$LOG"
  native+=("$n") sliced+=("$s")
done
nm=$(printf '%s\n' "${native[@]}" | median)
sm=$(printf '%s\n' "${sliced[@]}" | median)
ratio=$(awk -v s="$sm" -v n="$nm" 'BEGIN {if (n > 0) printf "%.4f", s / n; else print "nan"}')
status=$(awk -v r="$ratio" 'BEGIN {print (r >= 0.99) ? "PASS" : "FAIL"}')
result train_throughput_ratio "$status" "slice/native $ratio (median samples/s $sm vs $nm, 3 runs each, 10 GiB slice)"
fi

if want launch; then
# --- benchmarks ----------------------------------------------------------------------------
log "launch bench"
if [ -x "$LAUNCH" ]; then
  ln=() ls=()
  for i in 1 2 3; do
    ln+=("$(LD_PRELOAD= "$LAUNCH" 20000 9 2>>"$LOG")")
    ls+=("$(LD_PRELOAD="$SHIMS" GSLICE_MEMORY=10GiB GSLICE_SLICE=launch "$LAUNCH" 20000 9 2>>"$LOG")")
  done
  echo "launch native=${ln[*]} shim=${ls[*]}" >>"$LOG"
  a=$(printf '%s\n' "${ln[@]}" | median)
  b=$(printf '%s\n' "${ls[@]}" | median)
  added=$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.1f", b - a}')
  status=$(awk -v d="$added" 'BEGIN {print (d <= 100) ? "PASS" : "FAIL"}')
  result launch_added_ns "$status" "$added ns per empty launch (native $a ns, shim $b ns; median of 3x9 batches of 20000)"
fi
fi

alloc_case() {  # name bytes count procs [info]: paired hook/real medians in each process
  local name=$1 bytes=$2 count=$3 procs=$4 kind=${5:-} files=()
  for p in $(seq 1 "$procs"); do
    local f="$OUT/.alloc-$p"
    files+=("$f")
    LD_PRELOAD="$SHIMS" GSLICE_MEMORY=100GiB GSLICE_SLICE="alloc-$name" GSLICE_REAL_DRIVER="$REAL" \
      "$CLIENT" allocbench "$count" "$bytes" >"$f" 2>>"$LOG" &
  done
  wait
  echo "alloc $name: $(cat "${files[@]}" | tr '\n' ' ')" >>"$LOG"
  local hook real added status
  hook=$(sed -n 's/^hook=\([0-9]*\).*/\1/p' "${files[@]}" | median)
  real=$(sed -n 's/.*real=\([0-9]*\).*/\1/p' "${files[@]}" | median)
  added=$(sed -n 's/.*diff=\(-*[0-9]*\).*/\1/p' "${files[@]}" | median)
  local spread
  spread=$(sed -n 's/.*diff=\(-*[0-9]*\).*/\1/p' "${files[@]}" | sort -n | awk 'NR==1 {lo=$1} {hi=$1} END {print lo ".." hi}')
  rm -f "${files[@]}"
  status=$(awk -v d="$added" 'BEGIN {print (d <= 1000) ? "PASS" : "FAIL"}')
  if [ "$kind" = info ]; then
    # Under 8-way contention the driver's own time varies by more than the whole budget: the
    # shim's share is measured without the driver (shim_bookkeeping_* below).
    status=INFO
  fi
  result "$name" "$status" "$added ns added per cuMemAlloc+cuMemFree (through the shim $hook ns, real driver $real ns; median of per-pair differences, $procs process(es) at once; per-process $spread ns)"
}

if want alloc; then
log "alloc bench"
alloc_case alloc_free_2MiB_x1 $((2 << 20)) 2000 1
alloc_case alloc_free_256MiB_x1 $((256 << 20)) 400 1
alloc_case alloc_free_256MiB_x8procs $((256 << 20)) 400 8 info
LB="$B/bin/gslice_interpose_ledger_bench"
if [ -x "$LB" ]; then
  for p in 1 8; do
    v=$("$LB" "$p" 400000 2>>"$LOG")
    status=$(awk -v d="$v" 'BEGIN {print (d != "" && d <= 1000) ? "PASS" : "FAIL"}')
    result "shim_bookkeeping_x${p}procs" "$status" "$v ns per alloc+free pair (ledger charge/release + allocation table), $p process(es) on one slice"
  done
fi
fi

if want init; then
log "init64"
# 64 processes start at once: each does cuInit + context + one allocation. The driver's own
# start-up dominates (seconds under this contention), so the end-to-end medians are shown for
# context; the pass criterion is the shim's own start-up work (entry points resolved + slice
# attached), which it reports per process at GSLICE_LOG=info.
init_round() {  # mode -> p50 microseconds of 64 processes starting at once
  local mode=$1 files=()
  for p in $(seq 1 64); do
    local f="$OUT/.init-$mode-$p"
    files+=("$f")
    if [ "$mode" = native ]; then
      LD_PRELOAD= "$CLIENT" init >"$f" 2>>"$LOG" &
    else
      # One slice for all 64: 64 contexts' overhead (GSLICE_CONTEXT_OVERHEAD each) must fit.
      LD_PRELOAD="$SHIMS" GSLICE_MEMORY=64GiB GSLICE_SLICE=init64 GSLICE_LOG=info "$CLIENT" init >"$f" 2>"$f.err" &
    fi
  done
  wait
  local ok
  ok=$(cat "${files[@]}" | grep -c '^[0-9]')
  echo "$ok" >>"$OUT/.init-ok-$mode"
  echo "init64 $mode ok=$ok values: $(cat "${files[@]}" | sort -n | tr '\n' ' ')" >>"$LOG"
  if [ "$mode" = shim ]; then
    for p in $(seq 1 64); do
      awk '/entry points resolved in/ {for (i=1;i<=NF;i++) if ($i=="in") r+=$(i+1)} /attached/ {for (i=1;i<=NF;i++) if ($i=="in") a=$(i+1)} END {print r + a}' \
        "$OUT/.init-$mode-$p.err"
    done >>"$OUT/.init-own"
    cat "$OUT"/.init-shim-*.err >>"$LOG"
    rm -f "$OUT"/.init-shim-*.err
  fi
  cat "${files[@]}" | median
  rm -f "${files[@]}"
}
rm -f "$OUT/.init-own" "$OUT"/.init-ok-*
i_n=() i_s=()
for r in 1 2; do
  i_n+=("$(init_round native)")
  i_s+=("$(init_round shim)")
done
a=$(printf '%s\n' "${i_n[@]}" | median)
b=$(printf '%s\n' "${i_s[@]}" | median)
own=$(median <"$OUT/.init-own")
own_max=$(sort -n "$OUT/.init-own" | tail -1)
rm -f "$OUT/.init-own"
ok_n=$(awk '{s+=$1} END {print s+0}' "$OUT/.init-ok-native")
ok_s=$(awk '{s+=$1} END {print s+0}' "$OUT/.init-ok-shim")
rm -f "$OUT"/.init-ok-*
status=$(awk -v d="$own" -v ok="$ok_s" 'BEGIN {print (d <= 1000 && ok == 128) ? "PASS" : "FAIL"}')
result init64_completed "$([ "$ok_s" = 128 ] && echo PASS || echo FAIL)" "$ok_s/128 processes under the shim and $ok_n/128 natively initialised and allocated"
result init64_shim_own_p50_us "$status" "$own us p50 (max $own_max) of shim start-up work per process (both shims' entry points resolved + slice attached), 64 at once, 2 rounds"
result init64_end_to_end_p50_us INFO "native $a us, shim $b us (cuInit+context+1 alloc, 64 at once; driver-dominated)"
fi

echo
echo "GPU: $gpu"
printf '%-34s %-5s %s\n' "case" "status" "detail"
cat "$TABLE"
! grep -q ' FAIL ' "$TABLE"
