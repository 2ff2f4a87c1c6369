// The share turn's state machine (share_turn.h), the one the launch gate runs, on synthetic
// contenders and simulated time.
#include "share_turn.h"

#include <gtest/gtest.h>

namespace gslice::compute {
namespace {

constexpr int64_t kStart = 1'000'000'000;  // simulated time of the first decision

Contenders Others(int64_t min_vtime, bool running = false, bool inflight = false) {
  return {.min_vtime = min_vtime, .inflight = inflight, .running = running};
}

TEST(ComputeShareTurn, WithoutContendersLaunchesGoAndNoTurnIsHeld) {
  ShareTurnTaker t;
  const TurnDecision d = t.Decide({}, 123, kStart);
  EXPECT_EQ(d.wait_ns, 0);
  EXPECT_EQ(d.vtime_add, 0);
  EXPECT_FALSE(d.running);
  EXPECT_FALSE(t.running());
}

TEST(ComputeShareTurn, StartingToContendCatchesUpOnceAndBanksNoIdleTime) {
  ShareTurnTaker t;
  TurnDecision d = t.Decide(Others(500), 100, kStart);
  EXPECT_EQ(d.vtime_add, 400) << "caught up to the furthest behind";
  EXPECT_TRUE(d.running) << "level with it, no one running: the turn is ours";
  d = t.Decide(Others(900), 500, kStart + 1);
  EXPECT_EQ(d.vtime_add, 0) << "still contending: no second catch-up";
  t.Decide({}, 500, kStart + 2);  // the others go idle
  d = t.Decide(Others(2'000), 500, kStart + 3);
  EXPECT_EQ(d.vtime_add, 1'500) << "contending again: caught up again";
  ShareTurnTaker ahead;
  EXPECT_EQ(ahead.Decide(Others(100), 5'000, kStart).vtime_add, 0) << "never moved back";
}

TEST(ComputeShareTurn, WaitsWhileAnotherHoldsTheTurn) {
  ShareTurnTaker t;
  const TurnDecision d = t.Decide(Others(1'000, /*running=*/true), 0, kStart);
  EXPECT_EQ(d.wait_ns, kTurnWaitNs);
  EXPECT_FALSE(d.running);
  EXPECT_EQ(t.Decide(Others(1'000, /*running=*/false), 1'000, kStart + 1).wait_ns, 0) << "released: ours";
  EXPECT_TRUE(t.running());
}

TEST(ComputeShareTurn, KeepsTheTurnUntilItLeadsByAQuantum) {
  ShareTurnTaker t;
  ASSERT_TRUE(t.Decide(Others(0), 0, kStart).running);
  EXPECT_TRUE(t.Decide(Others(0), kShareQuantumNs, kStart + 1).running);
  const TurnDecision d = t.Decide(Others(0), kShareQuantumNs + 1, kStart + 2);
  EXPECT_FALSE(d.running) << "leads by more than a quantum: hands the turn over";
  EXPECT_EQ(d.wait_ns, kTurnWaitNs);
  EXPECT_EQ(t.Decide(Others(0), kShareQuantumNs + 1, kStart + 3).wait_ns, kTurnWaitNs)
      << "not running, ahead: waits for the one behind";
}

TEST(ComputeShareTurn, TakingTheTurnWaitsForTheLastRunnerToDrainButNotForever) {
  ShareTurnTaker t;
  const Contenders draining = Others(1'000, /*running=*/false, /*inflight=*/true);
  int64_t now = kStart;
  TurnDecision d = t.Decide(draining, 0, now);
  EXPECT_EQ(d.wait_ns, kDrainPollNs);
  EXPECT_FALSE(d.running);
  // Still draining: polled until kDrainWaitMaxNs from the moment the turn became ours.
  int polls = 1;
  while (true) {
    now += d.wait_ns;
    d = t.Decide(draining, 1'000, now);
    if (d.wait_ns == 0) break;
    ASSERT_EQ(d.wait_ns, kDrainPollNs);
    ASSERT_LT(++polls, 1'000);
  }
  EXPECT_TRUE(d.running);
  EXPECT_GE(now - kStart, kDrainWaitMaxNs);
  EXPECT_LT(now - kStart, kDrainWaitMaxNs + kDrainPollNs);

  ShareTurnTaker u;
  ASSERT_EQ(u.Decide(draining, 0, kStart).wait_ns, kDrainPollNs);
  d = u.Decide(Others(1'000), 1'000, kStart + kDrainPollNs);
  EXPECT_EQ(d.wait_ns, 0) << "drained: the turn is taken at once";
  EXPECT_TRUE(d.running);
}

// Two always-busy processes with shares 1:3, each running its own ShareTurnTaker against the
// other's published state, split the GPU 1:3 and never hold the turn together.
TEST(ComputeShareTurn, TwoProcessesAlternateInTheRatioOfTheirShares) {
  struct Process {
    ShareTurnTaker turn;
    int64_t vtime = 0;
    int64_t busy = 0;
    uint32_t share = 0;
  } p[2];
  p[0].share = 250;
  p[1].share = 750;
  constexpr int64_t kKernelNs = 100'000;
  int64_t now = kStart;
  int handovers = 0;
  int last_runner = -1;
  for (int step = 0; step < 100'000; ++step, now += kKernelNs) {
    int ran = 0;  // each decides at every step, as launches waiting at both gates do
    for (int i = 0; i < 2; ++i) {
      Process& me = p[i];
      const Process& other = p[1 - i];
      const TurnDecision d = me.turn.Decide(Others(other.vtime, other.turn.running()), me.vtime, now);
      me.vtime += d.vtime_add;
      if (d.wait_ns != 0) continue;
      ASSERT_FALSE(other.turn.running()) << "the turn is exclusive";
      me.busy += kKernelNs;
      me.vtime += VtimeIncrement(kKernelNs, me.share);
      if (last_runner != i) ++handovers;
      last_runner = i;
      ++ran;
    }
    ASSERT_LE(ran, 1) << "one kernel per step: the GPU runs one process at a time";
  }
  const double frac = static_cast<double>(p[0].busy) / static_cast<double>(p[0].busy + p[1].busy);
  EXPECT_NEAR(frac, 0.25, 0.01);
  EXPECT_GT(handovers, 100) << "turns alternate rather than one process keeping the GPU";
}

}  // namespace
}  // namespace gslice::compute
