// The launch gate on the simulated driver's device engine (one context's kernels at a time,
// time-sliced between processes): caps, shares, the opportunistic class, reaction to load
// changes and dead participants, and the same through the shim and `gslice run`. The fixture is
// compute_sim.h's; the same gate on GPUs shared through MPS is in mps_sim_test.cc.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "compute_sim.h"
#include "gslice/ledger.h"

namespace gslice::compute_sim {
namespace {

TEST_F(ComputeSim, CapHoldsWhenAlone) {
  const auto rs = RunTogether({OnGpu(0), OnGpu(1, {{"GSLICE_COMPUTE", "30%"}})}, 2.5);
  const Result& free = rs[0];
  const Result& capped = rs[1];
  ASSERT_GT(free.kernels, 200) << free.raw;
  const double share = static_cast<double>(capped.kernels) / static_cast<double>(free.kernels);
  // Never above the cap; below it only by what a starved CPU costs the capped job's
  // measurement (the simulated kernels' times stretch when the machine is overloaded).
  EXPECT_LE(share, 0.30 + 0.06) << "capped " << capped.kernels << " vs free " << free.kernels;
  EXPECT_GE(share, 0.30 * 0.5) << "capped " << capped.kernels << " vs free " << free.kernels;
  // The cap holds in each half of the window, not only on average.
  const double first = static_cast<double>(capped.Between(0, 1250)) / static_cast<double>(free.Between(0, 1250));
  const double second = static_cast<double>(capped.Between(1250, 2500)) / static_cast<double>(free.Between(1250, 2500));
  EXPECT_LT(first, 0.40);
  EXPECT_LT(second, 0.40);
}

TEST_F(ComputeSim, SharesSplitTheDevice) {
  const auto rs = RunTogether({{{"GSLICE_SHARE", "25%"}}, {{"GSLICE_SHARE", "75%"}}}, 3.0);
  const double a = static_cast<double>(rs[0].kernels), b = static_cast<double>(rs[1].kernels);
  ASSERT_GT(a + b, 200);
  // Shares unseen between the slices would split about evenly (0.5). Under the sanitizers, in a
  // full run on two cores, the turns gave 0.335 once (656 vs 1304).
  EXPECT_NEAR(a / (a + b), 0.25, 0.12) << a << " vs " << b;
}

TEST_F(ComputeSim, SharesAreWorkConserving) {
  // The 25% job stops half-way: the 75% job then gets the whole device. Each window's count
  // is taken relative to a free witness job's on the second simulated GPU, which sees the
  // same load on the machine.
  const auto rs = RunTogether({OnGpu(0, {{"GSLICE_SHARE", "25%"}}), OnGpu(0, {{"GSLICE_SHARE", "75%"}}), OnGpu(1)},
                              3.0, {{"--off-after", "1500"}, {}, {}});
  const double w_before = rs[2].Rate(200, 1500), w_after = rs[2].Rate(1700, 3000);
  ASSERT_GT(w_before, 0.1) << rs[2].raw;
  ASSERT_GT(w_after, 0.1) << rs[2].raw;
  const double b_before = rs[1].Rate(200, 1500) / w_before;
  const double b_after = rs[1].Rate(1700, 3000) / w_after;
  EXPECT_GT(b_after, b_before * 1.10) << rs[1].raw << "\nwitness " << rs[2].raw;
}

TEST_F(ComputeSim, OpportunisticYieldsToGuaranteed) {
  // The guaranteed job's solo speed is measured at the same time, alone on the second GPU.
  const auto all = RunTogether({OnGpu(1), OnGpu(0, {{"GSLICE_CLASS", "guaranteed"}}),
                                OnGpu(0, {{"GSLICE_CLASS", "opportunistic"}})}, 2.0);
  const Result& solo = all[0];
  const std::vector<Result> rs = {all[1], all[2]};
  const double g = static_cast<double>(rs[0].kernels), o = static_cast<double>(rs[1].kernels);
  EXPECT_GE(g, 0.85 * static_cast<double>(solo.kernels)) << "guaranteed " << g << " solo " << solo.kernels;
  EXPECT_LE(o, 0.10 * g) << "opportunistic " << o << " guaranteed " << g;
}

// On a GPU shared through MPS (GSLICE_SIM_MPS: kernels of different processes run at once,
// each one running slowing the others' kernels by a set percentage), opportunistic work runs
// beside busy guaranteed work, where on a time-sliced GPU it gets next to nothing
// (OpportunisticYieldsToGuaranteed), and the controller holds it back as far as the
// guaranteed job's progress needs.
// Processes of different slices keep their compute entries in their own slices' usage files;
// each gate maps the others' read-only (docs/ledger.md), so classes and shares still hold
// between slices.
TEST_F(ComputeSim, GatesOfDifferentSlicesSeeEachOther) {
  const auto all = RunTogether({OnGpu(1), OnGpu(0, {{"GSLICE_CLASS", "guaranteed"}, {"GSLICE_SLICE", "team-a"}}),
                                OnGpu(0, {{"GSLICE_CLASS", "opportunistic"}, {"GSLICE_SLICE", "team-b"}})}, 2.0);
  const Result& solo = all[0];
  const double g = static_cast<double>(all[1].kernels), o = static_cast<double>(all[2].kernels);
  EXPECT_GE(g, 0.85 * static_cast<double>(solo.kernels)) << "guaranteed " << g << " solo " << solo.kernels;
  EXPECT_LE(o, 0.10 * g) << "opportunistic " << o << " guaranteed " << g;
  const auto rs = RunTogether({{{"GSLICE_SHARE", "25%"}, {"GSLICE_SLICE", "team-a"}},
                               {{"GSLICE_SHARE", "75%"}, {"GSLICE_SLICE", "team-b"}}}, 3.0);
  const double a = static_cast<double>(rs[0].kernels), b = static_cast<double>(rs[1].kernels);
  ASSERT_GT(a + b, 200);
  // Shares unseen between the slices would split about evenly (0.5). Under the sanitizers, in a
  // full run on two cores, the turns gave 0.335 once (656 vs 1304).
  EXPECT_NEAR(a / (a + b), 0.25, 0.12) << a << " vs " << b;
}

TEST_F(ComputeSim, OpportunisticAloneLaunchesStraightThrough) {
  const auto busy_ns = [](const Result& r) {
    const size_t at = r.raw.find("busy_ns=");
    return at == std::string::npos ? -1LL : std::stoll(r.raw.substr(at + 8));
  };
  const auto alone = RunTogether({{{"GSLICE_CLASS", "opportunistic"}}}, 1.0);
  ASSERT_GT(alone[0].kernels, 0) << alone[0].raw;
  EXPECT_EQ(busy_ns(alone[0]), 0) << alone[0].raw;
  // The guaranteed job launches only in its last 100 ms: for the first 0.9 s it is there and idle.
  const auto beside = RunTogether({{{"GSLICE_CLASS", "guaranteed"}}, {{"GSLICE_CLASS", "opportunistic"}}}, 1.0,
                                  {{"--on-after", "900"}, {}});
  ASSERT_GT(beside[1].kernels, 0) << beside[1].raw;
  EXPECT_GT(busy_ns(beside[1]), 0) << beside[1].raw;
}

// The next three tests judge a job's speed after a change against a witness: a free job
// alone on the second simulated GPU over the same window, so that both see the same load on
// the machine (a 2-core machine's load can halve every job's speed from one second to the
// next, which a comparison with an earlier window would read as the change's effect).
TEST_F(ComputeSim, OpportunisticRegainsTheIdleDevice) {
  // Guaranteed work stops at 1.5 s; the opportunistic job must take the device over at once.
  const auto rs = ClassPairAndWitness(3.0, {"--off-after", "1500"});
  const double g_rate = rs[0].Rate(200, 1500);
  const double o_during = rs[1].Rate(200, 1500);
  // From 100 ms after the stop (the reaction bound) to the end.
  const double o_after = rs[1].Rate(1600, 3000);
  const double witness_after = rs[2].Rate(1600, 3000);
  ASSERT_GT(witness_after, 0.1) << rs[2].raw;
  // While guaranteed work runs, the rate controller may let a little opportunistic work in
  // (OpportunisticYieldsToGuaranteed pins the guaranteed job's speed); here only that it
  // is held well below the guaranteed rate, and regains the device after.
  EXPECT_LE(o_during, 0.25 * g_rate) << rs[1].raw;
  EXPECT_GE(o_after, 0.70 * witness_after) << "opportunistic " << rs[1].raw << "\nwitness " << rs[2].raw;
}

TEST_F(ComputeSim, GuaranteedTakesTheDeviceBackWhenItStarts) {
  const auto rs = ClassPairAndWitness(3.0, {"--on-after", "1500"});
  const double g_after = rs[0].Rate(1600, 3000);
  const double o_after = rs[1].Rate(1600, 3000);
  const double witness_after = rs[2].Rate(1600, 3000);
  ASSERT_GT(witness_after, 0.1) << rs[2].raw;
  EXPECT_GE(g_after, 0.70 * witness_after) << "guaranteed " << rs[0].raw << "\nwitness " << rs[2].raw;
  EXPECT_LE(o_after, 0.10 * g_after) << rs[1].raw;
}

// The same when the guaranteed process itself starts late: until then the opportunistic job
// has nothing to yield to and launches straight through; once the guaranteed process's
// context is up it is seen, and the opportunistic job yields as before.
TEST_F(ComputeSim, GuaranteedProcessStartingLateTakesTheDevice) {
  const double start_at = NowMs() + 800;
  Worker o = Start(OnGpu(0, {{"GSLICE_CLASS", "opportunistic"}}), Job(start_at, 3.0));
  Worker witness = Start(OnGpu(1), Job(start_at, 3.0));
  while (NowMs() < start_at + 700) usleep(10000);
  // Started 0.7 s into the opportunistic job's window; it launches from 1.5 s on.
  Worker g = Start(OnGpu(0, {{"GSLICE_CLASS", "guaranteed"}}), Job(start_at + 1500, 1.5));
  const Result ro = Wait(o);
  const Result rw = Wait(witness);
  const Result rg = Wait(g);
  ASSERT_GT(ro.kernels, 0) << ro.raw;
  ASSERT_GT(rg.kernels, 0) << rg.raw;
  const double g_after = rg.Rate(100, 1500);  // rg's window starts at 1.5 s
  const double o_after = ro.Rate(1600, 3000);
  const double witness_after = rw.Rate(1600, 3000);
  ASSERT_GT(witness_after, 0.1) << rw.raw;
  EXPECT_GE(g_after, 0.70 * witness_after) << "guaranteed " << rg.raw << "\nwitness " << rw.raw;
  EXPECT_LE(o_after, 0.10 * g_after) << "guaranteed " << rg.raw << "\nopportunistic " << ro.raw;
}

// On a time-sliced GPU the controller judges by the overlap: the time in which guaranteed
// work was queued while the opportunistic process had work queued too. Here guaranteed work
// starts after the opportunistic job has had the device to itself, then works in pulses
// (30 ms on, 20 ms off): the opportunistic job runs in the idle stretches, and guaranteed
// work coming back finds its work queued. The judged periods see that overlap, and no period
// can overlap for longer than the guaranteed work was busy. (The overlap at the start alone
// falls into the period in which the controller starts, which it does not judge, or into
// the next one, by the phase of its 250 ms periods: not something to test on.)
// GSLICE_LOG=debug prints every decision.
TEST_F(ComputeSim, TimeSlicedControllerMeasuresTheOverlap) {
  const double start_at = NowMs() + 800;
  Worker g = Start({{"GSLICE_CLASS", "guaranteed"}},
                   Job(start_at, 3.0, {"--on-after", "1000", "--pulse-on", "30", "--pulse-off", "20"}), /*direct=*/false);
  Worker o = StartProgram(std::string(GSLICE_TEST_BIN_DIR) + "/compute_worker",
                          UnderShim({{"GSLICE_CLASS", "opportunistic"}, {"GSLICE_LOG", "debug"}}), Job(start_at, 3.0),
                          /*stderr_too=*/true);
  const Result rg = Wait(g);
  const Result ro = Wait(o);
  ASSERT_GT(rg.kernels, 0) << rg.raw;
  ASSERT_GT(ro.kernels, 0) << ro.raw;
  EXPECT_NE(ro.raw.find("controller: guaranteed work busy"), std::string::npos) << ro.raw;
  // Its queue goes short when guaranteed work comes, and the trace names the peer's times.
  EXPECT_NE(ro.raw.find("compute: opportunistic queue short (guaranteed work near); entry "), std::string::npos) << ro.raw;
  int judged = 0;
  int64_t overlap_total = 0;
  std::istringstream lines(ro.raw);
  for (std::string line; std::getline(lines, line);) {
    long long busy_ms = 0, overlap_us = 0;
    const size_t at = line.find("guaranteed speed");
    if (at == std::string::npos) continue;
    double speed = 0;
    ASSERT_EQ(sscanf(line.c_str() + at, "guaranteed speed %lf (busy %lld ms, overlap %lld us)", &speed, &busy_ms, &overlap_us), 3)
        << line;
    ++judged;
    overlap_total += overlap_us;
    EXPECT_LE(overlap_us, busy_ms * 1000 + 1000) << line;
    EXPECT_NEAR(speed, busy_ms > 0 ? 1.0 - static_cast<double>(overlap_us) / (1000.0 * static_cast<double>(busy_ms)) : 1.0, 0.02)
        << line;
  }
  EXPECT_GE(judged, 3) << ro.raw;
  EXPECT_GT(overlap_total, 0) << "guaranteed work came back to queued opportunistic work\n" << ro.raw;
}

// A guaranteed slice's protection level, written into the ledger's limits file, is the floor
// that the opportunistic gate's controller keeps that slice's process at: its first decision
// of a busy stretch names it.
TEST_F(ComputeSim, TheProtectionLevelInTheLedgerReachesTheOpportunisticGate) {
  MakeSlice("protected", gslice::SliceClass::kGuaranteed, 800);
  const Result ro = GuaranteedBesideTracedOpportunistic("protected", 2.0);
  EXPECT_NE(ro.raw.find("controller: guaranteed work busy; rate 0 permille, gap 4000 us, floor 0.800"), std::string::npos)
      << ro.raw;
  EXPECT_EQ(ro.raw.find("floor 0.970"), std::string::npos) << ro.raw;
}

// A process's class counts only as far as its slice's in the limits file: a process of an
// opportunistic slice that calls itself guaranteed is not yielded to.
TEST_F(ComputeSim, AProcessCannotClaimAClassAboveItsSlices) {
  MakeSlice("batch", gslice::SliceClass::kOpportunistic, 0);
  const Result ro = GuaranteedBesideTracedOpportunistic("batch", 2.0);
  EXPECT_EQ(ro.raw.find("controller: guaranteed work busy"), std::string::npos) << ro.raw;
  EXPECT_GT(ro.kernels, 0) << ro.raw;
}

// `gslice set NAME --compute 30%` on a running program: gsliced writes the slice's cap word
// for the GPU into the ledger's limits file (Ledger::SetComputePolicy), and the program's gate,
// which started with no compute policy at all, follows it within a second; lifting the cap
// (a cap of 0: none) gives the GPU back. Each window's kernel rate is taken relative to a free
// witness job's on the other simulated GPU over the same window (the machine's load).
TEST_F(ComputeSim, ACapSetInTheLedgerReachesARunningProcess) {
  const std::string uuids = "GPU-00000000-0000-0000-0000-00000000aa00,GPU-00000000-0000-0000-0000-00000000aa01";
  const uint8_t uuid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xaa, 0x01};  // the second
  gslice::Ledger l;
  ASSERT_EQ(l.Open(ledger_.c_str()), gslice::LedgerError::kOk) << l.detail();
  int slice = -1, gpu = -1;
  ASSERT_EQ(l.FindOrCreateSlice("live", gslice::SliceClass::kGuaranteed, 0, &slice), gslice::LedgerError::kOk);
  ASSERT_EQ(l.FindOrAddGpu(slice, uuid, -1, &gpu), gslice::LedgerError::kOk);
  const double start_at = NowMs() + 800;
  Worker witness = Start(OnGpu(0, {{"GSLICE_SIM_UUIDS", uuids}}), Job(start_at, 6.0));
  Worker live = Start(OnGpu(1, {{"GSLICE_SIM_UUIDS", uuids}, {"GSLICE_SLICE", "live"}}), Job(start_at, 6.0));
  while (NowMs() < start_at + 1500) usleep(5000);
  l.SetComputePolicy(slice, gpu, gslice::kGpuPolicySet | 300, 0);
  while (NowMs() < start_at + 3500) usleep(5000);
  l.SetComputePolicy(slice, gpu, gslice::kGpuPolicySet | 0, 0);
  const Result w = Wait(witness);
  const Result r = Wait(live);
  ASSERT_GE(r.kernels, 0) << r.raw;
  ASSERT_GE(w.kernels, 0) << w.raw;
  const auto relative = [&](double from, double to) { return r.RateAgainst(w, from, to, 0.1); };
  const double before = relative(200, 1500);
  const double capped = relative(2500, 3500);  // from a second after the cap was set
  const double lifted = relative(4500, 6000);  // from a second after it was lifted
  const std::string counts = "live " + r.raw + "\nwitness " + w.raw;
  EXPECT_GT(before, 0.5) << counts;
  EXPECT_LT(capped, 0.6 * before) << counts;
  EXPECT_GT(capped, 0.05 * before) << counts;
  EXPECT_GT(lifted, 0.75 * before) << counts;
}

// `gslice set NAME --class opportunistic` on a running program: gsliced changes the slice's
// class in the ledger (Ledger::UpdateSlice); the program, which started guaranteed, yields to
// a guaranteed job on the same GPU within a second, and takes its turn again once the slice is
// guaranteed again.
TEST_F(ComputeSim, AClassChangeInTheLedgerReachesARunningProcess) {
  gslice::Ledger l;
  ASSERT_EQ(l.Open(ledger_.c_str()), gslice::LedgerError::kOk) << l.detail();
  int slice = -1;
  ASSERT_EQ(l.FindOrCreateSlice("live", gslice::SliceClass::kGuaranteed, 0, &slice), gslice::LedgerError::kOk);
  const gslice::LedgerSlice& entry = l.limits()->slices[slice];
  const auto set_class = [&](gslice::SliceClass cls) {
    ASSERT_EQ(l.UpdateSlice(slice, cls, entry.flags, entry.owner_uid, entry.protect_permille), gslice::LedgerError::kOk);
  };
  const double start_at = NowMs() + 800;
  Worker other = Start({{"GSLICE_CLASS", "guaranteed"}}, Job(start_at, 6.0));
  Worker live = Start({{"GSLICE_SLICE", "live"}}, Job(start_at, 6.0));
  while (NowMs() < start_at + 1500) usleep(5000);
  set_class(gslice::SliceClass::kOpportunistic);
  while (NowMs() < start_at + 3500) usleep(5000);
  set_class(gslice::SliceClass::kGuaranteed);
  const Result o = Wait(other);
  const Result r = Wait(live);
  ASSERT_GE(r.kernels, 0) << r.raw;
  ASSERT_GE(o.kernels, 0) << o.raw;
  const auto relative = [&](double from, double to) { return r.RateAgainst(o, from, to, 0.05); };
  const double before = relative(200, 1500);
  const double yielding = relative(2500, 3500);  // from a second after the change
  const double back = relative(4500, 6000);      // from a second after the change back
  const std::string counts = "live " + r.raw + "\nguaranteed " + o.raw;
  EXPECT_GT(before, 0.3) << counts;
  EXPECT_LT(yielding, 0.3 * before) << counts;
  EXPECT_GT(back, 0.6 * before) << counts;
}

// `gslice set NAME --share 25%` on a running program: its slice's share word for the GPU in the
// ledger changes its weight against a peer taking turns with it (50%) within a second: from
// the default weight (1000:500, the program ahead) to 250:500 (the peer ahead).
TEST_F(ComputeSim, AShareSetInTheLedgerReachesARunningProcess) {
  const std::string uuids = "GPU-00000000-0000-0000-0000-00000000bb00";
  const uint8_t uuid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xbb, 0x00};
  gslice::Ledger l;
  ASSERT_EQ(l.Open(ledger_.c_str()), gslice::LedgerError::kOk) << l.detail();
  int slice = -1, gpu = -1;
  ASSERT_EQ(l.FindOrCreateSlice("live", gslice::SliceClass::kGuaranteed, 0, &slice), gslice::LedgerError::kOk);
  ASSERT_EQ(l.FindOrAddGpu(slice, uuid, -1, &gpu), gslice::LedgerError::kOk);
  const double start_at = NowMs() + 800;
  Worker other = Start({{"GSLICE_SIM_UUIDS", uuids}, {"GSLICE_SHARE", "50%"}}, Job(start_at, 4.0));
  Worker live = Start({{"GSLICE_SIM_UUIDS", uuids}, {"GSLICE_SLICE", "live"}}, Job(start_at, 4.0));
  while (NowMs() < start_at + 1500) usleep(5000);
  l.SetComputePolicy(slice, gpu, 0, gslice::kGpuPolicySet | 250);
  const Result o = Wait(other);
  const Result r = Wait(live);
  ASSERT_GE(r.kernels, 0) << r.raw;
  ASSERT_GE(o.kernels, 0) << o.raw;
  const auto relative = [&](double from, double to) { return r.RateAgainst(o, from, to, 0.05); };
  const double before = relative(200, 1500);
  const double after = relative(2500, 4000);  // from a second after the change
  const std::string counts = "live " + r.raw + "\nshare 50% " + o.raw;
  EXPECT_GT(before, 1.2) << counts;
  // The weights ask for a quarter of before's ratio (2.0 to 0.5); a share that never reached the
  // process leaves it where it was. On a loaded 2-core machine under the sanitizers the turns
  // gave 0.62 of before once, so the bound is 0.7 of it.
  EXPECT_LT(after, 0.7 * before) << counts;
}

