#include "gslice/k8s/resources.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace gslice::k8s {
namespace {

using nlohmann::json;

TEST(Quantity, ParsesKubernetesForms) {
  EXPECT_EQ(ParseQuantity("8192").value, 8192);
  EXPECT_EQ(ParseQuantity("2Ki").value, 2048);
  EXPECT_EQ(ParseQuantity("1k").value, 1000);
  EXPECT_EQ(ParseQuantity("1e3").value, 1000);
  EXPECT_EQ(ParseQuantity("2000m").value, 2);
  EXPECT_TRUE(ParseQuantity("8192").error.empty());
}

TEST(Quantity, RefusesFractionsAndJunk) {
  EXPECT_NE(ParseQuantity("500m").error.find("whole number"), std::string::npos);
  EXPECT_NE(ParseQuantity("0.5").error.find("whole number"), std::string::npos);
  EXPECT_NE(ParseQuantity("8GB").error.find("unknown suffix"), std::string::npos);
  EXPECT_FALSE(ParseQuantity("").error.empty());
  EXPECT_FALSE(ParseQuantity("abc").error.empty());
  EXPECT_FALSE(ParseQuantity("-1").error.empty());
}

json Pod(json limits, json annotations = json::object()) {
  return json{{"metadata", {{"name", "p"}, {"namespace", "team-a"}, {"uid", "u-1"},
                            {"annotations", annotations}}},
              {"spec", {{"containers", json::array({
                  {{"name", "sidecar"}},
                  {{"name", "main"}, {"resources", {{"limits", limits}}}}})}}}};
}

TEST(PodRequest, ReadsLimitsAndClass) {
  std::string err;
  auto req = ParsePodRequest(Pod({{"gslice.io/gpu", "1"}, {"gslice.io/gpu-memory", "8192"},
                                  {"gslice.io/gpu-compute", "25"}},
                                 {{"gslice.io/class", "opportunistic"}, {"gslice.io/policy", "spread"}}),
                             &err);
  ASSERT_TRUE(req) << err;
  EXPECT_EQ(req->namespace_name, "team-a");
  EXPECT_EQ(req->uid, "u-1");
  EXPECT_EQ(req->slice_class, SliceClass::kOpportunistic);
  ASSERT_TRUE(req->policy);
  EXPECT_EQ(*req->policy, Policy::kSpread);
  ASSERT_EQ(req->containers.size(), 1u);  // the sidecar asks for nothing
  EXPECT_EQ(req->containers[0].name, "main");
  EXPECT_EQ(req->containers[0].gpus, 1);
  EXPECT_EQ(req->containers[0].memory_mib, 8192);
  EXPECT_EQ(req->containers[0].compute_percent, 25);
}

TEST(PodRequest, DefaultsToGuaranteedWholeGpu) {
  std::string err;
  auto req = ParsePodRequest(Pod({{"gslice.io/gpu", 2}}), &err);
  ASSERT_TRUE(req) << err;
  EXPECT_EQ(req->slice_class, SliceClass::kGuaranteed);
  EXPECT_EQ(req->containers[0].gpus, 2);
  EXPECT_EQ(req->containers[0].memory_mib, 0);
  EXPECT_EQ(req->total_gpus(), 2);
}

TEST(PodRequest, ExplainsBadInput) {
  std::string err;
  EXPECT_FALSE(ParsePodRequest(Pod({{"gslice.io/gpu", "1"}, {"gslice.io/gpu-compute", "150"}}), &err));
  EXPECT_NE(err.find("container main: gslice.io/gpu-compute 150: must be 1..100"), std::string::npos) << err;
  EXPECT_FALSE(ParsePodRequest(Pod({{"gslice.io/gpu-memory", "4096"}}), &err));
  EXPECT_NE(err.find("needs gslice.io/gpu"), std::string::npos) << err;
  EXPECT_FALSE(ParsePodRequest(Pod({{"gslice.io/gpu", "1"}}, {{"gslice.io/class", "gold"}}), &err));
  EXPECT_NE(err.find("must be guaranteed or opportunistic"), std::string::npos) << err;
  EXPECT_FALSE(ParsePodRequest(Pod({{"gslice.io/gpu", "500m"}}), &err));
  EXPECT_NE(err.find("whole number"), std::string::npos) << err;
  EXPECT_FALSE(ParsePodRequest(Pod({{"gslice.io/gpu", "1"}, {"gslice.io/gpu-memory", "32"}}), &err));
  EXPECT_NE(err.find("at least 64"), std::string::npos) << err;
}

// gslice.io/protect: a guaranteed pod's protection level, as a decimal or a percentage.
TEST(PodRequest, ReadsTheProtectionLevel) {
  std::string err;
  auto req = ParsePodRequest(Pod({{"gslice.io/gpu", "1"}}, {{"gslice.io/protect", "0.9"}}), &err);
  ASSERT_TRUE(req) << err;
  EXPECT_EQ(req->protect_permille, 900u);
  req = ParsePodRequest(Pod({{"gslice.io/gpu", "1"}}, {{"gslice.io/protect", "80%"}}), &err);
  ASSERT_TRUE(req) << err;
  EXPECT_EQ(req->protect_permille, 800u);
  req = ParsePodRequest(Pod({{"gslice.io/gpu", "1"}}), &err);
  ASSERT_TRUE(req) << err;
  EXPECT_EQ(req->protect_permille, 0u);  // the default
}

TEST(PodRequest, RefusesAProtectionLevelItCannotKeep) {
  std::string err;
  EXPECT_FALSE(ParsePodRequest(Pod({{"gslice.io/gpu", "1"}}, {{"gslice.io/protect", "0.3"}}), &err));
  EXPECT_NE(err.find("gslice.io/protect '0.3': must be from 0.5 to 1"), std::string::npos) << err;
  EXPECT_FALSE(ParsePodRequest(Pod({{"gslice.io/gpu", "1"}}, {{"gslice.io/protect", "90"}}), &err));
  EXPECT_NE(err.find("write 0.9 or 90%"), std::string::npos) << err;
  EXPECT_FALSE(ParsePodRequest(Pod({{"gslice.io/gpu", "1"}}, {{"gslice.io/protect", 0.9}}), &err));
  EXPECT_NE(err.find("gslice.io/protect: must be a string"), std::string::npos) << err;
  EXPECT_FALSE(ParsePodRequest(
      Pod({{"gslice.io/gpu", "1"}}, {{"gslice.io/class", "opportunistic"}, {"gslice.io/protect", "0.9"}}), &err));
  EXPECT_NE(err.find("only guaranteed pods have a protection level"), std::string::npos) << err;
}

TEST(Assignment, RoundTrips) {
  Assignment a;
  a.node = "n1";
  a.slice_class = SliceClass::kOpportunistic;
  a.containers.push_back({"main", {{"GPU-a", 0, 8192, 25}, {"GPU-b", 1, 8192, 25}}});
  std::string err;
  auto b = DecodeAssignment(EncodeAssignment(a), &err);
  ASSERT_TRUE(b) << err;
  EXPECT_EQ(b->node, "n1");
  EXPECT_EQ(b->slice_class, SliceClass::kOpportunistic);
  ASSERT_EQ(b->containers.size(), 1u);
  ASSERT_EQ(b->containers[0].gpus.size(), 2u);
  EXPECT_EQ(b->containers[0].gpus[1].uuid, "GPU-b");
  EXPECT_EQ(b->containers[0].gpus[1].memory_mib, 8192);
  EXPECT_FALSE(DecodeAssignment("{", &err));
  EXPECT_FALSE(DecodeAssignment(R"({"node":"n","class":"guaranteed","containers":[{"gpus":[{"uuid":"x","memoryMiB":"big"}]}]})", &err));
}

TEST(GpuInventory, RoundTripsAndRejectsBadEntries) {
  std::vector<GpuInfo> gpus{{"GPU-a", 0, 81920, "H100", true}, {"GPU-b", 1, 81920, "H100", false}};
  std::string err;
  auto back = DecodeGpuInventory(EncodeGpuInventory(gpus), &err);
  ASSERT_TRUE(back) << err;
  ASSERT_EQ(back->size(), 2u);
  EXPECT_FALSE((*back)[1].healthy);
  EXPECT_EQ((*back)[0].memory_mib, 81920);
  EXPECT_FALSE(DecodeGpuInventory(R"([{"uuid":"x"}])", &err));
  EXPECT_FALSE(DecodeGpuInventory(R"({})", &err));
}

}  // namespace
}  // namespace gslice::k8s
