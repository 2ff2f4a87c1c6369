#!/usr/bin/env bash
# The harvest frontier (bench/gpu/compute/frontier.py): the training and latency pairs under
# gslice at several protection levels, beside plain time-slicing and plain MPS at several
# thread percentages and client priorities, with solo runs before and after, in one call
# within FRONTIER_BUDGET_S (default 560 s wall; runs that would end past it are skipped, most
# important first, the solo runs after kept). Prints RESULT lines for bench/gpu/run and, last,
# a short table; $OUT/frontier.json holds every run, $OUT/frontier/ the logs (each process's,
# each run's raw results, the MPS daemon's), $OUT/compute-frontier.md the markdown of
# bench/gpu/compute/frontier_report.py, $OUT/frontier-readings.txt what each gslice guaranteed
# process read period by period (bench/gpu/compute/readings_report.py on its log; the readings
# are traced where GSLICE_LOG=debug), and $OUT/frontier.tar.gz all of $OUT/frontier/ (where
# only a few files come back from a machine, `rm -rf $OUT/frontier` after the suite loses nothing).
#
#   GSLICE_BUILD=$PWD/.carry/build bash bench/gpu/run frontier
#   OUT=/tmp/out FRONTIER_PAIRS=train bash bench/gpu/suites/frontier.sh
#   FRONTIER_DRY_RUN=1 bash bench/gpu/suites/frontier.sh     # the runs and commands, no GPU
#   OUT=/tmp/out FRONTIER_GPUS=0,1,2,3,4,5,6,7 FRONTIER_WINDOW_S=60 bash bench/gpu/suites/frontier.sh
#   OUT=/tmp/out FRONTIER_GPUS=0,1 FRONTIER_INTERLEAVE=3 FRONTIER_WINDOW_S=54 bash bench/gpu/suites/frontier.sh
#   OUT=/tmp/out FRONTIER_GPUS=0,1,2,3 FRONTIER_SPLIT=2 FRONTIER_INTERLEAVE=4 FRONTIER_WINDOW_S=60 \
#     FRONTIER_MPS_PCT=100,50 FRONTIER_MPS_PCT_P0=100 bash bench/gpu/suites/frontier.sh
#   # one GPU, a pair's 60 s windows over two calls (rounds 0-1, then 2-3 of the rotation); the
#   # report pools a lane's calls: frontier_report.py call1/frontier-lane0.json call2/frontier-lane0.json
#   OUT=/tmp/out FRONTIER_PAIRS=train FRONTIER_GPUS=0 FRONTIER_INTERLEAVE=2 FRONTIER_WINDOW_S=30 \
#     FRONTIER_FIRST_ROUND=2 FRONTIER_MPS_PCT=100,50 FRONTIER_MPS_PCT_P0=100 bash bench/gpu/suites/frontier.sh
#
# FRONTIER_GPUS=LIST splits the plan into one lane a GPU (frontier.py's FRONTIER_LANES: a pair a
# lane, each lane with its own solo runs before and after) and runs them at once, each lane on
# its GPU with its own MPS control daemon: $OUT/frontier-laneK.json and $OUT/frontier/laneK/,
# and one report over all of them. Eight GPUs hold the whole default plan with 60 s windows in
# one call. FRONTIER_LANES=N FRONTIER_LANE=K without FRONTIER_GPUS runs lane K alone.
#
# Environment: FRONTIER_PAIRS (train,latency; also gpu: matrix products both, GPU-bound), FRONTIER_PROTECT (0.97,0.90,0.80),
# FRONTIER_MPS_PCT (100,50,25,10; FRONTIER_MPS_PCT_P0, _P1 for one priority), FRONTIER_MPS_PRIO (1,0), FRONTIER_GSLICE_MPS (0; 1: gslice
# with both processes MPS clients too; only: gslice on MPS only), FRONTIER_GSLICE_PRIO (interleaved:
# gslice's opportunistic process at each client priority listed, over gslice's own), FRONTIER_GSLICE_CAP
# (interleaved: gslice's opportunistic job capped at each C% listed, by the SMs and by time alone, beside the
# first level's guaranteed job), FRONTIER_GSLICE_SMS (interleaved: gslice's opportunistic job uncapped, its program
# at each S% of the SMs listed, beside the first level's guaranteed job), FRONTIER_GSLICE_SOLO (1: interleaved, gslice's
# guaranteed processes also alone), FRONTIER_GSLICE_PROGPRIO (1: interleaved, the first level's guaranteed process
# also at the program's stream priorities, GSLICE_STREAM_PRIORITY=program), FRONTIER_GSLICE_BASE (DIR: interleaved,
# the first level's gslice pair again from the build in DIR), FRONTIER_HOST_SPIN (N: interleaved, the
# guaranteed job beside N busy host threads and no GPU work), FRONTIER_TWIN (1: interleaved, a second
# plain guaranteed process alone), FRONTIER_PIN (N: each process on N host cores of its own),
# FRONTIER_FIRST_ROUND (K: interleaved, the
# rotation's rounds from K on: a run over several calls), FRONTIER_WINDOW_S (15), FRONTIER_SETTLE_S (1),
# FRONTIER_LEAD_S (10), FRONTIER_BUDGET_S (560), FRONTIER_INTERLEAVE (0; R: every configuration
# of a pair in one run on MPS, R rounds; FRONTIER_SPLIT=S: a pair's configurations over S runs,
# a GPU each; FRONTIER_TIMESLICE=0: no time-slicing), FRONTIER_GPUS, FRONTIER_LANES, FRONTIER_LANE,
# FRONTIER_DRY_RUN, GSLICE_BUILD.
# Owns an MPS control daemon with private pipe and log folders (bench/gpu/compute/mps.sh),
# stopped on exit; never changes compute mode, clocks or power.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
OUT="${OUT:-$PWD/gpu-out}"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY  # native runs stay off any MPS daemon
py=python3
dir=bench/gpu/compute

