#!/usr/bin/env bash
# Logs what nvidia-smi asks of NVML's private tables (nvmlInternalGetExportTable) on a
# machine with the real driver: builds nvml_table_logger.c into a libnvidia-ml.so.1 that
# forwards every export of the real library (the forwarders are generated here from
# `nm -D --defined-only` of it), runs three nvidia-smi views through it, prints a summary
# (at most 400 lines) and leaves the full log and each view's output in $OUT.
#   bench/gpu/remote/nvml_table_log.sh
# Environment: OUT (output folder; default a new /tmp folder), NVML_REAL (the real
# libnvidia-ml.so.1; default: from `ldconfig -p`), NVIDIA_SMI (default nvidia-smi),
# NVML_LOG_BYTES (bytes shown per pointer argument, default 64). Needs gcc, nm, x86-64.
# Exit status: 0 when every view ran through the logger with the status it has without
# it; 1 otherwise; 2 when the logger cannot be built.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$(mktemp -d /tmp/nvml_table_log.XXXXXX)}
mkdir -p "$out"
smi=${NVIDIA_SMI:-nvidia-smi}
real=${NVML_REAL:-}
if [ -z "$real" ]; then
  real=$(ldconfig -p 2>/dev/null | awk '$1 == "libnvidia-ml.so.1" && /x86-64/ { print $NF; exit }')
fi
if [ -z "$real" ]; then
  for c in /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 /usr/lib64/libnvidia-ml.so.1 /usr/lib/libnvidia-ml.so.1; do
    [ -e "$c" ] && { real=$c; break; }
  done
fi
[ -n "$real" ] && real=$(readlink -f "$real")
if [ -z "$real" ] || [ ! -f "$real" ]; then
  echo "nvml_table_log: no real libnvidia-ml.so.1 (set NVML_REAL)" >&2
  exit 2
fi
command -v "$smi" >/dev/null || { echo "nvml_table_log: $smi not found (set NVIDIA_SMI)" >&2; exit 2; }

work=$(mktemp -d /tmp/nvml_table_build.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lib"

# Every defined function export of the real library, but the one written by hand.
nm -D --defined-only "$real" | awk '$2 ~ /^[TWi]$/ { sub(/@.*/, "", $3); print $3 }' |
  grep -v -x -e nvmlInternalGetExportTable -e _init -e _fini | sort -u >"$work/names"
n=$(wc -l <"$work/names")
if [ "$n" -eq 0 ] || [ "$n" -gt 8192 ]; then
  echo "nvml_table_log: $n exports read from $real" >&2
  exit 2
fi
awk 'BEGIN { print ".text" }
     { printf ".globl %s\n.type %s,@function\n%s:\n  movl $%d, %%r11d\n  jmp nvl_fwd_common\n.size %s, .-%s\n",
              $1, $1, $1, NR - 1, $1, $1 }
     END { print ".section .note.GNU-stack,\"\",@progbits" }' "$work/names" >"$work/fwd.S"
awk 'BEGIN { print "const char *const nvl_fwd_names[] = {" }
     { printf "  \"%s\",\n", $1 }
     END { printf "};\nconst unsigned nvl_fwd_count = %d;\n", NR }' "$work/names" >"$work/names.c"
if ! gcc -O2 -fPIC -shared -Wl,-soname,libnvidia-ml.so.1 -o "$work/lib/libnvidia-ml.so.1" \
    "$here/nvml_table_logger.c" "$work/fwd.S" "$work/names.c" -ldl -lpthread 2>"$out/build.err"; then
  echo "nvml_table_log: build failed:" >&2
  cat "$out/build.err" >&2
  exit 2
fi
cp "$work/names" "$out/forwarded_names.txt"

log=$out/nvml_table.log
: >"$log"
status=0
views=("" "--query-gpu=name,memory.total,memory.used --format=csv" "-q")
i=0
echo "real NVML: $real ($n exports forwarded); nvidia-smi: $(command -v "$smi"); log: $log"
for v in "${views[@]}"; do
  i=$((i + 1))
  # shellcheck disable=SC2086 # the view's words are separate arguments
  timeout 120 "$smi" $v >"$out/view$i.plain.out" 2>&1
  rc_plain=$?
  echo "V $i nvidia-smi $v" >>"$log"
  # shellcheck disable=SC2086
  LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NVML_REAL="$real" \
    NVML_TABLE_LOG="$log" timeout 120 "$smi" $v >"$out/view$i.out" 2>&1
  rc=$?
  echo "=== view $i: nvidia-smi $v: rc=$rc through the logger, rc=$rc_plain without it"
  head -n 12 "$out/view$i.out" | cut -c1-160
  if [ "$rc" -ne "$rc_plain" ]; then
    status=1
    # Tell a table-copy failure from a slot's: hand out the real table once.
    echo "V $i-passthru nvidia-smi $v" >>"$log"
    # shellcheck disable=SC2086
    LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NVML_REAL="$real" \
      NVML_TABLE_LOG="$log" NVML_TABLE_PASSTHRU=1 timeout 120 "$smi" $v >"$out/view$i.passthru.out" 2>&1
    echo "    with the real table handed out (NVML_TABLE_PASSTHRU=1): rc=$?"
    head -n 4 "$out/view$i.passthru.out" | cut -c1-160
  fi
done

{
  echo "=== tables asked (G: nvmlInternalGetExportTable; W: the copy handed out)"
  grep -E '^(G|W|E) ' "$log" | sort | uniq -c | cut -c1-400
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
} | head -n 375
echo "=== full log: $log ($(wc -l <"$log") lines); outputs: $out/view*.out"
exit $status
