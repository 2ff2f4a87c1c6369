#!/usr/bin/env bash
# scripts/quickstart on the simulator against an existing build: it must start gsliced, make
# both slices, run both workloads, print `gslice ls` and the dashboard's address, and leave
# nothing running or behind (no --keep).
#   quickstart_test.sh QUICKSTART BUILD_DIR [ASAN_RUNTIME]
set -uo pipefail
quickstart="$1" build="$2" asan="${3:-}"
out="$(mktemp "${TMPDIR:-/tmp}/gslice-test-$$-quickstart-XXXXXX")"
trap 'rm -f "$out"' EXIT
if [ -n "$asan" ]; then
  # Under the sanitize preset the shims are instrumented: the ASan runtime goes first.
  export LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0
fi
fail() { echo "quickstart_test: $*"; echo "--- its output:"; cat "$out"; exit 1; }

"$quickstart" --no-build --sim --build-dir "$build" > "$out" 2>&1 || fail "exit status $?"
for want in "SIMULATED driver" "created slice train (guaranteed" "created slice scratch (opportunistic" \
            "gslice-example: all checks passed" "quickstart: dashboard: http://127.0.0.1:[0-9]*/#token=" \
            "quickstart: done" "gsliced stopped and its files removed"; do
  grep -q "$want" "$out" || fail "no '$want' in its output"
done
[ "$(grep -c 'gslice-example: all checks passed' "$out")" -eq 2 ] || fail "not both workloads passed"
grep -Eq '^train +[a-z]+ +default +guaranteed' "$out" || fail "gslice ls does not list train"
grep -Eq '^scratch +[a-z]+ +default +opportunistic' "$out" || fail "gslice ls does not list scratch"
socket="$(sed -n 's/.*api on unix:\(.*\)$/\1/p' "$out")"
[ -n "$socket" ] || fail "no socket in the log"
[ ! -e "$socket" ] || fail "gsliced's socket $socket is still there"
ledger="$(sed -n 's/.* re-adopted from \([^,]*\),.*/\1/p' "$out")"
[ -n "$ledger" ] && [ ! -e "$ledger" ] || fail "its ledger '$ledger' is still there"
echo "quickstart_test: passed"
