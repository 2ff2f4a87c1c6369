#!/usr/bin/env bash
# The harvest frontier (bench/gpu/compute/frontier.py): the training and latency pairs under
# gslice at several protection levels, beside plain time-slicing and plain MPS at several
# thread percentages and client priorities, with solo runs before and after, in one call
# within FRONTIER_BUDGET_S (default 560 s wall; runs that would end past it are skipped, most
# important first, the solo runs after kept). Prints RESULT lines for bench/gpu/run and, last,
# a short table; $OUT/frontier.json holds every run, $OUT/frontier/ the logs (each process's,
# each run's raw results, the MPS daemon's), $OUT/compute-frontier.md the markdown of
# bench/gpu/compute/frontier_report.py, and $OUT/frontier.tar.gz all of $OUT/frontier/ (where
# only a few files come back from a machine, `rm -rf $OUT/frontier` after the suite loses nothing).
#
#   GSLICE_BUILD=$PWD/.carry/build bash bench/gpu/run frontier
#   OUT=/tmp/out FRONTIER_PAIRS=train bash bench/gpu/suites/frontier.sh
#   FRONTIER_DRY_RUN=1 bash bench/gpu/suites/frontier.sh     # the runs and commands, no GPU
#
# Environment: FRONTIER_PAIRS (train,latency), FRONTIER_PROTECT (0.97,0.90,0.80),
# FRONTIER_MPS_PCT (100,50,25,10), FRONTIER_MPS_PRIO (1,0), FRONTIER_GSLICE_MPS (0; 1: gslice
# with both processes MPS clients too; only: gslice on MPS only), FRONTIER_WINDOW_S (15), FRONTIER_SETTLE_S (1),
# FRONTIER_LEAD_S (10), FRONTIER_BUDGET_S (560), FRONTIER_DRY_RUN, GSLICE_BUILD.
# Owns an MPS control daemon with private pipe and log folders (bench/gpu/compute/mps.sh),
# stopped on exit; never changes compute mode, clocks or power.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
OUT="${OUT:-$PWD/gpu-out}"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY  # native runs stay off any MPS daemon
py=python3
dir=bench/gpu/compute

if [ "${FRONTIER_DRY_RUN:-0}" = 1 ]; then
  exec $py "$dir/frontier.py" plan
fi
start=$(date +%s)
budget=${FRONTIER_BUDGET_S:-560}
# Time kept for stopping the MPS daemon and the report after the last run.
export FRONTIER_DEADLINE=$((start + budget - 15))
mkdir -p "$OUT/frontier"
rm -f "$OUT/frontier.json"

$py -c 'import torch, torchvision; assert torch.cuda.is_available()' >"$OUT/frontier/setup.log" 2>&1 || {
  echo "RESULT frontier.setup FAIL python3 lacks torch/torchvision or sees no GPU (frontier/setup.log)"; exit 1; }
build="${GSLICE_BUILD:-$PWD/build}"
export GSLICE_BUILD="$build"
[ -x "$build/bin/gslice" ] || echo "frontier: no $build/bin/gslice; the gslice configurations will fail"
FRONTIER_COMMAND="$(env | grep -E '^FRONTIER_(PAIRS|PROTECT|MPS_PCT|MPS_PRIO|GSLICE_MPS|WINDOW_S|SETTLE_S|LEAD_S|BUDGET_S)=' | sort | tr '\n' ' ')GSLICE_BUILD=$build bash bench/gpu/suites/frontier.sh"
export FRONTIER_COMMAND

mps_dir=$(mktemp -d /tmp/gslice-mps-XXXXXX)
stop_mps() {
  if [ -n "${mps_dir:-}" ]; then
    bash "$dir/mps.sh" stop "$mps_dir" >>"$OUT/frontier/mps.log" 2>&1
    cp -r "$mps_dir/log" "$OUT/frontier/mps-log" 2>/dev/null
    rm -rf "$mps_dir"
    mps_dir=
  fi
}
trap stop_mps EXIT INT TERM

# frontier.py skips what would end past FRONTIER_DEADLINE; the timeout stops a run that
# overstays (SIGTERM: its processes are ended and the JSON keeps what was measured).
: >"$OUT/frontier/run.log"
left=$((FRONTIER_DEADLINE - $(date +%s) + 5))
timeout --signal=TERM --kill-after=20 "$left" $py "$dir/frontier.py" run --json "$OUT/frontier.json" \
  --logs "$OUT/frontier/logs" --mps-dir "$mps_dir" >"$OUT/frontier/run.log" 2>&1 &
runner=$!
tail -n +1 -f "$OUT/frontier/run.log" --pid=$runner | grep --line-buffered -E '^(run |MPS |frontier)'
wait $runner
rc=$?
stop_mps
echo "frontier: $(( $(date +%s) - start )) s"
if [ ! -s "$OUT/frontier.json" ]; then
  echo "RESULT frontier.suite FAIL frontier.py wrote no JSON (exit $rc; frontier/run.log)"
  exit 1
fi
[ $rc -eq 0 ] || echo "RESULT frontier.budget INFO frontier.py stopped before its plan's end (exit $rc): the budget ran out; what it measured is reported"
$py "$dir/frontier_report.py" "$OUT/frontier.json" >"$OUT/compute-frontier.md" ||
  echo "RESULT frontier.report FAIL frontier_report.py failed"
tar -czf "$OUT/frontier.tar.gz" -C "$OUT" frontier
$py "$dir/frontier_report.py" --table "$OUT/frontier.json"
