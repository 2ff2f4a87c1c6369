#!/usr/bin/env bash
# gsliced running MPS on a real GPU (docs/compute.md, "The substrate"), in one call:
#  - gsliced with mps=on starts GPU 0's control daemon, with folders of its own (root's,
#    0711/0700) and its socket closed to everyone but root;
#  - user A's guaranteed and opportunistic `gslice run`s get the MPS environment (priority 0
#    and 1, the cap as a thread percentage) and the daemon lists a server of A's uid;
#  - user B's slice on the same GPU, while A's program runs, is time-sliced and reaches
#    cuInit within a bounded wait, and so does a program of B's pointed at A's daemon by hand;
#  - what A's and B's `nvidia-cuda-mps-control` commands do there;
#  - the daemon killed: gsliced starts it again (what A's running program saw is recorded);
#  - gsliced stopped: the daemon and its servers are gone.
# RESULT lines as it goes, logs and JSON under $OUT (mps_control-*), a short table last.
#
#   sudo bash bench/gpu/suites/mps_control.sh      # root: gsliced gives GPUs to other uids
# Environment: MPS_USER_A, MPS_USER_B (uids, default 1000 and 1001), MPS_WAIT_S (how long a
# program may take to reach cuInit's end before it counts as blocked, default 30).
# Safety: never changes compute mode, clocks or power; every daemon it caused is asked to
# quit (`echo quit | nvidia-cuda-mps-control`) and the processes it started are ended by id.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
build="${GSLICE_BUILD:-$PWD/build}"
deps="${GSLICE_DEPS:-}"
A="${MPS_USER_A:-1000}" B="${MPS_USER_B:-1001}" WAIT_S="${MPS_WAIT_S:-30}"
log="$OUT/mps_control-gsliced.log" results="$OUT/mps_control-results.txt"
: >"$results"

result() {  # NAME PASS|FAIL|INFO DETAIL
  echo "RESULT mps_control.$1 $2 $3"
  printf '%-28s %-5s %s\n' "$1" "$2" "${3:0:110}" >>"$results"
}
table() {
  echo
  printf '%-28s %-5s %s\n' "check" "" "detail"
  cat "$results"
}

tmp=$(mktemp -d /tmp/gslice-mps-control.XXXXXX)
chmod 0755 "$tmp"
mps_dir="$tmp/mps"
export GSLICE_SOCKET="$tmp/gsliced.sock" GSLICE_LEDGER="/dev/shm/gslice-mps-control-$$"
board="/dev/shm/gslice-mps-control-board-$$"
gsliced_pid="" programs=() daemon_pids=() server_pids=()

# The control program against GPU 0's daemon (as root unless a uid is given).
control() {  # COMMAND [UID]
  local as=()
  [ -n "${2:-}" ] && as=(setpriv --reuid="$2" --regid="$2" --clear-groups)
  echo "$1" | CUDA_MPS_PIPE_DIRECTORY="$pipe" CUDA_MPS_LOG_DIRECTORY="$logs" timeout 10 "${as[@]}" nvidia-cuda-mps-control 2>&1
}
alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }
daemon_pid() { cat "$pipe/nvidia-cuda-mps-control.pid" 2>/dev/null; }

