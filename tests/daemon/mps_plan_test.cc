// The MPS plan (daemon/mps_plan.h) on synthetic GPUs and slices: which GPUs serve MPS, which
// uid (and, under mps_classes "one", which class) each gives it to, and that no slice is ever
// put on a server of another uid, nor beside a slice of the other class under "one".
#include "mps_plan.h"

#include <gtest/gtest.h>

#include <optional>
#include <set>

#include "gslice/nvml_subset.h"

namespace gslice {
namespace {

GpuSharing Serving(unsigned index = 0) {
  return DecideGpuSharing(MpsMode::kAuto, true, "nvidia-cuda-mps-control", NVML_COMPUTEMODE_DEFAULT, index, true, "");
}

// A GPU given to `tenant` (-1: no one) for its slices of class `cls` (nullopt: both).
MpsGpuState Gpu(const std::string& uuid, unsigned index = 0, int64_t tenant = -1, int64_t busy = -1,
                std::optional<SliceClass> cls = SliceClass::kGuaranteed) {
  return {.uuid = uuid,
          .index = index,
          .sharing = Serving(index),
          .tenant_uid = tenant,
          .tenant_class = tenant >= 0 ? cls : std::nullopt,
          .busy_uid = busy};
}

constexpr SliceClass kGuaranteed = SliceClass::kGuaranteed, kOpportunistic = SliceClass::kOpportunistic;

MpsCandidate Slice(const std::string& name, int64_t uid, std::vector<std::string> gpus, int64_t created_at,
                   bool deleted = false, SliceClass cls = kGuaranteed) {
  return {.slice = name,
          .uid = uid,
          .gpus = std::move(gpus),
          .created_at = created_at,
          .deleted = deleted,
          .slice_class = cls};
}

MpsCandidate Opportunistic(const std::string& name, int64_t uid, const std::string& gpu, int64_t created_at,
                           bool deleted = false) {
  return Slice(name, uid, {gpu}, created_at, deleted, kOpportunistic);
}

MpsPlan Plan(const std::vector<MpsGpuState>& gpus, const std::vector<MpsCandidate>& slices,
             MpsClasses classes = MpsClasses::kOne) {
  return PlanMps(gpus, slices, classes);
}

// What the service does with a plan (mps_service.h, Hand): gives each GPU to its planned uid
// and class, unless a busy server of another uid stops it.
void Hand(const MpsPlan& plan, std::vector<MpsGpuState>* gpus) {
  for (MpsGpuState& g : *gpus) {
    const GpuSharing& target = plan.gpus.at(g.uuid);
    if (g.busy_uid < 0 || g.busy_uid == target.tenant_uid) {
      g.tenant_uid = target.tenant_uid;
      g.tenant_class = target.tenant_uid >= 0 ? target.tenant_class : std::nullopt;
    }
  }
}

// The plan once the service has given each GPU to its tenant (where no busy server stops it).
MpsPlan Settle(std::vector<MpsGpuState> gpus, const std::vector<MpsCandidate>& slices,
               MpsClasses classes = MpsClasses::kOne) {
  Hand(PlanMps(gpus, slices, classes), &gpus);
  return PlanMps(gpus, slices, classes);
}

bool OnMps(const MpsPlan& plan, const std::string& slice, const std::string& gpu) {
  auto it = plan.slices.find({slice, gpu});
  return it != plan.slices.end() && it->second.mps;
}

std::string Why(const MpsPlan& plan, const std::string& slice, const std::string& gpu) {
  auto it = plan.slices.find({slice, gpu});
  return it == plan.slices.end() ? "(not planned)" : it->second.why;
}

TEST(MpsPlan, ParsesItsModes) {
  MpsMode m = MpsMode::kOff;
  EXPECT_TRUE(ParseMpsMode("auto", &m));
  EXPECT_EQ(m, MpsMode::kAuto);
  EXPECT_TRUE(ParseMpsMode("on", &m));
  EXPECT_EQ(m, MpsMode::kOn);
  EXPECT_TRUE(ParseMpsMode("off", &m));
  EXPECT_EQ(m, MpsMode::kOff);
  EXPECT_FALSE(ParseMpsMode("yes", &m));
  EXPECT_EQ(ToString(MpsMode::kAuto), "auto");
}

TEST(MpsPlan, AGpuServesOnlyWhereEverythingAllowsIt) {
  EXPECT_TRUE(Serving().mps);
  EXPECT_EQ(Serving().reason, "serving");

  GpuSharing off = DecideGpuSharing(MpsMode::kOff, true, "mps", NVML_COMPUTEMODE_DEFAULT, 0, true, "");
  EXPECT_FALSE(off.mps);
  EXPECT_EQ(off.reason, "mps-off");

  GpuSharing missing = DecideGpuSharing(MpsMode::kAuto, false, "nvidia-cuda-mps-control", NVML_COMPUTEMODE_DEFAULT, 0,
                                        false, "");
  EXPECT_FALSE(missing.mps);
  EXPECT_EQ(missing.reason, "no-control");
  EXPECT_NE(missing.why.find("nvidia-cuda-mps-control"), std::string::npos) << missing.why;

  // EXCLUSIVE_PROCESS would let the MPS server's uid alone use the GPU; unknown is not DEFAULT.
  for (int mode : {static_cast<int>(NVML_COMPUTEMODE_EXCLUSIVE_PROCESS), static_cast<int>(NVML_COMPUTEMODE_PROHIBITED),
                   -1}) {
    GpuSharing g = DecideGpuSharing(MpsMode::kOn, true, "mps", mode, 2, true, "");
    EXPECT_FALSE(g.mps) << mode;
    EXPECT_EQ(g.reason, "compute-mode");
    EXPECT_NE(g.why.find("nvidia-smi -i 2 -c DEFAULT"), std::string::npos) << g.why;
  }
  GpuSharing exclusive = DecideGpuSharing(MpsMode::kOn, true, "mps", NVML_COMPUTEMODE_EXCLUSIVE_PROCESS, 0, true, "");
  EXPECT_NE(exclusive.why.find("EXCLUSIVE_PROCESS"), std::string::npos) << exclusive.why;

  GpuSharing down = DecideGpuSharing(MpsMode::kAuto, true, "mps", NVML_COMPUTEMODE_DEFAULT, 1, false, "it exited");
  EXPECT_FALSE(down.mps);
  EXPECT_EQ(down.reason, "daemon-down");
  EXPECT_NE(down.why.find("it exited"), std::string::npos) << down.why;
}

TEST(MpsPlan, OneUserOnAGpuGetsMpsForAllItsSlices) {
  // Planned for uid 1000, but not on MPS before the service has given the GPU to it.
  MpsPlan before = Plan({Gpu("GPU-a")}, {Slice("train", 1000, {"GPU-a"}, 10)});
  EXPECT_EQ(before.gpus["GPU-a"].tenant_uid, 1000);
  EXPECT_FALSE(OnMps(before, "train", "GPU-a"));
  MpsPlan plan = Settle({Gpu("GPU-a")}, {Slice("train", 1000, {"GPU-a"}, 10), Slice("infer", 1000, {"GPU-a"}, 20)});
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_uid, 1000);
  EXPECT_TRUE(OnMps(plan, "train", "GPU-a"));
  EXPECT_TRUE(OnMps(plan, "infer", "GPU-a"));
}

TEST(MpsPlan, ASecondUserOnTheGpuIsTimeSlicedAndToldWhy) {
  MpsPlan plan = Settle({Gpu("GPU-a")}, {Slice("alice", 1000, {"GPU-a"}, 10), Slice("bob", 1001, {"GPU-a"}, 20)});
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_uid, 1000) << plan.gpus["GPU-a"].tenant_why;
  EXPECT_TRUE(OnMps(plan, "alice", "GPU-a"));
  EXPECT_FALSE(OnMps(plan, "bob", "GPU-a"));
  EXPECT_NE(Why(plan, "bob", "GPU-a").find("serves uid 1000"), std::string::npos) << Why(plan, "bob", "GPU-a");
  EXPECT_NE(Why(plan, "bob", "GPU-a").find("wait at CUDA initialisation"), std::string::npos);
}