TEST_F(ComputeSim, DeadGuaranteedNeverStallsOpportunistic) {
  const double start_at = NowMs() + 800;
  Worker g = Start({{"GSLICE_CLASS", "guaranteed"}}, Job(start_at, 3.0));
  Worker o = Start({{"GSLICE_CLASS", "opportunistic"}}, Job(start_at, 3.0));
  while (NowMs() < start_at + 1000) usleep(10000);
  kill(g.pid, SIGKILL);  // mid-run, with kernels queued
  Wait(g);
  const Result r = Wait(o);
  ASSERT_GE(r.kernels, 0) << r.raw;
  const double during = static_cast<double>(r.Between(200, 1000));
  const double after = r.Rate(1500, 3000) * 800.0;  // per 800 ms
  EXPECT_GT(after, 4.0 * (during + 10)) << r.raw;
}

TEST_F(ComputeSim, DeadSharePeerNeverStallsTheOther) {
  const double start_at = NowMs() + 800;
  Worker a = Start(OnGpu(0, {{"GSLICE_SHARE", "50%"}}), Job(start_at, 3.0));
  Worker b = Start(OnGpu(0, {{"GSLICE_SHARE", "50%"}}), Job(start_at, 3.0));
  Worker witness = Start(OnGpu(1), Job(start_at, 3.0));  // the machine's load, as in the tests above
  while (NowMs() < start_at + 1000) usleep(10000);
  kill(a.pid, SIGKILL);
  Wait(a);
  const Result r = Wait(b);
  const Result w = Wait(witness);
  ASSERT_GE(r.kernels, 0) << r.raw;
  const double w_before = w.Rate(200, 1000), w_after = w.Rate(1500, 3000);
  ASSERT_GT(w_before, 0.1) << w.raw;
  ASSERT_GT(w_after, 0.1) << w.raw;
  const double before = r.Rate(200, 1000) / w_before;
  const double after = r.Rate(1500, 3000) / w_after;
  EXPECT_GT(after, 1.4 * before) << r.raw << "\nwitness " << w.raw;
}

}  // namespace

