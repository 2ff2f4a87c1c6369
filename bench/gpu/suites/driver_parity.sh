#!/usr/bin/env bash
# Driver parity: the sim suite's driver-API tests (tests/sim) run unchanged against the real
# driver, so every behaviour the sim is pinned to is checked against the driver it imitates.
# Tests that only make sense on the sim (its configuration variables, its failure injection,
# more devices than the machine has, filling the whole device) are left out, by name, below.
# Prints one RESULT line per test for bench/gpu/run's table.
set -uo pipefail
build="${GSLICE_BUILD:-build}"
out="${OUT:-/tmp}"
real_dir=$(dirname "$(ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}')")
if [ ! -x "$build/bin/sim_tests" ]; then
  echo "RESULT driver_parity FAIL $build/bin/sim_tests is missing"
  exit 1
fi

sim_only=(
  InitTest.DevicesFollowTheConfiguration              # GSLICE_SIM_* device configuration
  InitTest.ConfigurationComesFromTheEnvironmentOfTheFirstProcess
  InitTest.BadConfigurationIsReportedAndInitFails
  InitTest.CudaVisibleDevicesSelectsAndOrders         # needs two devices
  MemoryTest.OutOfMemoryAtCapacity                    # fills the whole device
  MultiProcessTest.ProcessesShareDeviceCapacity       # fills the whole device
  NvmlTest.StateToolShowsTheNode                      # the sim's own state tool
  CheckpointTest.InjectedCheckpointFailureLeavesTheProcessLocked   # sim failure injection
  CheckpointTest.RestoreWithGpuPairsMovesTheProcess   # needs two devices
  CheckpointTest.RestoreFailsCleanlyWithoutRoom       # fills the whole device
)
filter="-$(IFS=:; echo "${sim_only[*]}")"

# LD_LIBRARY_PATH wins over the binaries' RUNPATH (which points at the sim).
LD_LIBRARY_PATH="$real_dir" GSLICE_SIM_STATE=/dev/shm/gslice-parity-unused \
  "$build/bin/sim_tests" --gtest_filter="$filter" --gtest_output="json:$out/driver_parity.json" \
  >"$out/driver_parity.log" 2>&1
rc=$?
python3 - "$out/driver_parity.json" <<'PY'
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except Exception as e:  # the binary crashed before writing its report
    print(f"RESULT driver_parity FAIL no report ({e}); see driver_parity.log")
    sys.exit(0)
passed = failed = 0
for suite in report.get("testsuites", []):
    for t in suite.get("testsuite", []):
        name = f"{suite['name']}.{t['name']}"
        if t.get("failures"):
            failed += 1
            msg = t["failures"][0]["failure"].splitlines()
            detail = " ".join(m.strip() for m in msg[:2])[:150]
            print(f"RESULT parity:{name} FAIL {detail}")
        else:
            passed += 1
print(f"RESULT driver_parity {'PASS' if failed == 0 else 'FAIL'} {passed} passed, {failed} failed on the real driver (sim-only tests excluded by name)")
PY
exit $rc
