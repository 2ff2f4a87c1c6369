#!/usr/bin/env bash
# Compute slices (issue 4): caps, shares, guaranteed/opportunistic pairs and overhead, each
# case side by side with solo, plain co-execution, MPS and gslice. Prints RESULT lines for
# bench/gpu/run; the markdown table goes to $OUT/compute.md, raw numbers to $OUT/compute.json.
#
# Owns the MPS control daemon of its MPS phase: started with its own pipe and log folders
# under a temp dir, and always stopped (trap) so none is left running.
# Environment: COMPUTE_CASES (1-5: bench/gpu/compute/suite.py; 6: reaction and a slice cap
# across two processes, bench/gpu/compute/reaction.py; 7: the default stream at the class's
# priority, gslice_default_stream_check and PyTorch), COMPUTE_WINDOW_S.
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
state="$OUT/compute.json"
rm -f "$state"
py=python3
suite=bench/gpu/compute/suite.py

$py -c 'import torch, torchvision; assert torch.cuda.is_available(); print("torch", torch.__version__, "torchvision", torchvision.__version__, torch.cuda.get_device_name(0))' || {
  echo "RESULT compute.setup FAIL python3 lacks torch/torchvision or sees no GPU"; exit 1; }
[ -x "${GSLICE_BUILD:-build}/bin/gslice" ] || echo "compute: no ${GSLICE_BUILD:-build}/bin/gslice; gslice columns will fail"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1 | sed 's/^/RESULT compute.gpu INFO /'

build="${GSLICE_BUILD:-$PWD/build}"
export GSLICE_BUILD="$build"

# Host cost of the meter's driver calls, and what the launch gate adds per launch:
# natively, under the shim with no compute policy (the hot path), and gated.
bench="$build/bin/gslice_compute_event_bench"
if [ -x "$bench" ]; then
  ev=$("$bench" events 2>&1 | grep cuEventRecord)
  echo "RESULT compute.meter.events INFO $ev"
  native=$("$bench" launch 2>&1 | grep -o 'empty-kernel launch [0-9]*' | grep -o '[0-9]*$')
  shim=$("$build/bin/gslice" run --memory=60GiB -- "$bench" launch 2>&1 | grep -o 'empty-kernel launch [0-9]*' | grep -o '[0-9]*$')
  gated=$("$build/bin/gslice" run --memory=60GiB --cap=99% -- "$bench" launch 2>&1 | grep -o 'empty-kernel launch [0-9]*' | grep -o '[0-9]*$')
  opp=$("$build/bin/gslice" run --memory=60GiB --class=opportunistic -- "$bench" launch 2>&1 | grep -o 'empty-kernel launch [0-9]*' | grep -o '[0-9]*$')
  if [ -n "$native" ] && [ -n "$shim" ] && [ -n "$gated" ]; then
    st=$([ $((shim - native)) -lt 100 ] && echo PASS || echo FAIL)
    echo "RESULT compute.launch.ungated $st +$((shim - native)) ns per launch under gslice with no compute limit (native $native ns, gslice $shim ns; target < 100)"
    echo "RESULT compute.launch.gated INFO +$((gated - native)) ns per launch with a cap (gate, meter, markers: $gated ns)"
    [ -n "$opp" ] && echo "RESULT compute.launch.opportunistic INFO +$((opp - native)) ns per launch, opportunistic with no guaranteed process on the GPU (straight through: $opp ns)"
  else
    echo "RESULT compute.launch.ungated FAIL launch bench did not run (native='$native' gslice='$shim' gated='$gated')"
  fi
fi

start=$SECONDS
# Everything is measured within COMPUTE_BUDGET_S (default 500 s), so the report is written
# inside a 10-minute device call; configurations past it are skipped and say so.
export COMPUTE_DEADLINE=$(( $(date +%s) + ${COMPUTE_BUDGET_S:-500} ))
$py "$suite" plain --state "$state"
echo "plain phase: $((SECONDS - start)) s"

# Reaction (regaining an idle GPU, settling) and a slice's cap across two processes.
if [[ ",${COMPUTE_CASES:-1,2,3,4,5,6,7}," == *",6,"* ]]; then
  $py bench/gpu/compute/reaction.py run --gslice "$build/bin/gslice" --json "$OUT/reaction.json" > "$OUT/reaction.log" 2>&1 ||
    echo "RESULT compute.reaction FAIL reaction.py exited $? (see reaction.log)"
  grep '^RESULT' "$OUT/reaction.log"