namespace {

// The same rules end to end: unmodified programs under the libcuda.so.1 shim.
// A cap is the slice's, not each process's: two processes of one slice capped at 30% get at
// most 30% of the GPU between them (they charge one shared GCRA word in the ledger), and the
// pair is not starved by the shared charge. How close the pair comes to a single process of
// such a slice depends on the machine's load (the simulated GPU time-slices processes, and a
// busy 2-core machine stretches each one's measured time), so only starvation is pinned
// here: at least half of what one process gets.
TEST_F(ComputeSim, CapHoldsForTheSliceAcrossItsProcesses) {
  auto slice = [](const char* name) {
    return std::map<std::string, std::string>{
        // Room for both processes' contexts (GSLICE_CONTEXT_OVERHEAD, 600 MiB each by default).
        {"GSLICE_COMPUTE", "30%"}, {"GSLICE_SLICE", name}, {"GSLICE_MEMORY", "2GiB"}};
  };
  const auto rs = RunTogether({OnGpu(0, {}, 3), OnGpu(1, slice("capped-one"), 3), OnGpu(2, slice("capped-pair"), 3),
                               OnGpu(2, slice("capped-pair"), 3)},
                              2.5, {}, /*direct=*/false);
  const double free = static_cast<double>(rs[0].kernels);
  const double one = static_cast<double>(rs[1].kernels);
  const double both = static_cast<double>(rs[2].kernels + rs[3].kernels);
  ASSERT_GT(free, 200) << rs[0].raw;
  const std::string counts = "free " + std::to_string(rs[0].kernels) + ", one process " + std::to_string(rs[1].kernels) +
                             ", two processes " + std::to_string(rs[2].kernels) + " + " + std::to_string(rs[3].kernels);
  EXPECT_LE(both / free, 0.30 + 0.08) << counts;
  EXPECT_LE(one / free, 0.30 + 0.08) << counts;
  EXPECT_GE(both / one, 0.5) << counts;
  EXPECT_GT(rs[2].kernels, 0) << rs[2].raw;
  EXPECT_GT(rs[3].kernels, 0) << rs[3].raw;
}

TEST_F(ComputeSim, ThroughTheShimCapAndClassesHold) {
  const auto pair = RunTogether({OnGpu(0), OnGpu(1, {{"GSLICE_COMPUTE", "50%"}})}, 2.0, {}, /*direct=*/false);
  const Result& free = pair[0];
  const Result& capped = pair[1];
  ASSERT_GT(free.kernels, 150) << free.raw;
  const double share = static_cast<double>(capped.kernels) / static_cast<double>(free.kernels);
  EXPECT_LE(share, 0.50 + 0.08) << capped.kernels << " vs " << free.kernels;
  EXPECT_GE(share, 0.50 * 0.5) << capped.kernels << " vs " << free.kernels;
  const auto rs = ClassPairAndWitness(2.0, {"--off-after", "1000"}, /*direct=*/false);
  // That the classes reach the gate through the shim: the opportunistic job mostly yields,
  // then takes the device over. The precise yield and regain figures are the direct tests'
  // (OpportunisticYieldsToGuaranteed, OpportunisticRegainsTheIdleDevice); the margins here
  // allow for a 2-core machine running other tests at once, where rates move (a fresh-clone
  // CI run saw the opportunistic job take the device back at once and then run at 0.65 of
  // the guaranteed job's earlier rate, its 50 ms counts moving between 12 and 32 with the
  // other tests' load). The regain is judged against a free witness job on the second
  // simulated GPU over the same window.
  const double g_rate = rs[0].Rate(200, 1000);
  const double witness_after = rs[2].Rate(1100, 2000);
  ASSERT_GT(witness_after, 0.1) << rs[2].raw;
  EXPECT_LE(rs[1].Rate(200, 1000), 0.15 * g_rate) << rs[1].raw;
  EXPECT_GE(rs[1].Rate(1100, 2000), 0.50 * witness_after)
      << "opportunistic " << rs[1].raw << "\nwitness " << rs[2].raw;
}

// Work on the default streams runs at the class's stream priority: a guaranteed process's
// legacy-stream and per-thread-stream kernels run at the device's greatest priority, on the
// streams the application put them on (so in order with the copies, memsets, event records,
// blocking streams and per-thread streams around them). Without a class, and for
// opportunistic work (whose least priority the default streams already have), nothing
// changes, nor with GSLICE_STREAM_PRIORITY=program. The simulated driver traces each launch's
// stream and priority.
TEST_F(ComputeSim, DefaultStreamWorkRunsAtTheClassPriority) {
  const std::string check = std::string(GSLICE_TEST_BIN_DIR) + "/gslice_default_stream_check";
  auto run = [&](const char* cls, const char* cap = "", const char* stream_priority = nullptr) {
    std::map<std::string, std::string> env = UnderShim({{"GSLICE_SIM_TRACE_LAUNCHES", "1"}});
    if (cls[0] != '\0') env["GSLICE_CLASS"] = cls;
    if (cap[0] != '\0') env["GSLICE_COMPUTE"] = cap;
    if (stream_priority != nullptr) env["GSLICE_STREAM_PRIORITY"] = stream_priority;
    Worker w = StartProgram(check, env, {"order"}, /*stderr_too=*/true);
    const std::string out = Wait(w).raw;
    // The gate's markers of a destroyed or reset context are never used again.
    EXPECT_EQ(out.find("after its context was destroyed"), std::string::npos) << cls << " " << cap << "\n" << out;
    return out;
  };
  auto count = [](const std::string& out, const std::string& what) {
    size_t n = 0;
    for (size_t p = out.find(what); p != std::string::npos; p = out.find(what, p + 1)) ++n;
    return n;
  };
  const std::string guaranteed = run("guaranteed");
  ASSERT_NE(guaranteed.find("order ok"), std::string::npos) << guaranteed;
  // 42 fills and 61 busy kernels on the legacy stream, the blocking stream's two, the
  // per-thread stream's two, one on each of two later contexts' legacy streams, one before
  // and one after the primary context's reset: all at the greatest priority, none moved.
  EXPECT_EQ(count(guaranteed, "stream=legacy priority=-5"), 107u) << guaranteed;
  EXPECT_EQ(count(guaranteed, "stream=user priority=-5"), 2u) << guaranteed;
  EXPECT_EQ(count(guaranteed, "stream=per-thread priority=-5"), 2u) << guaranteed;
  EXPECT_EQ(count(guaranteed, "priority=0"), 0u) << guaranteed;
  // A value other than class or program: the class's priorities, and a warning.
  const std::string unknown = run("guaranteed", "", "highest");
  EXPECT_EQ(count(unknown, "stream=legacy priority=-5"), 107u) << unknown;
  EXPECT_NE(unknown.find("GSLICE_STREAM_PRIORITY=highest: not class or program"), std::string::npos) << unknown;
  // GSLICE_STREAM_PRIORITY=program: guaranteed work keeps the priorities the program asks for,
  // its default streams at 0.
  const std::string program = run("guaranteed", "", "program");
  ASSERT_NE(program.find("order ok"), std::string::npos) << program;
  EXPECT_EQ(count(program, "stream=legacy priority=0"), 107u) << program;
  EXPECT_EQ(count(program, "stream=user priority=0"), 2u) << program;
  EXPECT_EQ(count(program, "stream=per-thread priority=0"), 2u) << program;
  EXPECT_EQ(count(program, "priority=-5"), 0u) << program;
  const std::string capped = run("", "50%");
  ASSERT_NE(capped.find("order ok"), std::string::npos) << capped;
  for (const char* cls : {"", "opportunistic"}) {
    const std::string out = run(cls);
    ASSERT_NE(out.find("order ok"), std::string::npos) << out;
    EXPECT_EQ(count(out, "stream=legacy priority=0"), 107u) << out;
    EXPECT_EQ(count(out, "stream=user priority=0"), 2u) << out;
    EXPECT_EQ(count(out, "stream=per-thread priority=0"), 2u) << out;
    EXPECT_EQ(count(out, "priority=-5"), 0u) << out;
  }
}

// `gslice set NAME --class opportunistic` on a running program reaches all the class decides,
// not only the gate: streams it creates afterwards get the opportunistic priority (the
// device's least), and its legacy default stream goes back to it, where both were at the
// greatest while the slice was guaranteed. The simulated driver traces each launch's priority.
TEST_F(ComputeSim, AClassChangeReachesNewStreamsAndTheDefaultStream) {
  gslice::Ledger l;
  ASSERT_EQ(l.Open(ledger_.c_str()), gslice::LedgerError::kOk) << l.detail();
  int slice = -1;
  ASSERT_EQ(l.FindOrCreateSlice("live", gslice::SliceClass::kGuaranteed, 0, &slice), gslice::LedgerError::kOk);
  const gslice::LedgerSlice& entry = l.limits()->slices[slice];
  const std::string ready = ledger_ + "-ready", go = ledger_ + "-go";
  Worker w = StartProgram(std::string(GSLICE_TEST_BIN_DIR) + "/gslice_default_stream_check",
                          UnderShim({{"GSLICE_SLICE", "live"},
                                     {"GSLICE_CLASS", "guaranteed"},
                                     {"GSLICE_SIM_TRACE_LAUNCHES", "1"}}),
                          {"follow", ready, go}, /*stderr_too=*/true);
  for (int i = 0; i < 2000 && access(ready.c_str(), F_OK) != 0; ++i) usleep(10'000);
  ASSERT_EQ(l.UpdateSlice(slice, gslice::SliceClass::kOpportunistic, entry.flags, entry.owner_uid,
                          entry.protect_permille),
            gslice::LedgerError::kOk);
  std::ofstream(go).put('\n');
  const std::string out = Wait(w).raw;
  unlink(ready.c_str());
  unlink(go.c_str());
  EXPECT_NE(out.find("first=-5 then=0 "), std::string::npos) << out;
  const size_t last = out.rfind("stream=legacy priority=");
  ASSERT_NE(last, std::string::npos) << out;
  EXPECT_EQ(out.compare(last, 25, "stream=legacy priority=0\n"), 0) << out;
  EXPECT_NE(out.find("stream=legacy priority=-5"), std::string::npos) << out;
}

// The shim asks MPS for below-normal priority for opportunistic processes (the variable is
// read when the driver connects to an MPS server); a value the user set is kept.
TEST_F(ComputeSim, ShimAsksMpsForLowPriorityForOpportunisticWork) {
  const auto rs = RunTogether({{{"GSLICE_CLASS", "opportunistic"}},
                               {{"GSLICE_CLASS", "guaranteed"}},
                               {{"GSLICE_CLASS", "opportunistic"}, {"CUDA_MPS_CLIENT_PRIORITY", "0"}}},
                              0.3, {}, /*direct=*/false);
  EXPECT_NE(rs[0].raw.find("mps_client_priority=1 "), std::string::npos) << rs[0].raw;
  EXPECT_NE(rs[1].raw.find("mps_client_priority=- "), std::string::npos) << rs[1].raw;
  EXPECT_NE(rs[2].raw.find("mps_client_priority=0 "), std::string::npos) << rs[2].raw;
}

}  // namespace

namespace {

// `gslice run --cap/--share/--class` sets the policy the shim's gate enforces.
TEST_F(ComputeSim, GsliceRunFlagsReachTheGate) {
  const std::string gslice = std::string(GSLICE_TEST_BIN_DIR) + "/gslice";
  const std::string worker = std::string(GSLICE_TEST_BIN_DIR) + "/compute_worker";
  std::map<std::string, std::string> env = {{"GSLICE_SIM_DEVICES", "2"}};
  if (!AsanFirst().empty()) env["LD_PRELOAD"] = GSLICE_TEST_ASAN_RUNTIME;
  const double start_at = NowMs() + 800;
  auto start = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = {"run", "--sim", "--memory", "1GiB"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.push_back("--");
    args.push_back(worker);
    for (auto& a : Job(start_at, 2.0)) args.push_back(a);
    return StartProgram(gslice, env, args);
  };
  // Side by side on the two simulated GPUs.
  const Worker free_worker = start({"--gpus", "0"});
  const Worker capped_worker = start({"--gpus", "1", "--cap", "40%"});
  const Result free = Wait(free_worker);
  const Result capped = Wait(capped_worker);
  ASSERT_GT(free.kernels, 150) << free.raw;
  const double share = static_cast<double>(capped.kernels) / static_cast<double>(free.kernels);
  EXPECT_LE(share, 0.40 + 0.07) << capped.kernels << " vs " << free.kernels;
  EXPECT_GE(share, 0.40 * 0.5) << capped.kernels << " vs " << free.kernels;
}

TEST_F(ComputeSim, GsliceRunRejectsBadComputeFlags) {
  const std::string gslice = std::string(GSLICE_TEST_BIN_DIR) + "/gslice";
  for (std::vector<std::string> flags : {std::vector<std::string>{"--cap", "150%"},
                                         std::vector<std::string>{"--share", "lots"},
                                         std::vector<std::string>{"--class", "best-effort"}}) {
    std::vector<std::string> args = {"run", "--sim", "--memory", "1GiB"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", "true"});
    const Result r = Wait(StartProgram(gslice, {}, args, /*stderr_too=*/true));
    EXPECT_EQ(r.kernels, -1);
    EXPECT_NE(r.raw.find(flags[0]), std::string::npos) << r.raw;
    EXPECT_NE(r.raw.find(flags[1]), std::string::npos) << r.raw;
  }
  // --compute, the old name of --cap, is read as the cap for one release, with a warning.
  const Result old = Wait(StartProgram(gslice, {}, {"run", "--sim", "--memory", "1GiB", "--compute", "150%", "--", "true"},
                                       /*stderr_too=*/true));
  EXPECT_NE(old.raw.find("--compute is now --cap"), std::string::npos) << old.raw;
  EXPECT_NE(old.raw.find("--cap 150%"), std::string::npos) << old.raw;
}

}  // namespace

}  // namespace gslice::compute_sim
