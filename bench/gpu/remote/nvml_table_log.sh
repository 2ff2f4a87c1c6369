#!/usr/bin/env bash
# Logs what nvidia-smi asks of NVML's private tables (nvmlInternalGetExportTable) on a
# machine with the real driver: builds nvml_table_logger.c into a libnvidia-ml.so.1 that
# forwards every export of the real library (the forwarders are generated here from
# `nm -D --defined-only` of it), and the same in front of libcuda.so.1 (where NVML asks
# the driver's table 69a28e9f), runs nvidia-smi, nvidia-smi --query-gpu=... and
# nvidia-smi -q (and a short PyTorch NVML/memory query when torch imports) through them,
# prints a summary (at most 400 lines) and leaves the full log and each view's output in
# $OUT.
#   bench/gpu/remote/nvml_table_log.sh
# Environment: OUT (output folder; default a new /tmp folder), NVML_REAL / CUDA_REAL (the
# real libraries; default: from `ldconfig -p`), NVIDIA_SMI (default nvidia-smi),
# NVML_LOG_BYTES (bytes shown per pointer argument, default 64), NVL_NO_CUDA=1 (no libcuda
# logger), NVL_NO_TORCH=1 (no PyTorch view), NVL_PYTHON (default python3). Needs gcc, nm,
# x86-64.
# Exit status: 0 when every view ran through the logger with the status it has without
# it; 1 otherwise; 2 when the logger cannot be built.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$(mktemp -d /tmp/nvml_table_log.XXXXXX)}
mkdir -p "$out"
smi=${NVIDIA_SMI:-nvidia-smi}
# shellcheck source-path=SCRIPTDIR source=nvml_table_log_lib.sh
. "$here/nvml_table_log_lib.sh"
real=${NVML_REAL:-$(nvl_find_real libnvidia-ml.so.1)}
[ -n "$real" ] && real=$(readlink -f "$real")
if [ -z "$real" ] || [ ! -f "$real" ]; then
  echo "nvml_table_log: no real libnvidia-ml.so.1 (set NVML_REAL)" >&2
  exit 2
fi
command -v "$smi" >/dev/null || { echo "nvml_table_log: $smi not found (set NVIDIA_SMI)" >&2; exit 2; }

work=$(mktemp -d /tmp/nvml_table_build.XXXXXX)
trap 'rm -rf "$work"' EXIT
nvl_build_logger "$real" libnvidia-ml.so.1 nvmlInternalGetExportTable || exit 2
# NVML's own requests to the driver's private tables (69a28e9f) show when NVML loads
# libcuda.so.1: a second logger in front of it, copying only $NVL_WRAP_ONLY's tables.
cuda_real=${CUDA_REAL:-$(nvl_find_real libcuda.so.1)}
[ -n "$cuda_real" ] && cuda_real=$(readlink -f "$cuda_real")
if [ -n "$cuda_real" ] && [ -f "$cuda_real" ] && [ "${NVL_NO_CUDA:-0}" != 1 ]; then
  nvl_build_logger "$cuda_real" libcuda.so.1 "cuGetExportTable cuGetProcAddress cuGetProcAddress_v2" \
    -DNVL_CUDA || exit 2
else
  echo "no libcuda.so.1 logger (CUDA_REAL unset and none in ldconfig -p, or NVL_NO_CUDA=1)"
fi

log=$out/nvml_table.log
: >"$log"
status=0
lib_env=(LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NVML_REAL="$real"
         CUDA_REAL="${cuda_real:-}" NVML_TABLE_LOG="$log")
# run_view N CMD...: CMD without and then through the loggers; when the two exit statuses
# differ, once more with the real tables handed out, to tell a copy's fault from a slot's.
run_view() {
  local i=$1 rc rc_plain
  shift
  timeout 120 "$@" >"$out/view$i.plain.out" 2>&1
  rc_plain=$?
  echo "V $i $*" >>"$log"
  env "${lib_env[@]}" timeout 120 "$@" >"$out/view$i.out" 2>&1
  rc=$?
  echo "=== view $i: $*: rc=$rc through the loggers, rc=$rc_plain without them"
  head -n 6 "$out/view$i.out" | cut -c1-160
  if [ "$rc" -ne "$rc_plain" ]; then
    status=1
    echo "V $i-passthru $*" >>"$log"
    env "${lib_env[@]}" NVML_TABLE_PASSTHRU=1 timeout 120 "$@" >"$out/view$i.passthru.out" 2>&1
    echo "    with the real tables handed out (NVML_TABLE_PASSTHRU=1): rc=$?"
    head -n 4 "$out/view$i.passthru.out" | cut -c1-160
  fi
}
echo "nvidia-smi: $(command -v "$smi"); log: $log"
run_view 1 "$smi"
run_view 2 "$smi" --query-gpu=name,memory.total,memory.used --format=csv
run_view 3 "$smi" -q
# PyTorch, where NVML was seen asking the driver's table 69a28e9f: NVML's device count,
# then the CUDA runtime's memory query. Skipped when torch is not importable.
py=${NVL_PYTHON:-python3}
if [ "${NVL_NO_TORCH:-0}" != 1 ] && timeout 60 "$py" -c 'import torch' >/dev/null 2>&1; then
  run_view 4 env PYTORCH_NVML_BASED_CUDA_CHECK=1 "$py" -c \
    'import torch; print(torch.cuda.device_count(), torch.cuda.is_available()); print(torch.cuda.mem_get_info())'
fi

{
  echo "=== tables asked (G nvml: nvmlInternalGetExportTable, G cuda: cuGetExportTable; W: the copy handed out)"
  grep -E '^(G|W|E) ' "$log" | sed 's/ table=0x[0-9a-f]* / /' | sort | uniq -c | cut -c1-400
  echo "=== slot calls per view (count, table, slot, the NVML call just before, rc of the first)"
  awk '
    /^V / { view = $2 }
    /^C / { last = $2 }
    /^T / { key = view " " substr($3, 1, 8) " " $4; n[key]++; if (!(key in prev)) { prev[key] = last; order[++k] = key } seqkey[$2] = key }
    /^R / { if (!($2 in seen_r)) { seen_r[$2] = 1; key = seqkey[$2]; if (!(key in rc)) rc[key] = $5 " " $6 } }
    END { for (j = 1; j <= k; j++) { key = order[j]; printf "%5d  view %s  after %s  first %s\n", n[key], key, prev[key], rc[key] } }' "$log"
  echo "=== NVML calls of view 1, in order (repeats folded; T = a slot call; first 90)"
  awk '/^V / { view = $2 } view == "1" && /^[CT] / { x = ($1 == "T") ? "T " substr($3, 1, 8) " " $4 : $2
         if (x == p) r++; else { if (p != "") print (r > 1 ? p " x" r : p); p = x; r = 1 } }
       END { if (p != "") print (r > 1 ? p " x" r : p) }' "$log" | head -n 90
  echo "=== first call of each slot (T: args; M: bytes at pointer args before/after; R: result)"
  awk '
    /^T / { key = substr($3, 1, 8) " " $4; c[key]++; keep[$2] = (c[key] <= 1) }
    /^[TMR] / && keep[$2] { print substr($0, 1, 300) }' "$log"
} | head -n 300
echo "=== full log: $log ($(wc -l <"$log") lines); outputs: $out/view*.out"
exit $status
