#include "gslice/k8s/placement.h"

#include <gtest/gtest.h>

namespace gslice::k8s {
namespace {

std::vector<GpuInfo> Gpus(const std::string& prefix, int n, int64_t mib) {
  std::vector<GpuInfo> out;
  for (int i = 0; i < n; ++i) out.push_back({prefix + "-gpu" + std::to_string(i), i, mib, "sim", true});
  return out;
}

PodRequest Pod(int64_t mib, int compute = 0, int gpus = 1,
               SliceClass cls = SliceClass::kGuaranteed) {
  PodRequest p;
  p.namespace_name = "ns";
  p.name = "p";
  p.slice_class = cls;
  p.containers.push_back({"main", gpus, mib, compute});
  return p;
}

// Books a pod where Fit says, under a fresh key.
void Place(ClusterState& s, const PodRequest& p, const std::string& node, Policy pol) {
  static int n = 0;
  std::string why;
  auto fit = s.Fit(p, node, pol, &why);
  ASSERT_TRUE(fit) << why;
  ASSERT_TRUE(s.Reserve("k" + std::to_string(n++), p.namespace_name, fit->assignment, false, &why)) << why;
}

TEST(Placement, BinpackPicksTheTightestGpu) {
  ClusterState s;
  s.SetNode("n", Gpus("n", 3, 40960));
  // Leave 30 GiB free on gpu0, 10 GiB on gpu1, 40 on gpu2.
  Place(s, Pod(10240), "n", Policy::kBinpack);  // lands on gpu0 (all equal: lowest index)
  std::string why;
  Assignment a;
  a.node = "n";
  a.containers.push_back({"x", {{"n-gpu1", 1, 30720, 0}}});
  ASSERT_TRUE(s.Reserve("manual", "ns", a, false, &why)) << why;
  auto fit = s.Fit(Pod(8192), "n", Policy::kBinpack, &why);
  ASSERT_TRUE(fit) << why;
  // gpu1 has 10 GiB free: 8 GiB there leaves 2 GiB, still useful (>= 2048 MiB).
  EXPECT_EQ(fit->assignment.containers[0].gpus[0].uuid, "n-gpu1");
  auto spread = s.Fit(Pod(8192), "n", Policy::kSpread, &why);
  ASSERT_TRUE(spread) << why;
  EXPECT_EQ(spread->assignment.containers[0].gpus[0].uuid, "n-gpu2");
}

TEST(Placement, AvoidsLeavingAnUnusableFragment) {
  ClusterState s;
  s.SetNode("n", Gpus("n", 2, 10240));
  std::string why;
  Assignment a;
  a.node = "n";
  a.containers.push_back({"x", {{"n-gpu0", 0, 1024, 0}}});  // gpu0: 9 GiB free
  ASSERT_TRUE(s.Reserve("a", "ns", a, false, &why));
  // 8 GiB on gpu0 would leave 1 GiB (< 2 GiB: a fragment); gpu1 leaves 2 GiB. Best fit alone
  // would pick gpu0.
  auto fit = s.Fit(Pod(8192), "n", Policy::kBinpack, &why);
  ASSERT_TRUE(fit) << why;
  EXPECT_EQ(fit->assignment.containers[0].gpus[0].uuid, "n-gpu1");
  // An exact fit is the best of all.
  auto exact = s.Fit(Pod(9216), "n", Policy::kBinpack, &why);
  ASSERT_TRUE(exact) << why;
  EXPECT_EQ(exact->assignment.containers[0].gpus[0].uuid, "n-gpu0");
}

TEST(Placement, NodeScoresFollowThePolicy) {
  ClusterState s;
  s.SetNode("busy", Gpus("busy", 2, 40960));
  s.SetNode("idle", Gpus("idle", 2, 40960));
  Place(s, Pod(20480), "busy", Policy::kBinpack);
  std::string why;
  auto b_busy = s.Fit(Pod(4096), "busy", Policy::kBinpack, &why);
  auto b_idle = s.Fit(Pod(4096), "idle", Policy::kBinpack, &why);
  auto s_busy = s.Fit(Pod(4096), "busy", Policy::kSpread, &why);
  auto s_idle = s.Fit(Pod(4096), "idle", Policy::kSpread, &why);
  ASSERT_TRUE(b_busy && b_idle && s_busy && s_idle);
  EXPECT_GT(b_busy->score, b_idle->score);
  EXPECT_LT(s_busy->score, s_idle->score);
}

TEST(Placement, GuaranteedComputeNeverExceeds100) {
  ClusterState s;
  s.SetNode("n", Gpus("n", 1, 81920));
  Place(s, Pod(1024, 60), "n", Policy::kBinpack);
  std::string why;
  EXPECT_FALSE(s.Fit(Pod(1024, 50), "n", Policy::kBinpack, &why));
  EXPECT_NE(why.find("guaranteed compute"), std::string::npos) << why;
  // Opportunistic work takes what guaranteed work leaves: its share is not reserved.
  EXPECT_TRUE(s.Fit(Pod(1024, 50, 1, SliceClass::kOpportunistic), "n", Policy::kBinpack, &why)) << why;
}

TEST(Placement, MultiGpuContainersGetDistinctGpus) {
  ClusterState s;
  s.SetNode("n", Gpus("n", 4, 40960));
  std::string why;
  auto fit = s.Fit(Pod(4096, 0, 3), "n", Policy::kBinpack, &why);
  ASSERT_TRUE(fit) << why;
  auto& g = fit->assignment.containers[0].gpus;
  ASSERT_EQ(g.size(), 3u);
  EXPECT_NE(g[0].uuid, g[1].uuid);
  EXPECT_NE(g[1].uuid, g[2].uuid);
  EXPECT_NE(g[0].uuid, g[2].uuid);
  EXPECT_FALSE(s.Fit(Pod(4096, 0, 5), "n", Policy::kBinpack, &why));
}

TEST(Placement, WholeGpuNeedsAnEmptyGpuAndUnhealthyGpusAreSkipped) {
  ClusterState s;
  auto gpus = Gpus("n", 2, 40960);
  gpus[1].healthy = false;
  s.SetNode("n", gpus);
  Place(s, Pod(1024), "n", Policy::kBinpack);
  std::string why;
  EXPECT_FALSE(s.Fit(Pod(0), "n", Policy::kBinpack, &why));
  gpus[1].healthy = true;
  s.SetNode("n", gpus);  // usage survives an inventory update
  auto fit = s.Fit(Pod(0), "n", Policy::kBinpack, &why);
  ASSERT_TRUE(fit) << why;
  EXPECT_EQ(fit->assignment.containers[0].gpus[0].uuid, "n-gpu1");
  EXPECT_EQ(fit->assignment.containers[0].gpus[0].memory_mib, 40960);
}

TEST(Placement, SliceSlotsAreLimitedAndReserveRechecks) {
  ClusterState s(PlacementConfig{Policy::kBinpack, 2048, 2});
  s.SetNode("n", Gpus("n", 1, 40960));
  std::string why;
  auto fit = s.Fit(Pod(1024), "n", Policy::kBinpack, &why);
  ASSERT_TRUE(fit);
  // The same decision booked three times: the third finds no slot.
  EXPECT_TRUE(s.Reserve("a", "ns", fit->assignment, false, &why));
  EXPECT_TRUE(s.Reserve("b", "ns", fit->assignment, false, &why));
  EXPECT_FALSE(s.Reserve("c", "ns", fit->assignment, false, &why));
  EXPECT_NE(why.find("slot"), std::string::npos) << why;
  EXPECT_FALSE(s.Reserve("a", "ns", fit->assignment, false, &why));  // key already used
  EXPECT_TRUE(s.Release("a"));
  EXPECT_TRUE(s.Reserve("c", "ns", fit->assignment, false, &why)) << why;
  auto u = s.UsageOf("ns");
  EXPECT_EQ(u.gpus, 2);
  EXPECT_EQ(u.memory_mib, 2048);
}

TEST(Placement, FragmentationCountsSmallAndSlotlessLeftovers) {
  ClusterState s(PlacementConfig{Policy::kBinpack, 2048, 2});
  s.SetNode("n", Gpus("n", 3, 10240));
  std::string why;
  Assignment a;
  a.node = "n";
  a.containers.push_back({"x", {{"n-gpu0", 0, 9216, 0}}});  // 1 GiB left: a fragment
  a.containers.push_back({"y", {{"n-gpu1", 1, 1024, 0}}});
  ASSERT_TRUE(s.Reserve("a", "ns", a, false, &why)) << why;
  Assignment b = a;
  b.containers = {{"z", {{"n-gpu1", 1, 1024, 0}}}};  // gpu1: 2 slices = no slot, 8 GiB stranded
  ASSERT_TRUE(s.Reserve("b", "ns", b, false, &why)) << why;
  FragmentStats f = s.Fragmentation();
  EXPECT_EQ(f.total_mib, 3 * 10240);
  EXPECT_EQ(f.free_mib, 1024 + 8192 + 10240);
  EXPECT_EQ(f.unusable_mib, 1024 + 8192);
  EXPECT_EQ(f.gpus_in_use, 2);
}

}  // namespace
}  // namespace gslice::k8s