fi

# The default streams at the class's priority (launch_hooks.h): a guaranteed process's
# default-stream work stays in order (driver-API checks, and a PyTorch training run that must
# match the same run without gslice bit for bit, its legacy stream still at the class's
# priority at the end), and runs ahead of a low-priority flood.
if [[ ",${COMPUTE_CASES:-1,2,3,4,5,6,7}," == *",7,"* ]]; then
  chk="$build/bin/gslice_default_stream_check"
  real=""
  for p in /usr/local/nvidia/lib64/libcuda.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1; do
    [ -e "$p" ] && { real="$p"; break; }
  done
  ok=1
  for cls in guaranteed opportunistic; do
    if ! "$build/bin/gslice" run --memory=8GiB --class="$cls" -- "$chk" order >> "$OUT/default_stream.log" 2>&1; then ok=0; fi
  done
  "$chk" order >> "$OUT/default_stream.log" 2>&1 || ok=0
  [ $ok = 1 ] && echo "RESULT compute.default_stream.order PASS legacy-stream kernels, copies, memsets, events and a later blocking stream stay in order (guaranteed, opportunistic, native)" ||
    echo "RESULT compute.default_stream.order FAIL see default_stream.log"
  train='import hashlib, torch
torch.manual_seed(0); torch.use_deterministic_algorithms(True)
m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.SGD(m.parameters(), lr=1e-3)
x = torch.randn(256, 1024, device="cuda"); y = torch.randn(256, 1024, device="cuda")
for _ in range(200):
    opt.zero_grad(); loss = ((m(x) - y) ** 2).mean(); loss.backward(); opt.step()
h = hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes() for p in m.parameters())).hexdigest()[:16]
print("TRAIN", f"{loss.item():.9e}", h)
import ctypes
p = ctypes.c_int(99)
rc = ctypes.CDLL("libcuda.so.1").cuStreamGetPriority(ctypes.c_void_p(1), ctypes.byref(p))  # CU_STREAM_LEGACY
print("PRIORITY", rc, p.value)'
  no=$(CUBLAS_WORKSPACE_CONFIG=:4096:8 $py -c "$train" 2>>"$OUT/default_stream.log")
  go=$(CUBLAS_WORKSPACE_CONFIG=:4096:8 GSLICE_LOG=info "$build/bin/gslice" run --memory=8GiB --class=guaranteed -- $py -c "$train" 2>>"$OUT/default_stream.log")
  n=$(echo "$no" | grep '^TRAIN'); g=$(echo "$go" | grep '^TRAIN')
  np=$(echo "$no" | grep '^PRIORITY'); gp=$(echo "$go" | grep '^PRIORITY')
  echo "train native: $n $np / guaranteed: $g $gp" >> "$OUT/default_stream.log"
  [ -n "$n" ] && [ "$n" = "$g" ] && [ "$np" = "PRIORITY 0 0" ] && [ "$gp" = "PRIORITY 0 -5" ] &&
    echo "RESULT compute.default_stream.torch PASS 200 PyTorch steps on the default stream: loss and parameters identical to the native run ($n); legacy stream priority after them -5 under --class guaranteed, 0 natively" ||
    echo "RESULT compute.default_stream.torch FAIL native '$n' '$np' vs guaranteed '$g' '$gp' (want PRIORITY 0 0 / PRIORITY 0 -5)"
  lat_n=() lat_g=() fl_n=() fl_g=()
  for i in 1 2 3; do
    o=$("$chk" latency 2000 16 2>>"$OUT/default_stream.log"); echo "native: $o" >> "$OUT/default_stream.log"
    lat_n+=("$(echo "$o" | sed -n 's/.*latency_us=\([0-9]*\).*/\1/p')"); fl_n+=("$(echo "$o" | sed -n 's/.*flood_us=\([0-9]*\).*/\1/p')")
    o=$(GSLICE_REAL_DRIVER="$real" "$build/bin/gslice" run --memory=8GiB --class=guaranteed -- "$chk" latency 2000 16 2>>"$OUT/default_stream.log")
    echo "guaranteed: $o" >> "$OUT/default_stream.log"
    lat_g+=("$(echo "$o" | sed -n 's/.*latency_us=\([0-9]*\).*/\1/p')"); fl_g+=("$(echo "$o" | sed -n 's/.*flood_us=\([0-9]*\).*/\1/p')")
  done
  med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : "")}'; }
  ln=$(med "${lat_n[@]}"); fn=$(med "${fl_n[@]}"); lg=$(med "${lat_g[@]}"); fg=$(med "${fl_g[@]}")
  if [ -n "$lg" ] && [ -n "$fg" ] && [ -n "$ln" ]; then
    st=$(awk -v l="$lg" -v f="$fg" 'BEGIN {print (l <= 0.25 * f) ? "PASS" : "FAIL"}')
    echo "RESULT compute.default_stream.priority $st a tiny legacy-stream kernel behind 16 x 2 ms full-GPU kernels on 4 least-priority streams: done after $lg us of $fg us under --class guaranteed, $ln us of $fn us natively (medians of 3)"
  else
    echo "RESULT compute.default_stream.priority FAIL latency runs failed (see default_stream.log)"
  fi
  # The per-thread default stream, once each way.
  on=$("$chk" latency 2000 16 per-thread 2>>"$OUT/default_stream.log")
  og=$(GSLICE_REAL_DRIVER="$real" "$build/bin/gslice" run --memory=8GiB --class=guaranteed -- "$chk" latency 2000 16 per-thread 2>>"$OUT/default_stream.log")
  echo "per-thread native: $on / guaranteed: $og" >> "$OUT/default_stream.log"
  lg=$(echo "$og" | sed -n 's/.*latency_us=\([0-9]*\).*/\1/p'); fg=$(echo "$og" | sed -n 's/.*flood_us=\([0-9]*\).*/\1/p')
  ln=$(echo "$on" | sed -n 's/.*latency_us=\([0-9]*\).*/\1/p'); fn=$(echo "$on" | sed -n 's/.*flood_us=\([0-9]*\).*/\1/p')
  if [ -n "$lg" ] && [ -n "$fg" ] && [ -n "$ln" ]; then
    st=$(awk -v l="$lg" -v f="$fg" 'BEGIN {print (l <= 0.25 * f) ? "PASS" : "FAIL"}')
    echo "RESULT compute.default_stream.per_thread $st the same on the per-thread default stream: $lg us of $fg us under --class guaranteed, $ln us of $fn us natively"
  else
    echo "RESULT compute.default_stream.per_thread FAIL latency runs failed (see default_stream.log)"
  fi
