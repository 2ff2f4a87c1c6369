// The MPS plan (daemon/mps_plan.h) on synthetic GPUs and slices: which GPUs serve MPS, which
// uid each gives it to, and that no slice is ever put on a server of another uid.
#include "mps_plan.h"

#include <gtest/gtest.h>

#include "gslice/nvml_subset.h"

namespace gslice {
namespace {

GpuSharing Serving(unsigned index = 0) {
  return DecideGpuSharing(MpsMode::kAuto, true, "nvidia-cuda-mps-control", NVML_COMPUTEMODE_DEFAULT, index, true, "");
}

MpsGpuState Gpu(const std::string& uuid, unsigned index = 0, int64_t tenant = -1, int64_t busy = -1) {
  return {.uuid = uuid, .index = index, .sharing = Serving(index), .tenant_uid = tenant, .busy_uid = busy};
}

MpsCandidate Slice(const std::string& name, int64_t uid, std::vector<std::string> gpus, int64_t created_at,
                   bool deleted = false) {
  return {.slice = name, .uid = uid, .gpus = std::move(gpus), .created_at = created_at, .deleted = deleted};
}

// The plan once the service has given each GPU to its tenant (where no busy server stops it).
MpsPlan Settle(std::vector<MpsGpuState> gpus, const std::vector<MpsCandidate>& slices) {
  MpsPlan plan = PlanMps(gpus, slices);
  for (MpsGpuState& g : gpus) {
    const int64_t target = plan.gpus[g.uuid].tenant_uid;
    if (g.busy_uid < 0 || g.busy_uid == target) g.tenant_uid = target;
  }
  return PlanMps(gpus, slices);
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
  MpsPlan before = PlanMps({Gpu("GPU-a")}, {Slice("train", 1000, {"GPU-a"}, 10)});
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
  MpsPlan plan = PlanMps({Gpu("GPU-a", 0, /*tenant=*/1000)},
                         {Slice("bob", 1001, {"GPU-a"}, 5), Slice("alice", 1000, {"GPU-a"}, 10)});
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_uid, 1000);
  EXPECT_TRUE(OnMps(plan, "alice", "GPU-a"));
  EXPECT_FALSE(OnMps(plan, "bob", "GPU-a"));
}

TEST(MpsPlan, ADeletedSliceWhoseProcessesRunKeepsItsUidTheTenant) {
  MpsPlan plan = PlanMps({Gpu("GPU-a", 0, 1000)},
                         {Slice("alice", 1000, {"GPU-a"}, 10, /*deleted=*/true), Slice("bob", 1001, {"GPU-a"}, 20)});
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_uid, 1000);
  EXPECT_FALSE(OnMps(plan, "bob", "GPU-a"));
  // A deleted slice never takes a free GPU.
  MpsPlan free = PlanMps({Gpu("GPU-a")}, {Slice("alice", 1000, {"GPU-a"}, 10, true), Slice("bob", 1001, {"GPU-a"}, 20)});
  EXPECT_EQ(free.gpus["GPU-a"].tenant_uid, 1001);
}

TEST(MpsPlan, ClientsOfAServerWithoutSlicesKeepOthersOff) {
  // alice's slices are gone, but programs of hers still used the server when the service tried
  // to give the GPU to bob: bob's slice is planned for it but runs time-sliced meanwhile.
  MpsPlan plan = PlanMps({Gpu("GPU-a", 0, /*tenant=*/-1, /*busy=*/1000)}, {Slice("bob", 1001, {"GPU-a"}, 20)});
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_uid, 1001) << plan.gpus["GPU-a"].tenant_why;
  EXPECT_NE(plan.gpus["GPU-a"].tenant_why.find("uid 1000"), std::string::npos) << plan.gpus["GPU-a"].tenant_why;
  EXPECT_FALSE(OnMps(plan, "bob", "GPU-a"));
  EXPECT_NE(Why(plan, "bob", "GPU-a").find("programs of uid 1000 still use"), std::string::npos)
      << Why(plan, "bob", "GPU-a");
  // Once the service has given it to bob, bob is on it.
  MpsPlan after = PlanMps({Gpu("GPU-a", 0, 1001)}, {Slice("bob", 1001, {"GPU-a"}, 20)});
  EXPECT_TRUE(OnMps(after, "bob", "GPU-a"));
}

TEST(MpsPlan, ASliceOverSeveralGpusOrOfAnUnknownUidIsTimeSliced) {
  MpsPlan plan = PlanMps({Gpu("GPU-a", 0), Gpu("GPU-b", 1)},
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
  MpsPlan plan = PlanMps({g}, {Slice("alice", 1000, {"GPU-a"}, 10)});
  EXPECT_FALSE(OnMps(plan, "alice", "GPU-a"));
  EXPECT_EQ(plan.gpus["GPU-a"].tenant_uid, -1);
  EXPECT_EQ(Why(plan, "alice", "GPU-a"), g.sharing.why);
}

// Whatever the slices and their order, no GPU ever has slices of two uids on MPS.
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
                             gpus, static_cast<int64_t>(next() % 10), next() % 4 == 0));
    }
    const int64_t tenant = static_cast<int64_t>(next() % 4) - 1 + 1000;
    const int64_t busy = static_cast<int64_t>(next() % 3) - 1 + 1000;
    MpsPlan plan = next() % 2 ? PlanMps({Gpu("GPU-a", 0, tenant, busy), Gpu("GPU-b", 1)}, slices)
                              : Settle({Gpu("GPU-a", 0, tenant, busy), Gpu("GPU-b", 1)}, slices);
    for (const char* gpu : {"GPU-a", "GPU-b"}) {
      for (const MpsCandidate& c : slices) {
        if (OnMps(plan, c.slice, gpu)) {
          EXPECT_EQ(c.uid, plan.gpus[gpu].tenant_uid) << "seed " << seed << " slice " << c.slice;
          EXPECT_GE(c.uid, 0);
          EXPECT_EQ(c.gpus.size(), 1u);
        }
      }
    }
  }
}

}  // namespace
}  // namespace gslice