TEST(MpsPlan, EachGpuHasItsOwnTenant) {
  MpsPlan plan = Settle({Gpu("GPU-a", 0), Gpu("GPU-b", 1)},
                        {Slice("alice", 1000, {"GPU-a"}, 10), Slice("bob", 1001, {"GPU-b"}, 20)});
  EXPECT_TRUE(OnMps(plan, "alice", "GPU-a"));
  EXPECT_TRUE(OnMps(plan, "bob", "GPU-b"));
}

TEST(MpsPlan, TheTenantStaysWhileItHoldsTheGpuEvenWhenAnOlderSliceAppears) {
  // alice took the GPU first; an older slice of bob found later (adopted) does not take it from her.
  MpsPlan plan = Plan({Gpu("GPU-a", 0, /*tenant=*/1000)},
                         {Slice("bob", 1001, {"GPU-a"}, 5), Slice("alice", 1000, {"GPU-a"}, 10)});
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_uid, 1000);
  EXPECT_TRUE(OnMps(plan, "alice", "GPU-a"));
  EXPECT_FALSE(OnMps(plan, "bob", "GPU-a"));
}

TEST(MpsPlan, ADeletedSliceWhoseProcessesRunKeepsItsUidTheTenant) {
  MpsPlan plan = Plan({Gpu("GPU-a", 0, 1000)},
                         {Slice("alice", 1000, {"GPU-a"}, 10, /*deleted=*/true), Slice("bob", 1001, {"GPU-a"}, 20)});
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_uid, 1000);
  EXPECT_FALSE(OnMps(plan, "bob", "GPU-a"));
  // A deleted slice never takes a free GPU.
  MpsPlan free = Plan({Gpu("GPU-a")}, {Slice("alice", 1000, {"GPU-a"}, 10, true), Slice("bob", 1001, {"GPU-a"}, 20)});
  EXPECT_EQ(free.gpus["GPU-a"].tenant_uid, 1001);
}

