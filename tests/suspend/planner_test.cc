#include "gslice/suspend/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace gslice::suspend {
namespace {

constexpr uint64_t GiB = 1ULL << 30;
constexpr uint64_t MiB = 1ULL << 20;
constexpr uint64_t kLots = 1ULL << 50;

PreemptionCandidate C(int pid, uint64_t bytes) { return {pid, bytes, bytes}; }

std::vector<int> Sorted(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(Planner, NothingNeededNothingMoved) {
  std::vector<PreemptionCandidate> c = {C(1, GiB)};
  PreemptionPlan p = PlanPreemption(c, 0, kLots);
  EXPECT_TRUE(p.ok);
  EXPECT_TRUE(p.pids.empty());
}

TEST(Planner, PicksFewestBytesNotFewestProcessesOrLargest) {
  // Need 10 GiB: {12} moves 12, {6, 5} moves 11, {40} moves 40. Best: 6 + 5.
  std::vector<PreemptionCandidate> c = {C(1, 40 * GiB), C(2, 12 * GiB), C(3, 6 * GiB),
                                        C(4, 5 * GiB)};
  PreemptionPlan p = PlanPreemption(c, 10 * GiB, kLots);
  ASSERT_TRUE(p.ok) << p.reason;
  EXPECT_EQ(Sorted(p.pids), (std::vector<int>{3, 4}));
  EXPECT_EQ(p.moved_bytes, 11 * GiB);
  EXPECT_GE(p.freed_bytes, 10 * GiB);
}

TEST(Planner, TiesGoToFewerProcesses) {
  std::vector<PreemptionCandidate> c = {C(1, 4 * GiB), C(2, 4 * GiB), C(3, 8 * GiB)};
  PreemptionPlan p = PlanPreemption(c, 8 * GiB, kLots);
  ASSERT_TRUE(p.ok);
  EXPECT_EQ(p.pids, (std::vector<int>{3}));
}

TEST(Planner, FreedAndMovedCanDiffer) {
  // Process 1 frees 6 GiB (context included) but moves only 3; process 2 frees and moves 5.
  std::vector<PreemptionCandidate> c = {{1, 6 * GiB, 3 * GiB}, {2, 5 * GiB, 5 * GiB}};
  PreemptionPlan p = PlanPreemption(c, 5 * GiB, kLots);
  ASSERT_TRUE(p.ok);
  EXPECT_EQ(p.pids, (std::vector<int>{1}));
  EXPECT_EQ(p.moved_bytes, 3 * GiB);
}

TEST(Planner, RefusesWhenEverythingIsNotEnough) {
  std::vector<PreemptionCandidate> c = {C(1, GiB), C(2, 2 * GiB)};
  PreemptionPlan p = PlanPreemption(c, 4 * GiB, kLots);
  EXPECT_FALSE(p.ok);
  EXPECT_NE(p.reason.find("only 3 GiB"), std::string::npos) << p.reason;
  EXPECT_FALSE(PlanPreemption({}, 1, kLots).ok);
}

TEST(Planner, RefusesWhenHostMemoryCannotTakeIt) {
  std::vector<PreemptionCandidate> c = {C(1, 8 * GiB), C(2, 8 * GiB)};
  PreemptionPlan p = PlanPreemption(c, 10 * GiB, 12 * GiB);
  EXPECT_FALSE(p.ok);
  EXPECT_NE(p.reason.find("host memory"), std::string::npos) << p.reason;
}

TEST(Planner, NeverFreesLessThanAskedWithOddSizes) {
  // Sizes just under unit boundaries must not round a plan into one that frees too little.
  std::vector<PreemptionCandidate> c = {C(1, 3 * MiB - 1), C(2, 3 * MiB - 1), C(3, 7 * MiB)};
  PreemptionPlan p = PlanPreemption(c, 6 * MiB - 1, kLots);
  ASSERT_TRUE(p.ok) << p.reason;
  EXPECT_GE(p.freed_bytes, 6 * MiB - 1);
}

// Against exhaustive search on random small instances: the plan is feasible and moves no
// more than the true optimum (plus rounding of at most one unit per chosen process).
TEST(Planner, MatchesExhaustiveSearch) {
  std::mt19937_64 rng(42);
  for (int round = 0; round < 300; ++round) {
    const int n = 1 + static_cast<int>(rng() % 10);
    std::vector<PreemptionCandidate> c;
    for (int i = 0; i < n; ++i) {
      const uint64_t freed = (1 + rng() % 4096) * MiB;
      const uint64_t moved = freed - (rng() % 2 ? 0 : std::min<uint64_t>(freed - MiB, 512 * MiB));
      c.push_back({i + 1, freed, moved});
    }
    const uint64_t need = (1 + rng() % 8192) * MiB;
    uint64_t best = UINT64_MAX;
    for (uint32_t mask = 1; mask < (1u << n); ++mask) {
      uint64_t f = 0, m = 0;
      for (int i = 0; i < n; ++i) {
        if (mask & (1u << i)) f += c[i].freed_bytes, m += c[i].moved_bytes;
      }
      if (f >= need) best = std::min(best, m);
    }
    PreemptionPlan p = PlanPreemption(c, need, kLots);
    if (best == UINT64_MAX) {
      EXPECT_FALSE(p.ok) << "round " << round;
      continue;
    }
    ASSERT_TRUE(p.ok) << "round " << round << ": " << p.reason;
    EXPECT_GE(p.freed_bytes, need) << "round " << round;
    EXPECT_EQ(p.moved_bytes, best) << "round " << round;
  }
}

}  // namespace
}  // namespace gslice::suspend
