#!/usr/bin/env bash
# scripts/quickstart on the simulator against an existing build: it must start gsliced, make
# both slices, run both workloads (train's timeline written to a file), run the workload once
# more through gslice-remoted on the same machine, print `gslice ls`, and, without --keep,
# give no dashboard address (gsliced is gone by then) but say how to get one, and leave
# nothing running or behind. With --keep, the address it prints answers, and the stop line it
# prints stops gsliced and removes its files.
#   quickstart_test.sh QUICKSTART BUILD_DIR [ASAN_RUNTIME]
set -uo pipefail
quickstart="$1" build="$2" asan="${3:-}"
out="$(mktemp "${TMPDIR:-/tmp}/gslice-test-$$-quickstart-XXXXXX")"
timeline="$out.timeline.json"
kept_pid=""
cleanup() {
  [ -n "$kept_pid" ] && kill "$kept_pid" 2>/dev/null
  rm -f "$out" "$timeline"
}
trap cleanup EXIT
if [ -n "$asan" ]; then
  # Under the sanitize preset the shims are instrumented: the ASan runtime goes first.
  export LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0
fi
fail() { echo "quickstart_test: $*"; echo "--- its output:"; cat "$out"; exit 1; }

"$quickstart" --no-build --sim --build-dir "$build" --timeline "$timeline" > "$out" 2>&1 || fail "exit status $?"
for want in "SIMULATED driver" "created slice train (guaranteed" "created slice scratch (opportunistic" \
            "gslice-example: all checks passed" "gslice run: trace written to $timeline" \
            "gslice-remoted: listening on unix:" "quickstart: dashboard: gsliced stops now; run scripts/quickstart --keep" \
            "quickstart: done" "gsliced stopped and its files removed"; do
  grep -q "$want" "$out" || fail "no '$want' in its output"
done
grep -q "http://" "$out" && fail "it prints an address that is dead once it exits"
[ "$(grep -c 'gslice-example: all checks passed' "$out")" -eq 3 ] || fail "not all three workloads passed"
python3 - "$timeline" <<'PY' || fail "the timeline $timeline is not a trace with kernels"
import json, sys
t = json.load(open(sys.argv[1]))
assert any(e.get("cat") == "kernel" for e in t["traceEvents"])
PY
grep -Eq '^train +[a-z]+ +default +guaranteed' "$out" || fail "gslice ls does not list train"
grep -Eq '^scratch +[a-z]+ +default +opportunistic' "$out" || fail "gslice ls does not list scratch"
socket="$(sed -n 's/.*api on unix:\(.*\)$/\1/p' "$out")"
[ -n "$socket" ] || fail "no socket in the log"
[ ! -e "$socket" ] || fail "gsliced's socket $socket is still there"
ledger="$(sed -n 's/.* re-adopted from \([^,]*\),.*/\1/p' "$out")"
[ -n "$ledger" ] && [ ! -e "$ledger" ] || fail "its ledger '$ledger' is still there"

# --keep: the printed address answers once the script is done; the printed stop line stops it.
rm -f "$timeline"
"$quickstart" --no-build --sim --keep --build-dir "$build" --timeline "$timeline" > "$out" 2>&1 || fail "--keep: exit status $?"
url="$(sed -n 's/^quickstart: dashboard: \(http:[^#]*\)#token=.*/\1/p' "$out")"
stop="$(grep -E '^  kill [0-9]+; rm -rf ' "$out" | sed 's/ *#.*//')"
kept_pid="$(sed -n 's/^  kill \([0-9]*\);.*/\1/p' "$out")"
[ -n "$url" ] && [ -n "$stop" ] && [ -n "$kept_pid" ] || fail "--keep: no address or stop line"
python3 - "$url" <<'PY' || fail "--keep: the dashboard at $url does not answer"
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
    assert r.status == 200 and b"<html" in r.read().lower()
PY
bash -c "$stop" || fail "--keep: its stop line failed"
for _ in $(seq 100); do kill -0 "$kept_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$kept_pid" 2>/dev/null && fail "--keep: gsliced still runs after its stop line"
kept_pid=""
echo "quickstart_test: passed"
