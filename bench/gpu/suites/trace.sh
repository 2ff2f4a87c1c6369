#!/usr/bin/env bash
# Timelines on a real GPU (docs/trace.md): a PyTorch ResNet-50 training run traced with
# torch.cuda.nvtx ranges (gslice run --trace), checked for CUPTI kernels within its NVTX step
# ranges and launches within forward/backward/optimizer; a script whose ranges open before
# torch initialises CUDA, checked for those ranges at their true start; and what tracing costs ResNet-50
# training: no shim vs the shim with tracing off vs tracing on, interleaved in one run
# (TRACE_ROUNDS rounds, default 3; TRACE_MODES="noshim off on host" adds tracing without CUPTI,
# host events only), the medians' ratios printed in a short table last.
# Prints RESULT lines for bench/gpu/run.
# Safety: plain device allocations in a 24 GiB slice; no managed memory.
set -uo pipefail
cd "$(dirname "$0")/../../.."
build="${GSLICE_BUILD:-build}"
out="${OUT:-/tmp}/trace"
mkdir -p "$out"
here="$PWD/bench/gpu/trace"
rounds="${TRACE_ROUNDS:-3}"
steps="${TRACE_STEPS:-60}"
export PYTHONUNBUFFERED=1
unset GSLICE_SOCKET GSLICE_DAEMON
result() { echo "RESULT $1 $2 $3"; }
gslice() { "$build/bin/gslice" "$@"; }

# CUPTI: the one PyTorch's wheels bring, else the toolkit's (the shim also looks itself).
if [ -z "${GSLICE_CUPTI:-}" ]; then
  cupti=$(python3 - <<'PY' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
c = []
for r in roots:
    c += sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib", "libcupti.so*")))
c += sorted(glob.glob("/usr/local/cuda*/lib64/libcupti.so*")) + sorted(glob.glob("/usr/local/cuda*/extras/CUPTI/lib64/libcupti.so*"))
print(c[0] if c else "")
PY
)
  [ -n "$cupti" ] && export GSLICE_CUPTI="$cupti"
fi
echo "CUPTI: ${GSLICE_CUPTI:-(the shim searches)}"
python3 -c "import torch, torchvision; print('torch', torch.__version__, 'cuda', torch.version.cuda)" || {
  result trace.torch FAIL "no PyTorch with torchvision here"; exit 1; }

# 1. A traced training run with NVTX ranges: kernels within the ranges.
gslice run --no-daemon --memory 24GiB --trace "$out/resnet50.json" -- \
  python3 "$here/resnet_train.py" --steps 20 --warmup 3 --nvtx >"$out/traced.log" 2>&1
rc=$?
if [ $rc -ne 0 ] || [ ! -s "$out/resnet50.json" ]; then
  result trace.resnet50_nvtx FAIL "gslice run --trace exit $rc: $(tail -2 "$out/traced.log" | tr '\n' ' ')"
else
  check=$(python3 "$here/check_trace.py" "$out/resnet50.json" 2>&1 | tail -1)
  result trace.resnet50_nvtx "${check%% *}" "${check#* } ($(du -h "$out/resnet50.json" | cut -f1))"
fi

# 2. Ranges opened before torch initialises CUDA keep their true start (early_nvtx.py).
gslice run --no-daemon --memory 4GiB --trace "$out/early.json" -- \
  python3 "$here/early_nvtx.py" run >"$out/early.log" 2>&1
rc=$?
if [ $rc -ne 0 ] || [ ! -s "$out/early.json" ]; then
  result trace.early_nvtx FAIL "gslice run --trace exit $rc: $(tail -2 "$out/early.log" | tr '\n' ' ')"
else
  check=$(python3 "$here/early_nvtx.py" check "$out/early.json" 2>&1 | tail -1)
  result trace.early_nvtx "${check%% *}" "${check#* }"
fi

# 3. Overhead, interleaved: no shim, shim with tracing off, shim with tracing on.
run_mode() {  # mode round -> prints imgs/s or nothing
  local mode=$1 r=$2 log="$out/overhead-$1-$2.log"
  local train=(python3 "$here/resnet_train.py" --steps "$steps" --warmup 10 --nvtx)
  case $mode in
    noshim) "${train[@]}" >"$log" 2>&1 ;;
    off) gslice run --no-daemon --memory 24GiB -- "${train[@]}" >"$log" 2>&1 ;;
    on) gslice run --no-daemon --memory 24GiB --trace "$out/overhead-$r.json" -- "${train[@]}" >"$log" 2>&1 ;;
    # Tracing on without GPU activity (no CUPTI: host events only), to tell CUPTI's share.
    host) GSLICE_CUPTI=off gslice run --no-daemon --memory 24GiB --trace "$out/overhead-$r.json" \
            -- "${train[@]}" >"$log" 2>&1 ;;
  esac
  sed -n 's/^imgs_per_s //p' "$log" | tail -1
}
modes="${TRACE_MODES:-noshim off on}"
declare -A runs=([noshim]="" [off]="" [on]="" [host]="")
for r in $(seq "$rounds"); do
  for mode in $modes; do
    v=$(run_mode "$mode" "$r")
    echo "round $r $mode: ${v:-failed}"
    [ -n "$v" ] && runs[$mode]+="$v "
  done
done
rm -f "$out"/overhead-*.json
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {if (NR) print (NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
noshim=$(median <<<"${runs[noshim]}"); off=$(median <<<"${runs[off]}"); on=$(median <<<"${runs[on]}")
if [ -z "$noshim" ] || [ -z "$off" ] || [ -z "$on" ]; then
  result trace.overhead FAIL "a mode failed: noshim '${runs[noshim]}' off '${runs[off]}' on '${runs[on]}' (see trace/overhead-*.log)"
  exit 1
fi
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.4f", a / b}'; }
off_ratio=$(ratio "$off" "$noshim"); on_ratio=$(ratio "$on" "$noshim"); on_off=$(ratio "$on" "$off")
verdict() { awk -v r="$1" -v limit="$2" 'BEGIN {print (1 - r <= limit ? "PASS" : "FAIL")}'; }
result trace.overhead_off "$(verdict "$off_ratio" 0.005)" \
  "tracing off / no shim = $off_ratio (medians $off / $noshim imgs/s over $rounds rounds; goal >= 0.995)"
result trace.overhead_on "$(verdict "$on_ratio" 0.05)" \
  "tracing on / no shim = $on_ratio, on / off = $on_off (median $on imgs/s; goal >= 0.95)"

echo
echo "ResNet-50 training, bf16 autocast, batch 64, $steps steps after 10, $rounds interleaved rounds (imgs/s):"
printf '%-22s %-34s %-10s %s\n' "mode" "runs" "median" "vs no shim"
printf '%-22s %-34s %-10s %s\n' "no shim" "${runs[noshim]}" "$noshim" "1.0000"
printf '%-22s %-34s %-10s %s\n' "shim, tracing off" "${runs[off]}" "$off" "$off_ratio"
printf '%-22s %-34s %-10s %s\n' "shim, tracing on" "${runs[on]}" "$on" "$on_ratio"
if [ -n "${runs[host]}" ]; then
  host=$(median <<<"${runs[host]}")
  printf '%-22s %-34s %-10s %s\n' "tracing on, no CUPTI" "${runs[host]}" "$host" "$(ratio "$host" "$noshim")"
fi
