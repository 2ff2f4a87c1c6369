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
  MemoryTest.FillOutsideAllocationFaultsTheContext    # an out-of-bounds kernel write is undefined; the driver faults only outside mapped pages
  MultiProcessTest.ForkedChildIsAProcessOfItsOwn      # the driver does not support CUDA in a child forked after cuInit
  NvmlTest.MemoryAndProcessesFollowTheDriver          # exact NVML byte accounting of the sim's 1 GiB device; the driver adds context and reserved memory
  ProcAddressTest.EveryExportIsReachableThroughGetProcAddress  # checks the sim's exports against its own table; the driver exports debugger data and legacy symbols it never resolves
)
filter="-$(IFS=:; echo "${sim_only[*]}")"

# Each test runs in its own process (LD_LIBRARY_PATH wins over the binaries' RUNPATH, which
# points at the sim), so a test that crashes on the real driver cannot hide the others.
export LD_LIBRARY_PATH="$real_dir" GSLICE_SIM_STATE=/dev/shm/gslice-parity-unused
tests=$("$build/bin/sim_tests" --gtest_list_tests --gtest_filter="$filter" |
  awk '/^[^ ]/ {suite=$1} /^  / {print suite $1}')
passed=0 failed=0
: >"$out/driver_parity.log"
for t in $tests; do
  timeout 60 "$build/bin/sim_tests" --gtest_filter="$t" >"$out/parity-one.log" 2>&1
  rc=$?
  cat "$out/parity-one.log" >>"$out/driver_parity.log"
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    why=$(grep -m1 -A3 'Failure' "$out/parity-one.log" | tail -n +2 | tr -s ' \n' ' ' | cut -c1-140)
    [ $rc -ge 124 ] && why="exit $rc (crash or timeout) ${why}"
    echo "RESULT parity:$t FAIL ${why:-exit $rc}"
  fi
done
rm -f "$out/parity-one.log"
echo "RESULT driver_parity $([ $failed -eq 0 ] && echo PASS || echo INFO) $passed passed, $failed differ on the real driver (sim-only tests excluded by name)"