fi

# Priority between processes: a tiny legacy-stream kernel every 5 ms in one process beside a
# flood of least-priority full-GPU kernels in another (gslice_default_stream_check flood/tiny).
# label, then the flood's command prefix and the tiny kernel's (each may be empty).
cross_priority() {
  local label=$1 flood=$2 tiny=$3 o
  ( $flood "$build/bin/gslice_default_stream_check" flood 3 >>"$OUT/default_stream.log" 2>&1 ) &
  sleep 0.05
  o=$($tiny "$build/bin/gslice_default_stream_check" tiny 200 2>>"$OUT/default_stream.log")
  wait
  echo "RESULT compute.priority.$label INFO ${o:-failed (see default_stream.log)}"
}
cases7() { [[ ",${COMPUTE_CASES:-1,2,3,4,5,6,7}," == *",7,"* ]]; }
cases7 && cross_priority time_sliced "" ""

mps=bench/gpu/compute/mps.sh
mps_dir=$(mktemp -d /tmp/gslice-mps-XXXXXX)
stop_mps() {
  if [ -n "${mps_dir:-}" ]; then
    bash "$mps" stop "$mps_dir"
    rm -rf "$mps_dir"
    mps_dir=
  fi
}
trap stop_mps EXIT INT TERM
if bash "$mps" start "$mps_dir"; then
  export CUDA_MPS_PIPE_DIRECTORY="$mps_dir/pipe" CUDA_MPS_LOG_DIRECTORY="$mps_dir/log"
  $py "$suite" mps --state "$state"
  if cases7; then
    g="$build/bin/gslice run --memory=8GiB"
    cross_priority mps_both_normal "" ""
    cross_priority mps_flood_client_priority_1 "env CUDA_MPS_CLIENT_PRIORITY=1" ""
    cross_priority mps_flood_opportunistic "$g --class=opportunistic --" ""
    cross_priority mps_tiny_guaranteed "" "$g --class=guaranteed --"
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
else
  echo "compute: the MPS control daemon did not start; MPS columns are n/a"
fi
stop_mps
echo "suite: $((SECONDS - start)) s"

$py "$suite" report --state "$state" --md "$OUT/compute.md"
