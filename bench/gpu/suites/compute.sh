#!/usr/bin/env bash
# Compute slices (issue 4): caps, shares, guaranteed/opportunistic pairs and overhead, each
# case side by side with solo, plain co-execution, MPS and gslice. Prints RESULT lines for
# bench/gpu/run; the markdown table goes to $OUT/compute.md, raw numbers to $OUT/compute.json.
#
# Owns the MPS control daemon of its MPS phase: started with its own pipe and log folders
# under a temp dir, and always stopped (trap) so none is left running.
# Environment: COMPUTE_CASES (1-5: bench/gpu/compute/suite.py; 6: reaction and a slice cap
# across two processes, bench/gpu/compute/reaction.py), COMPUTE_WINDOW_S.
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
  gated=$("$build/bin/gslice" run --memory=60GiB --compute=99% -- "$bench" launch 2>&1 | grep -o 'empty-kernel launch [0-9]*' | grep -o '[0-9]*$')
  if [ -n "$native" ] && [ -n "$shim" ] && [ -n "$gated" ]; then
    st=$([ $((shim - native)) -lt 100 ] && echo PASS || echo FAIL)
    echo "RESULT compute.launch.ungated $st +$((shim - native)) ns per launch under gslice with no compute limit (native $native ns, gslice $shim ns; target < 100)"
    echo "RESULT compute.launch.gated INFO +$((gated - native)) ns per launch with a cap (gate, meter, markers: $gated ns)"
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
if [[ ",${COMPUTE_CASES:-1,2,3,4,5,6}," == *",6,"* ]]; then
  $py bench/gpu/compute/reaction.py run --gslice "$build/bin/gslice" --json "$OUT/reaction.json" > "$OUT/reaction.log" 2>&1 ||
    echo "RESULT compute.reaction FAIL reaction.py exited $? (see reaction.log)"
  grep '^RESULT' "$OUT/reaction.log"
fi

mps_dir=$(mktemp -d /tmp/gslice-mps-XXXXXX)
stop_mps() {
  if [ -n "${mps_dir:-}" ]; then
    echo quit | CUDA_MPS_PIPE_DIRECTORY="$mps_dir/pipe" CUDA_MPS_LOG_DIRECTORY="$mps_dir/log" \
      nvidia-cuda-mps-control >/dev/null 2>&1
    # Wait for the server and control daemon to exit so none outlives the suite.
    for _ in $(seq 50); do pgrep -f "nvidia-cuda-mps-(control|server)" >/dev/null || break; sleep 0.1; done
    cat "$mps_dir"/log/*.log 2>/dev/null | tail -n 20
    rm -rf "$mps_dir"
    mps_dir=
  fi
}
trap stop_mps EXIT INT TERM
mkdir -p "$mps_dir/pipe" "$mps_dir/log"
if command -v nvidia-cuda-mps-control >/dev/null &&
   CUDA_MPS_PIPE_DIRECTORY="$mps_dir/pipe" CUDA_MPS_LOG_DIRECTORY="$mps_dir/log" nvidia-cuda-mps-control -d; then
  sleep 1
  CUDA_MPS_PIPE_DIRECTORY="$mps_dir/pipe" CUDA_MPS_LOG_DIRECTORY="$mps_dir/log" \
    $py "$suite" mps --state "$state"
else
  echo "compute: the MPS control daemon did not start; MPS columns are n/a"
fi
stop_mps
echo "suite: $((SECONDS - start)) s"

$py "$suite" report --state "$state" --md "$OUT/compute.md"
