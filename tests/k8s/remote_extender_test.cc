// Remote GPUs for pods on nodes without GPUs (docs/kubernetes.md, "Remote GPUs"): the pod asks
// for gslice.io/remote-gpu and gslice.io/remote-memory; the extender lets it run on any node
// while some GPU node that serves remote GPUs (gslice.io/remote-address) has room, books the
// slice there, and records the GPU node and its address in the pod's assignment.
#include <gtest/gtest.h>

#include "fake_apiserver.h"
#include "gslice/k8s/extender.h"

namespace gslice::k8s {
namespace {

using nlohmann::json;
using testing::FakeApiServer;
using testing::MakeNode;

json RemotePod(const std::string& ns, const std::string& name, const std::string& uid, int64_t memory_mib) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"namespace", ns}, {"name", name}, {"uid", uid}, {"annotations", json::object()}}},
          {"spec",
           {{"schedulerName", "gslice-scheduler"},
            {"containers",
             {{{"name", "main"},
               {"resources",
                {{"limits", {{std::string(kResourceRemoteGpu), "1"}, {std::string(kResourceRemoteMemory), std::to_string(memory_mib)}}}}}}}}}},
          {"status", {{"phase", "Pending"}}}};
}

json CpuNode(const std::string& name) { return {{"metadata", {{"name", name}, {"annotations", json::object()}}}}; }

json Serving(json node, const std::string& address) {
  node["metadata"]["annotations"][std::string(kAnnotationNodeRemoteAddress)] = address;
  return node;
}

TEST(RemotePods, ParseTheRemoteResourcesAndRefuseMixtures) {
  std::string error;
  auto pod = ParsePodRequest(RemotePod("ns", "p", "u", 8192), &error);
  ASSERT_TRUE(pod) << error;
  ASSERT_TRUE(pod->remote());
  EXPECT_EQ(pod->containers[0].gpus, 1);
  EXPECT_EQ(pod->containers[0].memory_mib, 8192);

  json no_memory = RemotePod("ns", "p", "u", 8192);
  no_memory["spec"]["containers"][0]["resources"]["limits"].erase(std::string(kResourceRemoteMemory));
  EXPECT_FALSE(ParsePodRequest(no_memory, &error));
  EXPECT_NE(error.find("gslice.io/remote-memory"), std::string::npos) << error;

  json two = RemotePod("ns", "p", "u", 8192);
  two["spec"]["containers"][0]["resources"]["limits"][std::string(kResourceRemoteGpu)] = "2";
  EXPECT_FALSE(ParsePodRequest(two, &error));
  EXPECT_NE(error.find("must be 1"), std::string::npos) << error;

  json mixed = RemotePod("ns", "p", "u", 8192);
  mixed["spec"]["containers"][0]["resources"]["limits"][std::string(kResourceGpu)] = "1";
  EXPECT_FALSE(ParsePodRequest(mixed, &error));
  EXPECT_NE(error.find("one or the other"), std::string::npos) << error;
}

TEST(RemotePods, FilterPassesAnyNodeWhileAServingGpuNodeHasRoom) {
  Extender ext({}, nullptr);
  json args = {{"Pod", RemotePod("ns", "p", "u1", 8192)},
               {"Nodes", {{"items", {CpuNode("cpu-1"), CpuNode("cpu-2"), MakeNode("gpu-plain", 1, 81920)}}}}};
  // No GPU node serves remote GPUs: every node fails, with the reason.
  json r = ext.Filter(args);
  EXPECT_TRUE(r["Nodes"]["items"].empty()) << r;
  EXPECT_NE(r["FailedNodes"]["cpu-1"].get<std::string>().find("no node serves remote GPUs"), std::string::npos) << r;

  args["Nodes"]["items"].push_back(Serving(MakeNode("gpu-small", 1, 4096), "tls://10.0.0.7:7070"));
  r = ext.Filter(args);
  EXPECT_TRUE(r["Nodes"]["items"].empty()) << r;
  EXPECT_NE(r["FailedNodes"]["cpu-1"].get<std::string>().find("gpu-small"), std::string::npos) << r;

  args["Nodes"]["items"].push_back(Serving(MakeNode("gpu-big", 1, 81920), "tls://10.0.0.8:7070"));
  r = ext.Filter(args);
  EXPECT_EQ(r["Nodes"]["items"].size(), 5u) << r;  // the pod itself runs anywhere
}

TEST(RemotePods, BindBooksTheGpuNodeAndRecordsItsAddress) {
  FakeApiServer api;
  api.AddNode(CpuNode("cpu-1"));
  api.AddNode(Serving(MakeNode("gpu-a", 1, 16384), "tls://10.0.0.7:7070"));
  api.AddNode(MakeNode("gpu-b", 1, 81920));  // serves no remote GPUs
  api.AddPod(RemotePod("team", "p1", "uid-1", 12288));
  api.AddPod(RemotePod("team", "p2", "uid-2", 12288));
  KubeClient kube(api.config());
  Extender ext({}, &kube);
  std::string err;
  ASSERT_TRUE(ext.Resync(&err)) << err;
  json r = ext.Bind({{"PodName", "p1"}, {"PodNamespace", "team"}, {"PodUID", "uid-1"}, {"Node", "cpu-1"}});
  ASSERT_EQ(r["Error"], "") << r;
  json pod = api.Pod("team", "p1");
  EXPECT_EQ(pod["spec"]["nodeName"], "cpu-1");  // the pod runs on the CPU node...
  auto a = DecodeAssignment(pod["metadata"]["annotations"]["gslice.io/assignment"].get<std::string>(), &err);
  ASSERT_TRUE(a) << err;
  EXPECT_EQ(a->node, "gpu-a");  // ...its slice on the GPU node that serves remote GPUs
  EXPECT_EQ(a->remote_address, "tls://10.0.0.7:7070");
  ASSERT_EQ(a->containers.size(), 1u);
  ASSERT_EQ(a->containers[0].gpus.size(), 1u);
  EXPECT_EQ(a->containers[0].gpus[0].memory_mib, 12288);
  EXPECT_EQ(pod["metadata"]["annotations"]["gslice.io/bind-phase"], "allocating");

  // The booking holds: a second 12 GiB slice does not fit gpu-a's 16 GiB, and gpu-b does not
  // serve remote GPUs.
  r = ext.Bind({{"PodName", "p2"}, {"PodNamespace", "team"}, {"PodUID", "uid-2"}, {"Node", "cpu-1"}});
  EXPECT_NE(r["Error"].get<std::string>().find("no node serving remote GPUs has room"), std::string::npos) << r;

  // A restarted extender recovers the booking from the annotation.
  Extender again({}, &kube);
  ASSERT_TRUE(again.Resync(&err)) << err;
  EXPECT_EQ(again.reservation_count(), 1u);
  r = again.Bind({{"PodName", "p2"}, {"PodNamespace", "team"}, {"PodUID", "uid-2"}, {"Node", "cpu-1"}});
  EXPECT_NE(r["Error"].get<std::string>().find("has room"), std::string::npos) << r;
}

}  // namespace
}  // namespace gslice::k8s
