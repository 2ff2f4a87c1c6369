// The launch gate's pure rules: policy parsing, the GCRA cap, share turns, depth bound.
#include "policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

namespace gslice::compute {
namespace {

TEST(ComputePolicy, ParsesCapShareAndClass) {
  ComputePolicy p;
  char err[128] = {};
  ASSERT_TRUE(ParseComputePolicy("30%", "70%", "opportunistic", &p, err, sizeof err)) << err;
  EXPECT_EQ(p.cap_permille, 300u);
  EXPECT_EQ(p.share_permille, 700u);
  EXPECT_TRUE(p.share_set);
  EXPECT_EQ(p.cls, ComputeClass::kOpportunistic);
  ASSERT_TRUE(ParseComputePolicy("", "", "", &p, err, sizeof err));
  EXPECT_FALSE(p.capped());
  EXPECT_FALSE(p.share_set);
  EXPECT_EQ(p.cls, ComputeClass::kGuaranteed);
}

// What the ledger's slice words make of the policy a process started with (the gate thread's
// decision every pass, FollowSlicePolicy).
TEST(ComputePolicy, TheSlicesWordsInTheLedgerWinOverTheEnvironmentOnceSet) {
  constexpr int kG = static_cast<int>(ComputeClass::kGuaranteed);
  constexpr int kO = static_cast<int>(ComputeClass::kOpportunistic);
  const ComputePolicy none;
  const ComputePolicy env = {.cap_permille = 700, .share_permille = 400, .share_set = true, .cls = ComputeClass::kGuaranteed};
  // Nothing set (or no slice): the environment's policy.
  EXPECT_EQ(PackPolicy(EffectivePolicy(env, {}, -1)), PackPolicy(env));
  EXPECT_EQ(PackPolicy(EffectivePolicy(env, {.slice_class = kG}, kG)), PackPolicy(env));
  // An uncapped process becomes capped; a set cap replaces the environment's; 0 lifts it.
  EXPECT_EQ(EffectivePolicy(none, {.cap_permille = 300, .slice_class = kG}, kG).cap_permille, 300u);
  EXPECT_TRUE(EffectivePolicy(none, {.cap_permille = 300, .slice_class = kG}, kG).capped());
  EXPECT_EQ(EffectivePolicy(env, {.cap_permille = 300}, -1).cap_permille, 300u);
  EXPECT_FALSE(EffectivePolicy(env, {.cap_permille = 0}, -1).capped());
  EXPECT_FALSE(EffectivePolicy(env, {.cap_permille = 1000}, -1).capped());
  EXPECT_FALSE(EffectivePolicy(env, {.cap_permille = 0xffff}, -1).capped()) << "out of range: no cap";
  // A share set is explicit; a share of 0 is none given (the default weight, not explicit).
  const ComputePolicy shared = EffectivePolicy(none, {.share_permille = 250}, -1);
  EXPECT_EQ(shared.share_permille, 250u);
  EXPECT_TRUE(shared.share_set);
  const ComputePolicy unshared = EffectivePolicy(env, {.share_permille = 0}, -1);
  EXPECT_EQ(unshared.share_permille, 1000u);
  EXPECT_FALSE(unshared.share_set);
  EXPECT_EQ(unshared.cap_permille, 700u) << "a word not set leaves the environment's";
  // The class: an opportunistic slice's processes are opportunistic; a slice whose class
  // changed since the gate first saw it gives its new class either way.
  EXPECT_EQ(EffectivePolicy(env, {.slice_class = kO}, kO).cls, ComputeClass::kOpportunistic);
  EXPECT_EQ(EffectivePolicy(env, {.slice_class = kO}, kG).cls, ComputeClass::kOpportunistic);
  const ComputePolicy opp = {.cls = ComputeClass::kOpportunistic};
  EXPECT_EQ(EffectivePolicy(opp, {.slice_class = kG}, kG).cls, ComputeClass::kOpportunistic)
      << "a guaranteed slice leaves a process that calls itself opportunistic so";
  EXPECT_EQ(EffectivePolicy(opp, {.slice_class = kG}, kO).cls, ComputeClass::kGuaranteed);
}

TEST(ComputePolicy, APolicyPacksIntoOneWordAndBack) {
  for (const ComputePolicy p : {ComputePolicy{},
                                ComputePolicy{.cap_permille = 10, .share_permille = 1000, .share_set = true,
                                              .cls = ComputeClass::kOpportunistic},
                                ComputePolicy{.cap_permille = 999, .share_permille = 1, .cls = ComputeClass::kGuaranteed}}) {
    const ComputePolicy q = UnpackPolicy(PackPolicy(p));
    EXPECT_EQ(q.cap_permille, p.cap_permille);
    EXPECT_EQ(q.share_permille, p.share_permille);
    EXPECT_EQ(q.share_set, p.share_set);
    EXPECT_EQ(q.cls, p.cls);
  }
}

TEST(ComputePolicy, RejectsBadValuesWithTheVariableName) {
  ComputePolicy p;
  p.cap_permille = 123;
  char err[128] = {};
  EXPECT_FALSE(ParseComputePolicy("150%", "", "", &p, err, sizeof err));
  EXPECT_NE(std::string(err).find("GSLICE_COMPUTE"), std::string::npos) << err;
  EXPECT_FALSE(ParseComputePolicy("0.5%", "", "", &p, err, sizeof err));
  EXPECT_FALSE(ParseComputePolicy("", "lots", "", &p, err, sizeof err));
  EXPECT_NE(std::string(err).find("GSLICE_SHARE"), std::string::npos) << err;
  EXPECT_FALSE(ParseComputePolicy("", "", "best-effort", &p, err, sizeof err));
  EXPECT_NE(std::string(err).find("GSLICE_CLASS"), std::string::npos) << err;
  EXPECT_EQ(p.cap_permille, 123u) << "a refused policy leaves the old one";
}

// Simulates a job that always has work, under a GCRA cap, with 1 ms kernels whose time is
// charged when they complete: the busy fraction over any 1 s window stays at the cap.
TEST(ComputeGcra, HoldsTheCapOverEveryWindow) {
  for (uint32_t cap : {100u, 300u, 500u, 700u}) {
    std::atomic<int64_t> tat{0};
    const int64_t kernel = 1'000'000, horizon = 5'000'000'000;
    std::vector<int64_t> busy_ms(static_cast<size_t>(horizon / 1'000'000), 0);
    int64_t now = 0;
    while (now < horizon) {
      const int64_t wait = GcraWaitNs(tat.load(), now);
      if (wait > 0) {
        now += wait;
        continue;
      }
      for (int64_t t = now; t < now + kernel && t < horizon; t += 1'000'000) busy_ms[static_cast<size_t>(t / 1'000'000)] = 1;
      now += kernel;
      GcraCharge(tat, now, kernel, cap);
    }
    int64_t worst = 0, total = 0;
    for (size_t s = 0; s + 1000 <= busy_ms.size(); ++s) {
      int64_t w = 0;
      for (size_t i = s; i < s + 1000; ++i) w += busy_ms[i];
      worst = std::max(worst, w);
    }
    for (int64_t b : busy_ms) total += b;
    EXPECT_NEAR(static_cast<double>(total) / 5000.0, cap / 1000.0, 0.01) << "cap " << cap;
    // Over any 1 s window: at most cap * (1 s + tolerance) + one kernel.
    EXPECT_LE(worst, static_cast<int64_t>(cap) + static_cast<int64_t>(cap) * kCapToleranceNs / 1'000'000'000 + 1)
        << "cap " << cap;
  }
}

TEST(ComputeGcra, DoesNotBankIdleTime) {
  std::atomic<int64_t> tat{0};
  GcraCharge(tat, 0, 1'000'000, 500);
  // A long idle stretch: the next charge starts from now - tolerance, not from the past.
  const int64_t now = 10'000'000'000;
  GcraCharge(tat, now, 1'000'000, 500);
  EXPECT_EQ(tat.load(), now - kCapToleranceNs + 2'000'000);
  EXPECT_EQ(GcraWaitNs(tat.load(), now), 0);
}

// Two always-busy slices with shares 1:3 taking turns by virtual time get 1:3 of the time.
TEST(ComputeShares, TurnsFollowTheShares) {
  struct S {
    int64_t vtime = 0;
    bool running = false;
    int64_t busy = 0;
    uint32_t share;
  } s[2];
  s[0].share = 250;
  s[1].share = 750;
  for (int step = 0; step < 100000; ++step) {
    for (int i = 0; i < 2; ++i) {
      S& me = s[i];
      const S& other = s[1 - i];
      if (!ShareTurn(me.vtime, other.vtime, me.running, other.running)) {
        me.running = false;
        continue;
      }
      me.running = true;
      me.busy += 100'000;
      me.vtime += VtimeIncrement(100'000, me.share);
      break;  // one 100 us kernel per step: exclusive use of the device
    }
  }
  const double frac = static_cast<double>(s[0].busy) / static_cast<double>(s[0].busy + s[1].busy);
  EXPECT_NEAR(frac, 0.25, 0.01);
}

TEST(ComputeShares, ActivationCatchesUpButNeverGoesBack) {
  EXPECT_EQ(VtimeOnActivation(5, 100), 100);
  EXPECT_EQ(VtimeOnActivation(500, 100), 500);
  EXPECT_EQ(VtimeOnActivation(5, INT64_MAX), 5);
  EXPECT_TRUE(ShareTurn(10, INT64_MAX, false, false));
  EXPECT_FALSE(ShareTurn(10, 20, false, true)) << "behind, but the other holds the turn";
  EXPECT_TRUE(ShareTurn(10, 20, false, false));
  EXPECT_TRUE(ShareTurn(20 + kShareQuantumNs, 20, true, false));
  EXPECT_FALSE(ShareTurn(21 + kShareQuantumNs, 20, true, false));
}

TEST(ComputeDepth, BoundsQueuedWorkButAlwaysAllowsOne) {
  EXPECT_TRUE(DepthAllows(0, 50'000'000, kCapDepthNs));
  EXPECT_FALSE(DepthAllows(1, 50'000'000, kCapDepthNs));
  EXPECT_TRUE(DepthAllows(19, 100'000, kCapDepthNs));
  EXPECT_FALSE(DepthAllows(20, 100'000, kCapDepthNs));
}

}  // namespace
}  // namespace gslice::compute