TEST(MpsPlan, ClientsOfAServerWithoutSlicesKeepOthersOff) {
  // alice's slices are gone, but programs of hers still used the server when the service tried
  // to give the GPU to bob: bob's slice is planned for it but runs time-sliced meanwhile.
  MpsPlan plan = Plan({Gpu("GPU-a", 0, /*tenant=*/-1, /*busy=*/1000)}, {Slice("bob", 1001, {"GPU-a"}, 20)});
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_uid, 1001) << plan.gpus["GPU-a"].tenant_why;
  EXPECT_NE(plan.gpus["GPU-a"].tenant_why.find("uid 1000"), std::string::npos) << plan.gpus["GPU-a"].tenant_why;
  EXPECT_FALSE(OnMps(plan, "bob", "GPU-a"));
  EXPECT_NE(Why(plan, "bob", "GPU-a").find("programs of uid 1000 still use"), std::string::npos)
      << Why(plan, "bob", "GPU-a");
  // Once the service has given it to bob, bob is on it.
  MpsPlan after = Plan({Gpu("GPU-a", 0, 1001)}, {Slice("bob", 1001, {"GPU-a"}, 20)});
  EXPECT_TRUE(OnMps(after, "bob", "GPU-a"));
}

TEST(MpsPlan, ASliceOverSeveralGpusOrOfAnUnknownUidIsTimeSliced) {
  MpsPlan plan = Plan({Gpu("GPU-a", 0), Gpu("GPU-b", 1)},
                         {Slice("wide", 1000, {"GPU-a", "GPU-b"}, 10), Slice("nobody-knows", -1, {"GPU-a"}, 20)});
  EXPECT_FALSE(OnMps(plan, "wide", "GPU-a"));
  EXPECT_FALSE(OnMps(plan, "wide", "GPU-b"));
  EXPECT_NE(Why(plan, "wide", "GPU-a").find("over 2 GPUs"), std::string::npos);
  EXPECT_FALSE(OnMps(plan, "nobody-knows", "GPU-a"));
  EXPECT_NE(Why(plan, "nobody-knows", "GPU-a").find("does not know the uid"), std::string::npos);
  // Neither makes a tenant.
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_uid, -1);
}

