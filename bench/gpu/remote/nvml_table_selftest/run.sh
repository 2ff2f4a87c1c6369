#!/usr/bin/env bash
# Self-test of nvml_table_log.sh without a GPU: builds a fake NVML and a fake nvidia-smi,
# runs the logging script on them and checks the log shows the table, its slots and the
# bytes behind pointer arguments.   bench/gpu/remote/nvml_table_selftest/run.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d /tmp/nvml_table_selftest.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/real" "$tmp/out"
gcc -O2 -fPIC -shared -Wl,-soname,libnvidia-ml.so.1 -o "$tmp/real/libnvidia-ml.so.1" "$here/fake_nvml.c" || exit 1
gcc -O2 -fPIC -shared -DFAKE_CUDA -Wl,-soname,libcuda.so.1 -o "$tmp/real/libcuda.so.1" "$here/fake_nvml.c" || exit 1
gcc -O2 -o "$tmp/fake-smi" "$here/fake_smi.c" -ldl || exit 1
OUT=$tmp/out NVML_REAL=$tmp/real/libnvidia-ml.so.1 CUDA_REAL=$tmp/real/libcuda.so.1 \
  NVIDIA_SMI=$tmp/fake-smi NVL_NO_TORCH=1 \
  "$here/../nvml_table_log.sh" >"$tmp/summary"
rc=$?
cat "$tmp/summary"
log=$tmp/out/nvml_table.log
fail=0
expect() {
  if ! grep -qE "$1" "$2"; then echo "selftest: missing /$1/ in $(basename "$2")"; fail=1; fi
}
[ "$rc" -eq 0 ] || { echo "selftest: script exited $rc"; fail=1; }
for i in 1 2 3; do expect 'all checks passed' "$tmp/out/view$i.out"; done
expect '^G nvml 6c3efec4-0102-0304-0506-0708090a0b0c rc=0 .* head=2800000000000000' "$log"
expect '^G nvml d4082055-.* rc=13' "$log"
expect '^W nvml 6c3efec4-.* words=5 sized=1 read=5 wrapped=3 code_slots=1,2,3,' "$log"
expect '^G cuda 69a28e9f-0102-0304-0506-0708090a0b0c rc=0 .* head=2800000000000000' "$log"
expect '^W cuda 69a28e9f-.* wrapped=3 code_slots=1,2,3,' "$log"
expect '^T [0-9.nc]+ 69a28e9f-[^ ]* slot=2 .* x0=0x4004000000000000 ' "$log"
expect '^C cuFake_FakeSum8$' "$log"
expect '^C cuGetProcAddress_v2 cuGetExportTable$' "$log"
expect '^T [0-9.nc]+ 6c3efec4-[^ ]* slot=1 .* a0=0x1 a1=0x2 a2=0x3 a3=0x4 a4=0x5 a5=0x6 s0=0x7 s1=0x8' "$log"
expect '^R [0-9.nc]+ 6c3efec4-[^ ]* slot=1 rax=0xcc ' "$log"
expect '^R [0-9.nc]+ 6c3efec4-[^ ]* slot=2 rax=0x7 ' "$log"
expect '^M [0-9.nc]+ a0 after 0x[0-9a-f]+ 0a000000' "$log"              # *out = 10
expect '^M [0-9.nc]+ a1 after 0x[0-9a-f]+ 66616b652d677075' "$log"      # "fake-gpu"
expect '^T [0-9.nc]+ 6c3efec4-[^ ]* slot=2 .* x0=0x4004000000000000 .*caller=fake-smi\+0x' "$log"   # 2.5
expect '^R [0-9.nc]+ 6c3efec4-[^ ]* slot=3 .* xmm0=0x4024400000000000' "$log"                     # 10.125
expect '^C nvmlFakeSum8$' "$log"
expect '^C nvmlDeviceGetCount_v2$' "$log"
expect 'nvmlFakeScale' "$tmp/out/forwarded.libnvidia-ml.so.1.txt"
expect 'cuFake_FakeScale' "$tmp/out/forwarded.libcuda.so.1.txt"
# The real library's call to its own export binds to itself: one nvmlInit_v2 per view.
n=$(grep -c '^C nvmlInit_v2$' "$log")
[ "$n" -eq 3 ] || { echo "selftest: $n nvmlInit_v2 calls logged, want 3 (one per view)"; fail=1; }
[ "$fail" -eq 0 ] && echo "selftest: PASS" || echo "selftest: FAIL (log: kept below)"
[ "$fail" -eq 0 ] || cat "$log"
exit "$fail"
