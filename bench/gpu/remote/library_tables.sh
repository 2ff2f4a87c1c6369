#!/usr/bin/env bash
# Logs what each CUDA library the frameworks load asks of the driver's private tables
# (cuGetExportTable), locally, on a machine with the real driver: builds nvml_table_logger.c
# as a libcuda.so.1 in front of the real one (nvml_table_log_lib.sh) and runs each check of
# libraries.py (cuFFT, cuSOLVER, cuSPARSE, cuRAND, NVRTC, nvJitLink, cuDNN, cuBLASLt, NCCL),
# each in a process of its own, through it. Every table is copied with its slots logged
# except the two whose addresses the integrity hash binds (6bd5fb6c, d4082055: logged when
# fetched, handed out as they are). Prints a summary (at most 300 lines): per check, the
# tables fetched (by whom, with what result) and every slot called (by which object, how
# often); then the first call of each slot outside the tables the runtime always uses, with
# its arguments, the bytes at pointer arguments before and after, and its result. Full logs,
# each check's output and the whole summary in $OUT.
#   bench/gpu/remote/library_tables.sh [CHECK...]     (default: every check of libraries.py)
# Environment: OUT (default a new /tmp folder), CUDA_REAL (default from `ldconfig -p`),
# LIBTABLES_PYTHON (default python3), LIBTABLES_TIMEOUT (seconds per check, default 150),
# LIBTABLES_DEADLINE (seconds for all checks, default 300: later ones are not run),
# LIBTABLES_JOBS (checks at once, default 3),
# NVL_SLOT_LOG_FIRST (calls of a slot per calling object logged in full, default 20),
# NVL_LOG_BYTES (bytes shown per pointer argument, default 64), LIBTABLES_COMMAND (what runs
# a check instead of `python3 libraries.py`: given "run CHECK OUT.npz"; the self-test's).
# Exit status: 0 when every check ran through the logger with the status it has without it
# (3 = its framework is missing); 1 otherwise; 2 when the logger cannot be built.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$(mktemp -d /tmp/library_tables.XXXXXX)}
mkdir -p "$out"
# shellcheck source-path=SCRIPTDIR source=nvml_table_log_lib.sh
. "$here/nvml_table_log_lib.sh"
cuda_real=${CUDA_REAL:-$(nvl_find_real libcuda.so.1)}
[ -n "$cuda_real" ] && cuda_real=$(readlink -f "$cuda_real")
if [ -z "$cuda_real" ] || [ ! -f "$cuda_real" ]; then
  echo "library_tables: no real libcuda.so.1 (set CUDA_REAL)" >&2
  exit 2
fi
work=$(mktemp -d /tmp/library_tables_build.XXXXXX)
trap 'rm -rf "$work"' EXIT
nvl_build_logger "$cuda_real" libcuda.so.1 "cuGetExportTable cuGetProcAddress cuGetProcAddress_v2" -DNVL_CUDA ||
  exit 2

py=${LIBTABLES_PYTHON:-python3}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} # NVLink multicast stays off (bench/gpu/run)
if [ -n "${LIBTABLES_COMMAND:-}" ]; then
  read -r -a runner <<<"$LIBTABLES_COMMAND"
else
  runner=("$py" "$here/libraries.py")