TEST(MpsPlan, AGpuThatDoesNotServeGivesEverySliceItsReason) {
  MpsGpuState g = Gpu("GPU-a", 0, 1000);
  g.sharing = DecideGpuSharing(MpsMode::kOff, true, "mps", NVML_COMPUTEMODE_DEFAULT, 0, false, "");
  MpsPlan plan = Plan({g}, {Slice("alice", 1000, {"GPU-a"}, 10)});
  EXPECT_FALSE(OnMps(plan, "alice", "GPU-a"));
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_uid, -1);
  EXPECT_EQ(Why(plan, "alice", "GPU-a"), g.sharing.why);
}

TEST(MpsPlan, ParsesItsClasses) {
  MpsClasses c = MpsClasses::kMixed;
  EXPECT_TRUE(ParseMpsClasses("one", &c));
  EXPECT_EQ(c, MpsClasses::kOne);
  EXPECT_TRUE(ParseMpsClasses("mixed", &c));
  EXPECT_EQ(c, MpsClasses::kMixed);
  EXPECT_FALSE(ParseMpsClasses("both", &c));
  EXPECT_EQ(ToString(MpsClasses::kOne), "one");
}

// A fault of one MPS client ends every client of its server: under "one" the tenant uid's
// opportunistic slice never shares the server with its guaranteed one.
TEST(MpsPlan, TheOtherClassOfTheTenantUidIsTimeSlicedAndToldWhy) {
  MpsPlan plan = Settle({Gpu("GPU-a")}, {Slice("train", 1000, {"GPU-a"}, 10), Opportunistic("batch", 1000, "GPU-a", 20)});
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_uid, 1000);
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_class, kGuaranteed) << plan.gpus["GPU-a"].tenant_why;
  EXPECT_NE(plan.gpus["GPU-a"].tenant_why.find("guaranteed"), std::string::npos) << plan.gpus["GPU-a"].tenant_why;
  EXPECT_TRUE(OnMps(plan, "train", "GPU-a"));
  EXPECT_FALSE(OnMps(plan, "batch", "GPU-a"));
  const std::string why = Why(plan, "batch", "GPU-a");
  EXPECT_NE(why.find("its faults would end the guaranteed work on that server (docs/compute.md, Faults)"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("time-sliced"), std::string::npos) << why;
  EXPECT_NE(why.find("until it starts again"), std::string::npos) << why;

  // The oldest slice is opportunistic: the server is its class's, and the guaranteed slice
  // stays off it.
  MpsPlan other = Settle({Gpu("GPU-a")}, {Opportunistic("batch", 1000, "GPU-a", 5), Slice("train", 1000, {"GPU-a"}, 10)});
  EXPECT_EQ(other.gpus["GPU-a"].tenant_class, kOpportunistic);
  EXPECT_TRUE(OnMps(other, "batch", "GPU-a"));
  EXPECT_FALSE(OnMps(other, "train", "GPU-a"));
  EXPECT_NE(Why(other, "train", "GPU-a").find("a fault of theirs would end its guaranteed work"), std::string::npos)
      << Why(other, "train", "GPU-a");
}

