// Memory preemption: which opportunistic processes to suspend so that a guaranteed
// allocation fits. Suspending a process frees its device memory (data and context) and
// copies its data to host memory; the planner frees at least what is needed while moving
// the fewest bytes, then, among plans moving equally many bytes, touching the fewest
// processes. Pure function, no I/O.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gslice::suspend {

struct PreemptionCandidate {
  int pid = 0;
  uint64_t freed_bytes = 0;  // device memory released on that GPU when it is suspended
  uint64_t moved_bytes = 0;  // bytes copied to host memory (what the checkpoint costs)
};

struct PreemptionPlan {
  bool ok = false;
  std::vector<int> pids;       // to suspend, in the order given
  uint64_t freed_bytes = 0;
  uint64_t moved_bytes = 0;
  std::string reason;          // when !ok
};

// Picks a subset of `candidates` whose freed_bytes sum to at least `need_bytes` with the
// smallest moved_bytes sum that host memory can take (`host_bytes_available`). Sizes are
// compared in units of max(1 MiB, need / 16384) (need rounded up, freed rounded down), so a
// plan never frees less than asked. need_bytes == 0 gives an empty, successful plan.
PreemptionPlan PlanPreemption(std::span<const PreemptionCandidate> candidates, uint64_t need_bytes,
                              uint64_t host_bytes_available);

}  // namespace gslice::suspend
