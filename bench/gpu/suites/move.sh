#!/usr/bin/env bash
# Move (issue 6) on a machine with two GPUs of one type: a driver-API program in a one-GPU slice
# holds device memory with a known pattern; the suspend service (gslice-suspend-agent)
# moves it to the other GPU with `gslice move`; NVML must then show the process on the
# target GPU, the data must read back intact and the program must keep working.
# Prints RESULT lines for bench/gpu/run's table.
set -uo pipefail
build="${GSLICE_BUILD:-build}"
out="${OUT:-/tmp}"
result() { echo "RESULT $1 $2 $3"; }
count=$(nvidia-smi -L | grep -c '^GPU ')
if [ "$count" -lt 2 ]; then
  result move INFO "needs two GPUs; this machine has $count"
  exit 0
fi
mapfile -t uuids < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)
tmp=$(mktemp -d /tmp/gslice-move.XXXXXX)
export GSLICE_LEDGER="$tmp/ledger" GSLICE_SUSPEND_BOARD="/dev/shm/gslice-move-board-$$"
agent_pid="" client_pid=""
cleanup() {
  [ -n "$client_pid" ] && kill "$client_pid" 2>/dev/null
  [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null
  exec 3>&- 2>/dev/null
  rm -rf "$tmp" "$GSLICE_SUSPEND_BOARD"
}
trap cleanup EXIT

"$build/bin/gslice-suspend-agent" --ledger "$GSLICE_LEDGER" --board "$GSLICE_SUSPEND_BOARD" \
  >"$out/move-agent.log" 2>&1 &
agent_pid=$!

mkfifo "$tmp/in"
"$build/bin/gslice" run --gpus 0 --memory 8GiB --name move-job -- \
  "$build/bin/suspend_client" $((2 << 30)) 0x5a5a <"$tmp/in" >"$tmp/client.out" 2>"$out/move-client.err" &
client_pid=$!
exec 3>"$tmp/in"
for _ in $(seq 300); do grep -q '^ready' "$tmp/client.out" 2>/dev/null && break; sleep 0.1; done
pid=$(awk '/^ready/ {print $2; exit}' "$tmp/client.out")
if [ -z "$pid" ]; then
  result move.start FAIL "client never became ready: $(tail -2 "$out/move-client.err" | tr '\n' ' ')"
  exit 1
fi
where() { nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader | awk -F', ' -v p="$1" '$1 == p {print $2, $3}'; }
before=$(where "$pid")
start=$(date +%s%N)
"$build/bin/gslice" move "$pid" --to "${uuids[1]}" --timeout 300 >"$out/move.txt" 2>&1
rc=$?
took_ms=$(( ($(date +%s%N) - start) / 1000000 ))
after=$(where "$pid")
result move.command "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "gslice move $pid --to GPU 1: exit $rc in ${took_ms} ms: $(head -1 "$out/move.txt" | cut -c1-90)"
case "$after" in
  "${uuids[1]}"*) result move.on_target PASS "NVML before: ${before:-none}; after: $after" ;;
  *) result move.on_target FAIL "NVML before: ${before:-none}; after: ${after:-none}" ;;
esac
echo verify >&3
for _ in $(seq 300); do grep -q '^verified' "$tmp/client.out" && break; sleep 0.1; done
v=$(grep '^verified' "$tmp/client.out" | tail -1)
result move.data_intact "$([ "$v" = "verified ok" ] && echo PASS || echo FAIL)" "${v:-no answer}"
echo call >&3
for _ in $(seq 300); do grep -q '^called' "$tmp/client.out" && break; sleep 0.1; done
c=$(grep '^called' "$tmp/client.out" | tail -1)
result move.keeps_working "$([[ "$c" == *" CUDA_SUCCESS" ]] && echo PASS || echo FAIL)" "after the move: ${c:-no answer}"
echo exit >&3
wait "$client_pid"; client_pid=""