TEST(MpsPlan, TheClassStaysWhileAnySliceOfItIsThereThenPassesOn) {
  // Given to uid 1000's opportunistic slices; an older guaranteed slice found later does not
  // take the server from them.
  std::vector<MpsGpuState> gpus = {Gpu("GPU-a", 0, 1000, -1, kOpportunistic)};
  std::vector<MpsCandidate> slices = {Slice("train", 1000, {"GPU-a"}, 5), Opportunistic("batch", 1000, "GPU-a", 10)};
  MpsPlan plan = Plan(gpus, slices);
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_class, kOpportunistic);
  EXPECT_TRUE(OnMps(plan, "batch", "GPU-a"));
  EXPECT_FALSE(OnMps(plan, "train", "GPU-a"));
  // Deleted while its programs run, the opportunistic slice still holds it.
  slices[1].deleted = true;
  plan = Plan(gpus, slices);
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_class, kOpportunistic) << plan.gpus["GPU-a"].tenant_why;
  EXPECT_FALSE(OnMps(plan, "train", "GPU-a"));
  // Once its programs are gone too, the guaranteed slice takes the server, at once: the uid
  // does not change, so nothing waits at CUDA initialisation.
  slices.pop_back();
  plan = Plan(gpus, slices);
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_uid, 1000);
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_class, kGuaranteed);
  EXPECT_FALSE(OnMps(plan, "train", "GPU-a"));  // not before the service has handed it on
  EXPECT_NE(Why(plan, "train", "GPU-a").find("being given to the guaranteed slices of uid 1000"), std::string::npos)
      << Why(plan, "train", "GPU-a");
  Hand(plan, &gpus);
  EXPECT_TRUE(OnMps(Plan(gpus, slices), "train", "GPU-a"));
}

TEST(MpsPlan, AClassChangeMovesASliceAtTheNextPlan) {
  std::vector<MpsGpuState> gpus = {Gpu("GPU-a")};
  std::vector<MpsCandidate> slices = {Slice("train", 1000, {"GPU-a"}, 10), Slice("infer", 1000, {"GPU-a"}, 20)};
  Hand(Plan(gpus, slices), &gpus);
  EXPECT_TRUE(OnMps(Plan(gpus, slices), "infer", "GPU-a"));
  slices[1].slice_class = kOpportunistic;  // gslice set infer --class opportunistic
  MpsPlan plan = Plan(gpus, slices);
  EXPECT_TRUE(OnMps(plan, "train", "GPU-a"));
  EXPECT_FALSE(OnMps(plan, "infer", "GPU-a"));
  // The last guaranteed slice becomes opportunistic: the server passes to that class.
  slices.erase(slices.begin());
  plan = Settle(gpus, slices);
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_class, kOpportunistic);
  EXPECT_TRUE(OnMps(plan, "infer", "GPU-a"));
}

// The service found programs on the uid's server when it tried to give the server to the
// other class (mps_service.h, Hand): the class is pending, and the slices of the new class
// wait, time-sliced, until those programs have exited.
TEST(MpsPlan, AClassWaitsForTheProgramsStillOnItsServer) {
  const std::vector<MpsCandidate> slices = {Opportunistic("batch", 1000, "GPU-a", 10)};
  MpsPlan plan = Plan({Gpu("GPU-a", 0, /*tenant=*/1000, /*busy=*/1000, /*cls=*/std::nullopt)}, slices);
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_uid, 1000);
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_class, kOpportunistic);
  EXPECT_NE(plan.gpus["GPU-a"].tenant_why.find("once the programs still on its server"), std::string::npos)
      << plan.gpus["GPU-a"].tenant_why;
  EXPECT_FALSE(OnMps(plan, "batch", "GPU-a"));
  EXPECT_NE(Why(plan, "batch", "GPU-a").find("cannot tell their class"), std::string::npos) << Why(plan, "batch", "GPU-a");
  EXPECT_TRUE(OnMps(Plan({Gpu("GPU-a", 0, 1000, -1, kOpportunistic)}, slices), "batch", "GPU-a"));
}

TEST(MpsPlan, MixedPutsBothClassesOfTheTenantUidOnItsServer) {
  const std::vector<MpsCandidate> slices = {Slice("train", 1000, {"GPU-a"}, 10), Opportunistic("batch", 1000, "GPU-a", 20),
                                            Slice("bob", 1001, {"GPU-a"}, 30)};
  MpsPlan plan = Settle({Gpu("GPU-a")}, slices, MpsClasses::kMixed);
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_uid, 1000);
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_class, std::nullopt);
  EXPECT_TRUE(OnMps(plan, "train", "GPU-a"));
  EXPECT_TRUE(OnMps(plan, "batch", "GPU-a"));
  EXPECT_FALSE(OnMps(plan, "bob", "GPU-a"));
}

