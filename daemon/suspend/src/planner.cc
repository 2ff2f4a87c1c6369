#include "gslice/suspend/planner.h"

#include <algorithm>
#include <limits>

#include "gslice/units.h"

namespace gslice::suspend {
namespace {

std::string Size(uint64_t bytes) {
  char buf[32];
  return FormatSize(bytes, buf, sizeof(buf));
}

// Cost of a partial plan: bytes moved, then processes touched.
struct Cost {
  uint64_t moved = std::numeric_limits<uint64_t>::max();
  uint32_t count = 0;
  bool reachable() const { return moved != std::numeric_limits<uint64_t>::max(); }
  bool operator<(const Cost& o) const { return moved != o.moved ? moved < o.moved : count < o.count; }
};

}  // namespace

PreemptionPlan PlanPreemption(std::span<const PreemptionCandidate> candidates, uint64_t need_bytes,
                              uint64_t host_bytes_available) {
  PreemptionPlan plan;
  if (need_bytes == 0) {
    plan.ok = true;
    return plan;
  }
  uint64_t total_freeable = 0;
  for (const auto& c : candidates) total_freeable += c.freed_bytes;
  if (total_freeable < need_bytes) {
    plan.reason = "preemption: " + Size(need_bytes) + " needed but suspending every " +
                  "opportunistic process on this GPU (" + std::to_string(candidates.size()) +
                  ") would free only " + Size(total_freeable);
    return plan;
  }

  // 0/1 knapsack over freed memory, capped at the need: best[f] is the cheapest way to free
  // at least f units. The unit bounds the table at 16k entries per candidate.
  constexpr uint64_t kMiB = 1ULL << 20;
  constexpr uint64_t kMaxUnits = 16384;
  const uint64_t unit = std::max<uint64_t>(std::min<uint64_t>(kMiB, need_bytes),
                                           (need_bytes + kMaxUnits - 1) / kMaxUnits);
  const size_t need_units = static_cast<size_t>((need_bytes + unit - 1) / unit);
  const size_t n = candidates.size();
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  std::vector<Cost> best(need_units + 1);
  best[0] = Cost{0, 0};
  // prev[i][f]: the f' that candidate i was added to when it improved best[f] in round i.
  std::vector<std::vector<uint32_t>> prev(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t units = static_cast<size_t>(candidates[i].freed_bytes / unit);
    if (units == 0) continue;  // frees nothing measurable: never worth its move
    prev[i].assign(need_units + 1, kNone);
    std::vector<Cost> next = best;
    for (size_t g = 0; g < need_units; ++g) {
      if (!best[g].reachable()) continue;
      const size_t f = std::min(need_units, g + units);
      const Cost c{best[g].moved + candidates[i].moved_bytes, best[g].count + 1};
      if (c < next[f]) {
        next[f] = c;
        prev[i][f] = static_cast<uint32_t>(g);
      }
    }
    best.swap(next);
  }
  if (!best[need_units].reachable()) {
    plan.reason = "preemption: no set of opportunistic processes frees " + Size(need_bytes);
    return plan;
  }
  // Walk back from the full need: the latest round that improved f chose its candidate.
  std::vector<bool> chosen(n, false);
  size_t f = need_units;
  for (size_t i = n; i-- > 0 && f > 0;) {
    if (prev[i].empty() || prev[i][f] == kNone) continue;
    chosen[i] = true;
    f = prev[i][f];
  }
  plan.freed_bytes = 0;
  plan.moved_bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!chosen[i]) continue;
    plan.pids.push_back(candidates[i].pid);
    plan.freed_bytes += candidates[i].freed_bytes;
    plan.moved_bytes += candidates[i].moved_bytes;
  }
  if (plan.moved_bytes > host_bytes_available) {
    plan.pids.clear();
    plan.reason = "preemption: freeing " + Size(need_bytes) + " means suspending " +
                  Size(plan.moved_bytes) + " to host memory, but only " +
                  Size(host_bytes_available) + " of host memory may take suspended state";
    return plan;
  }
  plan.ok = true;
  return plan;
}

}  // namespace gslice::suspend