cleanup() {
  touch "$tmp"/release-* 2>/dev/null
  for p in "${programs[@]}"; do kill "$p" 2>/dev/null; done
  if alive "$gsliced_pid"; then kill -TERM "$gsliced_pid"; wait "$gsliced_pid" 2>/dev/null; fi
  # Whatever gsliced left (it was killed, or a daemon still had clients): quit, then by id.
  if [ -n "${pipe:-}" ] && alive "$(daemon_pid)"; then
    daemon_pids+=("$(daemon_pid)")
    control quit >/dev/null
  fi
  for _ in $(seq 100); do
    left=0
    for p in "${daemon_pids[@]}" "${server_pids[@]}"; do alive "$p" && left=1; done
    [ $left = 0 ] && break
    sleep 0.1
  done
  for p in "${server_pids[@]}" "${daemon_pids[@]}"; do
    alive "$p" && { echo "mps_control: $p still up after quit; ending it" >>"$log"; kill -9 "$p" 2>/dev/null; }
  done
  cp -r "$mps_dir"/*/log "$OUT/mps_control-mps-logs" 2>/dev/null
  rm -rf "$tmp" "$GSLICE_LEDGER" "$board"
}
trap 'cleanup; table' EXIT
trap 'exit 1' INT TERM

# ---- preconditions: what this script needs and never changes ----
if [ "$(id -u)" != 0 ]; then result setup FAIL "needs root (gsliced gives each GPU's daemon to a uid)"; exit 1; fi
for tool in nvidia-smi nvidia-cuda-mps-control setpriv python3; do
  command -v "$tool" >/dev/null || { result setup FAIL "no $tool here"; exit 1; }
done
[ -x "$build/bin/gsliced" ] || { result setup FAIL "no $build/bin/gsliced (scripts/build, or bench/gpu/pack)"; exit 1; }
mode=$(nvidia-smi -i 0 --query-gpu=compute_mode --format=csv,noheader | tr -d ' ')
gpu=$(nvidia-smi -i 0 --query-gpu=name,driver_version --format=csv,noheader)
result gpu INFO "$gpu, compute mode $mode"
if [ "$mode" != Default ]; then
  result setup FAIL "GPU 0 is in compute mode $mode; gsliced uses MPS only in Default and this script never changes it"
  exit 1
fi
if others=$(pgrep -f 'nvidia-cuda-mps-control -d'); then
  result setup INFO "another MPS control daemon runs on this machine (pids $(echo $others)); gsliced's has folders of its own"
fi

# A CUDA program: prints its MPS environment, initialises CUDA and holds a context and 1 MiB,
# touching it twice a second (a line when that fails), until $1 exists.
cat >"$tmp/client.py" <<'PY'
import ctypes, os, sys, time
env = lambda k: os.environ.get(k) or "-"
print("uid=%d pipe=%s priority=%s threads=%s" % (os.getuid(), env("CUDA_MPS_PIPE_DIRECTORY"),
      env("CUDA_MPS_CLIENT_PRIORITY"), env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")), flush=True)
cuda = ctypes.CDLL("libcuda.so.1")
start = time.time()
rc = cuda.cuInit(0)
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
if rc == 0: rc = cuda.cuDeviceGet(ctypes.byref(dev), 0)
if rc == 0: rc = cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
if rc == 0: rc = cuda.cuCtxSetCurrent(ctx)
if rc == 0: rc = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20))
if rc != 0:
    print("cuda error %d after %.2f s" % (rc, time.time() - start), flush=True)
    sys.exit(1)
print("ok pid=%d init=%.2fs" % (os.getpid(), time.time() - start), flush=True)
failed = False
while not os.path.exists(sys.argv[1]):
    rc = cuda.cuMemsetD8_v2(ptr, ctypes.c_ubyte(1), ctypes.c_size_t(1 << 20)) or cuda.cuCtxSynchronize()
    if rc != 0 and not failed:
        print("touch error %d at %.1f s" % (rc, time.time() - start), flush=True)
        failed = True
    time.sleep(0.5)
print("done failed=%s" % failed, flush=True)
sys.exit(1 if failed else 0)
PY
chmod 0644 "$tmp/client.py"

# gslice run of the client as uid $1 with gslice flags $2; output to $OUT/mps_control-$3.out.
start_program() {  # UID FLAGS NAME
  local out="$OUT/mps_control-$3.out"
  : >"$out"
  chmod 0666 "$out"
  HOME=/tmp setpriv --reuid="$1" --regid="$1" --clear-groups \
    "$build/bin/gslice" run $2 -- python3 "$tmp/client.py" "$tmp/release-$3" >"$out" 2>&1 &
  programs+=($!)
}
# Waits at most WAIT_S for the program's "ok" (or error) line; prints it.
await_init() {  # NAME
  local out="$OUT/mps_control-$1.out"
  for _ in $(seq $((WAIT_S * 10))); do
    grep -qE '^(ok|cuda error)' "$out" && break
    sleep 0.1
  done
  grep -E '^(ok|cuda error)' "$out" | head -1
}
field() { grep -o "$1=[^ ]*" "$OUT/mps_control-$2.out" | head -1 | cut -d= -f2; }

# ---- gsliced with MPS on ----
LD_LIBRARY_PATH="$deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$build/bin/gsliced" \
  --set socket="$GSLICE_SOCKET" --set socket_mode='"0666"' --set database="$tmp/gsliced.db" \
  --set ledger="$GSLICE_LEDGER" --set suspend_board="$board" --set sample_interval_ms=200 \
  --set mps=on --set mps_directory="$mps_dir" >>"$log" 2>&1 &
gsliced_pid=$!
for _ in $(seq 100); do [ -S "$GSLICE_SOCKET" ] && break; sleep 0.1; done
[ -S "$GSLICE_SOCKET" ] || { result gsliced FAIL "gsliced did not start: $(tail -2 "$log" | tr '\n' ' ')"; exit 1; }
uuid=$(nvidia-smi -i 0 --query-gpu=uuid --format=csv,noheader | tr -d ' ')
pipe="$mps_dir/$uuid/pipe" logs="$mps_dir/$uuid/log"
for _ in $(seq 100); do alive "$(daemon_pid)" && break; sleep 0.1; done
first_daemon=$(daemon_pid)
daemon_pids+=("$first_daemon")
ls -la "$mps_dir" "$mps_dir/$uuid" "$pipe" "$logs" >"$OUT/mps_control-folders.txt" 2>&1
modes="$(stat -c '%a %U' "$mps_dir" "$mps_dir/$uuid" "$pipe" "$logs" "$pipe/control" 2>/dev/null | tr '\n' ',')"
if alive "$first_daemon" && [ "$modes" = "711 root,711 root,711 root,700 root,600 root," ]; then
  result daemon_up PASS "pid $first_daemon; folders and socket: $modes"
else
  result daemon_up FAIL "pid '${first_daemon}'; modes '$modes' (want 711,711,711,700 and socket 600, all root's)"
fi
"$build/bin/gslice" ls >"$OUT/mps_control-ls-idle.txt" 2>&1

# ---- user A: guaranteed, then opportunistic with a cap, beside it ----
start_program "$A" "--gpus 0 --memory 4GiB" a-guaranteed
init=$(await_init a-guaranteed)
sleep 0.5
servers=$(control get_server_list | grep -E '^[0-9]+$' | tr '\n' ' ')
server_pids+=($servers)
server_uid=""
for s in $servers; do server_uid+="$(stat -c %u /proc/"$s" 2>/dev/null) "; done
if [[ "$init" == ok* ]] && [ "$(field pipe a-guaranteed)" = "$pipe" ] && [ "$(field priority a-guaranteed)" = 0 ] &&
   [[ " $server_uid" == *" $A "* ]]; then
  result a_guaranteed PASS "$init; CUDA_MPS_PIPE_DIRECTORY set, priority 0; server(s) $servers of uid $server_uid"
else
  result a_guaranteed FAIL "'$init'; $(head -1 "$OUT/mps_control-a-guaranteed.out"); servers '$servers' uids '$server_uid'"
fi
start_program "$A" "--gpus 0 --memory 4GiB --class opportunistic --cap 50%" a-opportunistic
init=$(await_init a-opportunistic)
clients=$(for s in $servers; do control "get_client_list $s"; done | tr '\n' ' ')
if [[ "$init" == ok* ]] && [ "$(field priority a-opportunistic)" = 1 ] && [ "$(field threads a-opportunistic)" = 50 ]; then
  result a_opportunistic PASS "$init; priority 1, 50% of the threads; the server's clients: $clients"
else
  result a_opportunistic FAIL "'$init'; $(head -1 "$OUT/mps_control-a-opportunistic.out")"
fi
nvidia-smi >"$OUT/mps_control-nvidia-smi-a.txt" 2>&1

# ---- user B while A's programs run ----
start_program "$B" "--gpus 0 --memory 4GiB" b-slice
t0=$SECONDS
init=$(await_init b-slice)
"$build/bin/gslice" ls >"$OUT/mps_control-ls-two-users.txt" 2>&1
"$build/bin/gslice" ls --json >"$OUT/mps_control-ls-two-users.json" 2>&1
why=$(python3 -c '
import json, sys
for s in json.load(open(sys.argv[1]))["slices"]:
    if s.get("owner_uid") == int(sys.argv[2]): print(s["gpus"][0]["sharing"], "-", s["gpus"][0]["sharing_why"])
' "$OUT/mps_control-ls-two-users.json" "$B" 2>/dev/null | head -1)
if [[ "$init" == ok* ]] && [ "$(field pipe b-slice)" = "-" ] && [[ "$why" == time-sliced* ]]; then
  result b_time_sliced PASS "cuInit done after $((SECONDS - t0)) s (bound ${WAIT_S} s), no MPS environment; $why"
else
  result b_time_sliced FAIL "'${init:-blocked: no cuInit within ${WAIT_S} s}'; pipe=$(field pipe b-slice); $why"
fi
# B pointed at A's daemon by hand: it cannot reach it and must not wait behind A.
out="$OUT/mps_control-b-direct.out"
t0=$SECONDS
CUDA_MPS_PIPE_DIRECTORY="$pipe" HOME=/tmp timeout "$WAIT_S" setpriv --reuid="$B" --regid="$B" --clear-groups \
  env python3 "$tmp/client.py" /dev/null >"$out" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q '^ok' "$out"; then
  result b_direct_not_blocked PASS "a program of uid $B given A's pipe folder ran without MPS in $((SECONDS - t0)) s"
elif [ $rc = 124 ]; then
  result b_direct_not_blocked FAIL "blocked: no cuInit within ${WAIT_S} s"
else
  result b_direct_not_blocked FAIL "exit $rc: $(grep -E '^(ok|cuda error)' "$out" | head -1)"
fi
result b_command INFO "uid $B: $(control get_server_list "$B" | head -2 | tr '\n' ' ')"
result a_command INFO "uid $A: $(control get_server_list "$A" | head -2 | tr '\n' ' ')"

# ---- the daemon killed while A's programs run ----
kill -9 "$first_daemon"
t0=$SECONDS
second=""
for _ in $(seq 150); do
  d=$(daemon_pid)
  if [ -n "$d" ] && [ "$d" != "$first_daemon" ] && alive "$d"; then second=$d; break; fi
  sleep 0.1
done
daemon_pids+=($second)
restarts=$("$build/bin/gslice" ls --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["gpus"][0]["sharing"]["mps_restarts"])' 2>/dev/null)
if [ -n "$second" ] && [ "$restarts" = 1 ]; then
  result daemon_restarted PASS "new daemon pid $second after $((SECONDS - t0)) s; mps_restarts $restarts"
else
  result daemon_restarted FAIL "no new daemon within 15 s (pid file: '$(daemon_pid)'; mps_restarts '$restarts')"
fi
sleep 2
for name in a-guaranteed a-opportunistic; do
  result "clients_after_kill" INFO "$name: $(tail -1 "$OUT/mps_control-$name.out")"
done
start_program "$A" "--gpus 0 --memory 4GiB" a-after-restart
init=$(await_init a-after-restart)
servers=$(control get_server_list | grep -E '^[0-9]+$' | tr '\n' ' ')
server_pids+=($servers)
if [[ "$init" == ok* ]] && [ "$(field pipe a-after-restart)" = "$pipe" ] && [ -n "$servers" ]; then
  result a_after_restart PASS "$init on the new daemon; servers $servers"
else
  result a_after_restart FAIL "'$init'; servers '$servers'"
fi

# ---- gsliced stopped: its daemon and servers are gone ----
touch "$tmp"/release-a-guaranteed "$tmp"/release-a-opportunistic "$tmp"/release-b-slice "$tmp"/release-a-after-restart
for p in "${programs[@]}"; do
  for _ in $(seq 300); do alive "$p" || break; sleep 0.1; done
done
kill -TERM "$gsliced_pid"; wait "$gsliced_pid" 2>/dev/null; gsliced_pid=""
t0=$SECONDS
for _ in $(seq 150); do
  left=""
  for p in "${daemon_pids[@]}" "${server_pids[@]}"; do alive "$p" && left+="$p "; done
  [ -z "$left" ] && break
  sleep 0.1
done
if [ -z "$left" ]; then
  result stopped PASS "daemon and servers gone $((SECONDS - t0)) s after gsliced stopped"
else
  result stopped FAIL "still running 15 s after gsliced stopped: $left"
fi
grep 'mps:' "$log" | tail -20 >"$OUT/mps_control-mps-lines.txt"