// A GPU given for both classes (an earlier gsliced, or "mixed" before a restart) stays its
// uid's under "one", for the class of that uid's oldest slice there.
TEST(MpsPlan, AGpuGivenForBothClassesKeepsItsUidUnderOne) {
  std::vector<MpsGpuState> gpus = {Gpu("GPU-a", 0, 1000, -1, std::nullopt)};
  const std::vector<MpsCandidate> slices = {Slice("bob", 1001, {"GPU-a"}, 1), Opportunistic("batch", 1000, "GPU-a", 5),
                                            Slice("train", 1000, {"GPU-a"}, 10)};
  MpsPlan plan = Plan(gpus, slices);
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_uid, 1000) << plan.gpus["GPU-a"].tenant_why;
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_class, kOpportunistic);
  Hand(plan, &gpus);
  plan = Plan(gpus, slices);
  EXPECT_TRUE(OnMps(plan, "batch", "GPU-a"));
  EXPECT_FALSE(OnMps(plan, "train", "GPU-a"));
  EXPECT_FALSE(OnMps(plan, "bob", "GPU-a"));
}

// Whatever the slices, their classes and their order, no GPU ever has slices of two uids on
// MPS, nor, under "one", of two classes.
TEST(MpsPlan, NeverPutsTwoUidsOnOneServer) {
  for (int seed = 0; seed < 200; ++seed) {
    std::vector<MpsCandidate> slices;
    unsigned x = static_cast<unsigned>(seed) * 2654435761u + 1;
    auto next = [&x] { return x = x * 1103515245u + 12345u, (x >> 16) & 0x7fff; };
    const int n = 1 + static_cast<int>(next() % 6);
    for (int i = 0; i < n; ++i) {
      std::vector<std::string> gpus = {next() % 2 ? "GPU-a" : "GPU-b"};
      if (next() % 5 == 0) gpus = {"GPU-a", "GPU-b"};
      slices.push_back(Slice("s" + std::to_string(i), static_cast<int64_t>(next() % 3) + 1000 - (next() % 7 == 0 ? 2000 : 0),
                             gpus, static_cast<int64_t>(next() % 10), next() % 4 == 0,
                             next() % 2 ? kGuaranteed : kOpportunistic));
    }
    const int64_t tenant = static_cast<int64_t>(next() % 4) - 1 + 1000;
    const int64_t busy = static_cast<int64_t>(next() % 3) - 1 + 1000;
    const std::optional<SliceClass> given[] = {kGuaranteed, kOpportunistic, std::nullopt};
    const std::optional<SliceClass> given_class = given[next() % 3];
    const MpsClasses classes = next() % 3 == 0 ? MpsClasses::kMixed : MpsClasses::kOne;
    const std::vector<MpsGpuState> gpus = {Gpu("GPU-a", 0, tenant, busy, given_class), Gpu("GPU-b", 1)};
    MpsPlan plan = next() % 2 ? Plan(gpus, slices, classes) : Settle(gpus, slices, classes);
    for (const char* gpu : {"GPU-a", "GPU-b"}) {
      std::set<SliceClass> on_mps;
      for (const MpsCandidate& c : slices) {
        if (OnMps(plan, c.slice, gpu)) {
          EXPECT_EQ(c.uid, plan.gpus[gpu].tenant_uid) << "seed " << seed << " slice " << c.slice;
          EXPECT_GE(c.uid, 0);
          EXPECT_EQ(c.gpus.size(), 1u);
          on_mps.insert(c.slice_class);
        }
      }
      if (classes == MpsClasses::kOne) {
        EXPECT_LE(on_mps.size(), 1u) << "seed " << seed << ": two classes on " << gpu << "'s MPS server";
        if (!on_mps.empty()) {
          EXPECT_EQ(plan.gpus[gpu].tenant_class, *on_mps.begin()) << "seed " << seed;
        }
      }
    }
  }
}

}  // namespace
}  // namespace gslice
