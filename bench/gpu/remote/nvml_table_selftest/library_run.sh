#!/usr/bin/env bash
# Self-test of library_tables.sh without a GPU: the fake libcuda.so.1 and fake nvidia-smi of
# run.sh stand in for the driver and for a library check; the summary must show the table
# fetched (and by whom) and its slots' calls per calling object, the log their arguments.
#   bench/gpu/remote/nvml_table_selftest/library_run.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/library_tables_selftest.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/real" "$tmp/out"
gcc -O2 -fPIC -shared -Wl,-soname,libnvidia-ml.so.1 -o "$tmp/real/libnvidia-ml.so.1" "$here/fake_nvml.c" || exit 1
gcc -O2 -fPIC -shared -DFAKE_CUDA -Wl,-soname,libcuda.so.1 -o "$tmp/real/libcuda.so.1" "$here/fake_nvml.c" || exit 1
gcc -O2 -o "$tmp/fake-smi" "$here/fake_smi.c" -ldl || exit 1
OUT=$tmp/out CUDA_REAL=$tmp/real/libcuda.so.1 NVML_REAL=$tmp/real/libnvidia-ml.so.1 \
  LIBTABLES_COMMAND=$tmp/fake-smi NVL_SLOT_LOG_FIRST=1 \
  "$here/../library_tables.sh" one two >"$tmp/summary" 2>"$tmp/stderr"
rc=$?
cat "$tmp/summary"
fail=0
expect() {
  if ! grep -qE "$1" "$2"; then echo "selftest: missing /$1/ in $(basename "$2")"; fail=1; fi
}
[ "$rc" -eq 0 ] || { echo "selftest: script exited $rc"; cat "$tmp/stderr"; fail=1; }
for c in one two; do
  expect 'all checks passed' "$tmp/out/$c.out"
  expect '^S 69a28e9f-[^ ]* slot=1 caller=fake-smi calls=2 logged=1$' "$tmp/out/$c.log"
  expect '^G cuda 69a28e9f-.* rc=0 .* caller=fake-smi$' "$tmp/out/$c.log"
done
expect '^--- one: rc=0 through the logger' "$tmp/summary"
expect '^  G 69a28e9f-0102-0304-0506-0708090a0b0c rc=0 40 x2 by fake-smi$' "$tmp/summary"
expect '^  S 69a28e9f +1 fake-smi +2$' "$tmp/summary"
expect '^  69a28e9f 1: one two$' "$tmp/summary"
expect '^T [0-9.c]+ 69a28e9f-[^ ]* slot=1 .* a0=0x1 a1=0x2 ' "$tmp/summary"
# NVL_SLOT_LOG_FIRST=1: slot 1's second call is counted, not logged.
n=$(grep -c '^T [0-9.c]* 69a28e9f-[^ ]* slot=1 ' "$tmp/out/one.log")
[ "$n" -eq 1 ] || { echo "selftest: $n slot 1 calls logged in full, want 1"; fail=1; }
[ "$fail" -eq 0 ] && echo "selftest: PASS" || echo "selftest: FAIL"
exit "$fail"