gpus=()
[ -n "${FRONTIER_GPUS:-}" ] && IFS=, read -ra gpus <<<"$FRONTIER_GPUS"
[ ${#gpus[@]} -gt 0 ] && export FRONTIER_LANES=${#gpus[@]}
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
FRONTIER_COMMAND="$(env | grep -E '^FRONTIER_(PAIRS|PROTECT|MPS_PCT|MPS_PCT_P0|MPS_PCT_P1|MPS_PRIO|GSLICE_MPS|GSLICE_PRIO|GSLICE_CAP|GSLICE_SMS|GSLICE_SOLO|GSLICE_PROGPRIO|GSLICE_BASE|WINDOW_S|SETTLE_S|LEAD_S|BUDGET_S|INTERLEAVE|SPLIT|TIMESLICE|GPUS|LANES|LANE)=' | sort | tr '\n' ' ')GSLICE_BUILD=$build bash bench/gpu/suites/frontier.sh"
export FRONTIER_COMMAND

# One lane (frontier.py's FRONTIER_LANES/FRONTIER_LANE; the whole plan when there is one) per
# GPU of FRONTIER_GPUS, at once, each with an MPS control daemon of its own for its GPU; without
# FRONTIER_GPUS one lane (FRONTIER_LANE, default 0) on the GPUs the call sees.
mps_dirs=()
stop_mps() {
  for d in "${mps_dirs[@]}"; do
    [ -d "$d" ] || continue
    bash "$dir/mps.sh" stop "$d" >>"$OUT/frontier/mps.log" 2>&1
    cp -r "$d/log" "$OUT/frontier/mps-log-$(basename "$d")" 2>/dev/null
    rm -rf "$d"
  done
  mps_dirs=()
}
trap stop_mps EXIT INT TERM

# frontier.py skips what would end past FRONTIER_DEADLINE; the timeout stops a run that
# overstays (SIGTERM: its processes are ended and the JSON keeps what was measured).
# run_lane LANE GPU JSON LOGS: GPU empty for the GPUs the call sees.
run_lane() {
  local lane=$1 gpu=$2 json=$3 logs=$4 d
  d=$(mktemp -d /tmp/gslice-mps-XXXXXX)
  mps_dirs+=("$d")
  local left=$((FRONTIER_DEADLINE - $(date +%s) + 5))
  ( [ -n "$gpu" ] && export CUDA_VISIBLE_DEVICES=$gpu
    [ ${#gpus[@]} -gt 0 ] && export FRONTIER_LANE=$lane
    exec timeout --signal=TERM --kill-after=20 "$left" $py "$dir/frontier.py" run --json "$json" --logs "$logs" \
      --mps-dir "$d" ) &
}
jsons=()
runners=()
if [ ${#gpus[@]} -gt 0 ]; then
  # Each lane's GPU by UUID: an MPS control daemon started on one GPU numbers it 0 for its
  # clients, so an index other than 0 would name no GPU there; a UUID names the same GPU with
  # MPS and without.
  uuids=()
  for g in "${gpus[@]}"; do
    u=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i "$g" 2>/dev/null | tr -d ' ')
    if [[ "$u" != GPU-* ]]; then
      echo "frontier: FRONTIER_GPUS=$FRONTIER_GPUS: no GPU $g here (nvidia-smi -i $g gave no UUID)" >&2
      exit 2
    fi
    uuids+=("$u")
  done
  # The lanes' shared folder (frontier.py's FRONTIER_SHARED: one service time for the server).
  FRONTIER_SHARED=$(mktemp -d /tmp/gslice-frontier-XXXXXX)
  export FRONTIER_SHARED
  for i in "${!gpus[@]}"; do
    mkdir -p "$OUT/frontier/lane$i"
    rm -f "$OUT/frontier-lane$i.json"
    run_lane "$i" "${uuids[$i]}" "$OUT/frontier-lane$i.json" "$OUT/frontier/lane$i/logs" >"$OUT/frontier/lane$i/run.log" 2>&1
    runners+=($!)
    jsons+=("$OUT/frontier-lane$i.json")
  done
  echo "frontier: ${#gpus[@]} lanes on GPUs ${FRONTIER_GPUS} (logs: frontier/lane*/run.log)"
  rc=0
  for pid in "${runners[@]}"; do wait "$pid" || rc=$?; done
  rm -rf "$FRONTIER_SHARED"
  for i in "${!gpus[@]}"; do grep -E '^(run |MPS |frontier)' "$OUT/frontier/lane$i/run.log" | sed "s/^/lane $i: /"; done
else
  : >"$OUT/frontier/run.log"
  run_lane "${FRONTIER_LANE:-0}" "" "$OUT/frontier.json" "$OUT/frontier/logs" >"$OUT/frontier/run.log" 2>&1
  runner=$!
  tail -n +1 -f "$OUT/frontier/run.log" --pid=$runner | grep --line-buffered -E '^(run |MPS |frontier)'
  wait $runner
  rc=$?
  jsons=("$OUT/frontier.json")
fi
stop_mps
echo "frontier: $(( $(date +%s) - start )) s"
for j in "${jsons[@]}"; do
  if [ ! -s "$j" ]; then
    echo "RESULT frontier.suite FAIL frontier.py wrote no $(basename "$j") (exit $rc; frontier/run.log)"
    exit 1
  fi
done
[ $rc -eq 0 ] || echo "RESULT frontier.budget INFO frontier.py stopped before its plan's end (exit $rc): the budget ran out; what it measured is reported"
$py "$dir/frontier_report.py" "${jsons[@]}" >"$OUT/compute-frontier.md" ||
  echo "RESULT frontier.report FAIL frontier_report.py failed"
# What each gslice guaranteed process read, period by period (its log's trace: GSLICE_LOG=debug).
for log in "$OUT"/frontier/logs/*_G*.log "$OUT"/frontier/lane*/logs/*_G*.log; do
  [ -f "$log" ] || continue
  $py "$dir/readings_report.py" "$log"
done >"$OUT/frontier-readings.txt" 2>&1
# What each gslice opportunistic process's looks read (mps_controller.h), from its log.
for log in "$OUT"/frontier/logs/*_O*.log "$OUT"/frontier/lane*/logs/*_O*.log; do
  [ -f "$log" ] || continue
  $py "$dir/looks_report.py" "$log"
done >>"$OUT/frontier-readings.txt" 2>&1
tar -czf "$OUT/frontier.tar.gz" -C "$OUT" frontier
$py "$dir/frontier_report.py" --table "${jsons[@]}"