fi
if [ $# -gt 0 ]; then
  checks=("$@")
else
  mapfile -t checks < <("$py" "$here/libraries.py" list | cut -f1)
  [ ${#checks[@]} -gt 0 ] || { echo "library_tables: libraries.py list gave no checks" >&2; exit 2; }
fi
limit=${LIBTABLES_TIMEOUT:-150}
# shellcheck disable=SC2054 # the commas are in a value
logger_env=(LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" CUDA_REAL="$cuda_real"
            NVL_WRAP_ONLY= NVL_WRAP_EXCEPT=6bd5fb6c,d4082055 NVL_CALLS=once
            NVL_SLOT_LOG_FIRST="${NVL_SLOT_LOG_FIRST:-20}" NVML_LOG_BYTES="${NVL_LOG_BYTES:-64}")
status=0
summary=$out/summary.txt
: >"$summary"
declare -A verdict
deadline=$((SECONDS + ${LIBTABLES_DEADLINE:-300}))
# run_check CHECK: through the logger, its verdict into $out/CHECK.verdict; the last status
# (1 when the logger changed the check's result) into $out/CHECK.status.
run_check() {
  local c=$1 log=$out/$1.log rc rc_plain left line
  : >"$log"
  left=$((deadline - SECONDS))
  if [ "$left" -lt 10 ]; then
    echo "not run: the script's time (LIBTABLES_DEADLINE) was up" >"$out/$c.verdict"
    return
  fi
  [ "$left" -gt "$limit" ] && left=$limit
  env "${logger_env[@]}" NVML_TABLE_LOG="$log" timeout "$left" "${runner[@]}" run "$c" "$out/$c.npz" \
    >"$out/$c.out" 2>&1
  rc=$?
  line="rc=$rc through the logger"
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
    # Without the logger: whether the failure is the check's own or the logger's. When it is
    # the logger's, once more with the real tables handed out (the G lines still show).
    timeout "$left" "${runner[@]}" run "$c" >"$out/$c.plain.out" 2>&1
    rc_plain=$?
    line+=", rc=$rc_plain without it"
    if [ "$rc_plain" -ne "$rc" ]; then
      echo 1 >"$out/$c.status"
      env "${logger_env[@]}" NVML_TABLE_LOG="$out/$c.passthru.log" NVML_TABLE_PASSTHRU=1 timeout "$left" \
        "${runner[@]}" run "$c" >"$out/$c.passthru.out" 2>&1
      line+=", rc=$? with the real tables handed out ($c.passthru.*)"
    fi
  fi
  echo "$line" >"$out/$c.verdict"
  echo "ran $c: $line" >&2
}
# Checks run LIBTABLES_JOBS at a time (default 3), each a process of its own with its own log.
for c in "${checks[@]}"; do
  rm -f "$out/$c.status" "$out/$c.verdict" "$out/$c.passthru.log"
  while [ "$(jobs -rp | wc -l)" -ge "${LIBTABLES_JOBS:-3}" ]; do wait -n; done
  run_check "$c" &
done
wait
for c in "${checks[@]}"; do
  verdict[$c]=$(cat "$out/$c.verdict" 2>/dev/null || echo "no verdict")
  [ -s "$out/$c.status" ] && status=1
done

# The tables every cudart program uses from its start: known (docs/remote.md, "The driver's
# private tables"), so listed only in the slots over all checks, not per check.
known='^(6bd5fb6c|42d85a81|a094798c|c693336e|263e8860|d4082055)'
{
  echo "=== per check: tables fetched (G uuid rc size_word xcount by callers) and slots called"
  echo "    (S uuid8 slot caller calls, outside the start-up tables; calls past NVL_SLOT_LOG_FIRST"
  echo "    per caller are only counted; every slot with its callers: the S lines of CHECK.log)"
  for c in "${checks[@]}"; do
    log=$out/$c.log
    echo "--- $c: ${verdict[$c]}: $(grep -E '^(done|SKIP|note)' "$out/$c.out" | head -n 2 | tr '\n' ' ' | cut -c1-200)"
    [ "${verdict[$c]#rc=0}" = "${verdict[$c]}" ] && tail -n 3 "$out/$c.out" | cut -c1-200 | sed 's/^/    | /'
    src=$log
    [ -s "$out/$c.passthru.log" ] && src=$out/$c.passthru.log
    # One line per table: its result and size word, how often it was asked, and by whom.
    grep -E '^G cuda ' "$src" | awk '{ sub(/size_word=/, "", $7); sub(/caller=/, "", $8); k = $3 " " $4 " " $7
        n[k]++; if (!((k, $8) in seen)) { seen[k, $8] = 1; by[k] = by[k] (by[k] == "" ? "" : ",") $8 } }
        END { for (k in n) print "  G " k " x" n[k] " by " by[k] }' | sort | cut -c1-240 | head -n 16
    grep -E '^S ' "$log" | awk -v known="$known" 'substr($2, 1, 8) !~ known {
        sub(/slot=/, "", $3); sub(/calls=/, "", $5); sub(/caller=/, "", $4)
        printf "  S %s %3d %-28s %s\n", substr($2, 1, 8), $3, $4, $5 }' | sort -k2,2 -k3,3n | head -n 12
  done
  echo "=== slots over all checks (uuid8 slot: the checks that called it)"
  for c in "${checks[@]}"; do
    grep -E '^S ' "$out/$c.log" | awk -v c="$c" '{ sub(/slot=/, "", $3); print substr($2, 1, 8), $3, c }'
  done | sort -u | awk '{ k = $1 " " $2; if (!(k in seen)) { seen[k] = 1; order[++n] = k }
                          list[k] = list[k] " " $3 }
                        END { for (i = 1; i <= n; ++i) print "  " order[i] ":" list[order[i]] }' | sort -k1,1 -k2,2n
  echo "=== first call of each slot outside the start-up tables (T args; M bytes before/after; R result)"
  for c in "${checks[@]}"; do
    awk -v c="$c" -v known="$known" '
      /^T / { key = substr($3, 1, 8) " " $4; keep[$2] = 0
              if (substr($3, 1, 8) !~ known && !(key in seen)) { seen[key] = 1; keep[$2] = 1; print "[" c "]" } }
      /^[TMR] / && keep[$2] { print substr($0, 1, 260) }' "$out/$c.log"
  done | awk '/^\[/ { hdr = $0; next } { if (hdr != last) { print hdr; last = hdr } print }'
} >"$summary"
head -n 280 "$summary"  # with the build line and the "ran" lines, at most 300
echo "=== whole summary: $summary ($(wc -l <"$summary") lines); logs: $out/CHECK.log, outputs: $out/CHECK.out"
exit $status
