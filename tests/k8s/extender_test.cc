#include "gslice/k8s/extender.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>
#include <vector>

#include <httplib.h>

#include "fake_apiserver.h"

namespace gslice::k8s {
namespace {

using nlohmann::json;
using testing::FakeApiServer;
using testing::MakeNode;
using testing::MakePod;

// The extender over HTTP, as kube-scheduler reaches it.
class ExtenderServer {
 public:
  explicit ExtenderServer(Extender* e) {
    e->Route(server_);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~ExtenderServer() {
    server_.stop();
    thread_.join();
  }
  json Post(const std::string& path, const json& body) const {
    httplib::Client cli("127.0.0.1", port_);
    cli.set_read_timeout(30, 0);
    auto res = cli.Post(path, body.dump(), "application/json");
    if (!res) return json{{"transport", httplib::to_string(res.error())}};
    return json::parse(res->body, nullptr, false);
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
};

json NodeList(const std::vector<json>& nodes) { return {{"items", nodes}}; }

// Sums what the API server's annotations book on each GPU: memory, slices.
std::map<std::string, std::pair<int64_t, int>> BookedPerGpu(const FakeApiServer& api) {
  std::map<std::string, std::pair<int64_t, int>> out;
  for (const auto& p : api.Pods()) {
    if (p["spec"].value("nodeName", "").empty()) continue;
    std::string err;
    auto a = DecodeAssignment(p["metadata"]["annotations"].value("gslice.io/assignment", ""), &err);
    EXPECT_TRUE(a) << err;
    if (!a) continue;
    EXPECT_EQ(a->node, p["spec"]["nodeName"].get<std::string>());
    for (const auto& c : a->containers)
      for (const auto& g : c.gpus) {
        out[g.uuid].first += g.memory_mib;
        out[g.uuid].second += 1;
      }
  }
  return out;
}

TEST(ExtenderWire, FilterWithNodeObjectsAndWithNames) {
  Extender ext({}, nullptr);
  json small = MakeNode("small", 1, 8192);
  json big = MakeNode("big", 2, 81920);
  json plain = {{"metadata", {{"name", "cpu-only"}}}};
  json args = {{"Pod", MakePod("ns", "p", "u1", 1, 16384, 25)}, {"Nodes", NodeList({small, big, plain})}};
  json r = ext.Filter(args);
  ASSERT_EQ(r["Nodes"]["items"].size(), 1u);
  EXPECT_EQ(r["Nodes"]["items"][0]["metadata"]["name"], "big");
  EXPECT_NE(r["FailedNodes"]["small"].get<std::string>().find("not enough free memory"), std::string::npos);
  EXPECT_NE(r["FailedNodes"]["cpu-only"].get<std::string>().find("device plugin"), std::string::npos);
  EXPECT_EQ(r["Error"], "");

  // nodeCacheCapable form, lower-case keys as older schedulers sent them.
  json by_name = {{"pod", MakePod("ns", "p", "u1", 1, 4096, 0)}, {"nodenames", {"small", "big", "cpu-only"}}};
  r = ext.Filter(by_name);
  EXPECT_EQ(r["NodeNames"], json({"small", "big"}));
}

TEST(ExtenderWire, BadPodsAreUnresolvableWithAReason) {
  Extender ext({}, nullptr);
  json pod = MakePod("ns", "p", "u1", 1, 4096, 250);
  json r = ext.Filter({{"Pod", pod}, {"NodeNames", {"a", "b"}}});
  EXPECT_EQ(r["NodeNames"].size(), 0u);
  EXPECT_NE(r["FailedAndUnresolvableNodes"]["a"].get<std::string>().find("must be 1..100"), std::string::npos);
  EXPECT_EQ(r["FailedAndUnresolvableNodes"].size(), 2u);
  json opp = MakePod("ns", "o", "u2", 1, 4096, 0, "opportunistic");
  opp["metadata"]["annotations"]["gslice.io/protect"] = "0.9";
  r = ext.Filter({{"Pod", opp}, {"NodeNames", {"a"}}});
  EXPECT_EQ(r["NodeNames"].size(), 0u);
  EXPECT_NE(r["FailedAndUnresolvableNodes"]["a"].get<std::string>().find("only guaranteed pods have a protection level"),
            std::string::npos)
      << r;
}

TEST(ExtenderWire, PrioritizeFollowsPolicy) {
  for (Policy policy : {Policy::kBinpack, Policy::kSpread}) {
    ExtenderOptions opt;
    opt.placement.policy = policy;
    Extender ext(opt, nullptr);
    json nodes = NodeList({MakeNode("a", 2, 40960), MakeNode("b", 2, 40960)});
    ext.Filter({{"Pod", MakePod("ns", "first", "u0", 1, 30720, 0)}, {"Nodes", nodes}});
    ASSERT_EQ(ext.Bind({{"PodName", "first"}, {"PodNamespace", "ns"}, {"PodUID", "u0"}, {"Node", "a"}})["Error"], "");
    json prio = ext.Prioritize({{"Pod", MakePod("ns", "next", "u1", 1, 4096, 0)}, {"Nodes", nodes}});
    ASSERT_EQ(prio.size(), 2u);
    EXPECT_EQ(prio[0]["Host"], "a");
    int64_t a = prio[0]["Score"], b = prio[1]["Score"];
    EXPECT_GE(a, 0);
    EXPECT_LE(a, 10);
    if (policy == Policy::kBinpack) EXPECT_GT(a, b);
    else EXPECT_LT(a, b);
  }
}

TEST(ExtenderApi, BindAnnotatesAndBindsThroughTheApiServer) {
  FakeApiServer api;
  api.AddNode(MakeNode("n1", 2, 40960));
  api.AddPod(MakePod("team", "p1", "uid-1", 2, 8192, 30, "opportunistic"));
  KubeClient kube(api.config());
  Extender ext({}, &kube);
  std::string err;
  ASSERT_TRUE(ext.Resync(&err)) << err;
  // Bind without a prior filter: the extender fetches the pod itself.
  json r = ext.Bind({{"PodName", "p1"}, {"PodNamespace", "team"}, {"PodUID", "uid-1"}, {"Node", "n1"}});
  ASSERT_EQ(r["Error"], "") << r;
  json pod = api.Pod("team", "p1");
  EXPECT_EQ(pod["spec"]["nodeName"], "n1");
  EXPECT_EQ(pod["metadata"]["annotations"]["gslice.io/bind-phase"], "allocating");
  auto a = DecodeAssignment(pod["metadata"]["annotations"]["gslice.io/assignment"].get<std::string>(), &err);
  ASSERT_TRUE(a) << err;
  EXPECT_EQ(a->slice_class, SliceClass::kOpportunistic);
  ASSERT_EQ(a->containers.size(), 1u);
  ASSERT_EQ(a->containers[0].gpus.size(), 2u);
  EXPECT_NE(a->containers[0].gpus[0].uuid, a->containers[0].gpus[1].uuid);
  EXPECT_EQ(a->containers[0].gpus[0].memory_mib, 8192);
  EXPECT_EQ(a->containers[0].gpus[0].compute_percent, 30);
}

TEST(ExtenderApi, FailedBindingReleasesTheBooking) {
  FakeApiServer api;
  api.AddNode(MakeNode("n1", 1, 10240));
  api.AddPod(MakePod("ns", "p1", "u1", 1, 10240, 0));
  KubeClient kube(api.config());
  Extender ext({}, &kube);
  std::string err;
  ASSERT_TRUE(ext.Resync(&err)) << err;
  api.FailBindings(1);
  json bind = {{"PodName", "p1"}, {"PodNamespace", "ns"}, {"PodUID", "u1"}, {"Node", "n1"}};
  json r = ext.Bind(bind);
  EXPECT_NE(r["Error"].get<std::string>().find("injected failure"), std::string::npos) << r;
  EXPECT_EQ(ext.reservation_count(), 0u);
  // The scheduler retries; the GPU is free again.
  EXPECT_EQ(ext.Bind(bind)["Error"], "");
  EXPECT_EQ(ext.reservation_count(), 1u);
  EXPECT_EQ(api.Pod("ns", "p1")["spec"]["nodeName"], "n1");
}

TEST(ExtenderApi, NamespaceQuotas) {
  std::string err;
  auto quotas = ParseQuotas(R"({"team": {"gpus": 2, "memoryMiB": 12288}})", &err);
  ASSERT_TRUE(quotas) << err;
  EXPECT_FALSE(ParseQuotas(R"({"team": {"gpu": 2}})", &err));
  EXPECT_NE(err.find("unknown field 'gpu'"), std::string::npos) << err;
  EXPECT_FALSE(ParseQuotas(R"({"team": {"gpus": -1}})", &err));

  ExtenderOptions opt;
  opt.quotas = *quotas;
  Extender ext(opt, nullptr);
  json nodes = NodeList({MakeNode("n", 4, 40960)});
  auto bind = [&](const std::string& name) {
    return ext.Bind({{"PodName", name}, {"PodNamespace", "team"}, {"PodUID", name}, {"Node", "n"}});
  };
  ASSERT_EQ(ext.Filter({{"Pod", MakePod("team", "a", "a", 1, 8192, 0)}, {"Nodes", nodes}})["Nodes"]["items"].size(), 1u);
  ASSERT_EQ(bind("a")["Error"], "");
  json r = ext.Filter({{"Pod", MakePod("team", "b", "b", 1, 8192, 0)}, {"Nodes", nodes}});
  EXPECT_EQ(r["Nodes"]["items"].size(), 0u);
  EXPECT_NE(r["FailedAndUnresolvableNodes"]["n"].get<std::string>().find("namespace team quota: memoryMiB 8192 in use + 8192 requested > 12288"),
            std::string::npos) << r;
  // Other namespaces are not limited.
  EXPECT_EQ(ext.Filter({{"Pod", MakePod("other", "c", "c", 1, 8192, 0)}, {"Nodes", nodes}})["Nodes"]["items"].size(), 1u);
  // A whole-GPU request is checked exactly at bind (40960 MiB > what is left).
  ext.Filter({{"Pod", MakePod("team", "w", "w", 1, 0, 0)}, {"Nodes", nodes}});
  EXPECT_NE(bind("w")["Error"].get<std::string>().find("quota"), std::string::npos);
}

TEST(ExtenderApi, StateSurvivesARestartAndFollowsPodLifecycle) {
  FakeApiServer api;
  api.AddNode(MakeNode("n1", 1, 20480));
  KubeClient kube(api.config());
  for (int i = 0; i < 2; ++i) api.AddPod(MakePod("ns", "p" + std::to_string(i), "u" + std::to_string(i), 1, 8192, 0));
  {
    Extender first({}, &kube);
    std::string err;
    ASSERT_TRUE(first.Resync(&err)) << err;
    for (int i = 0; i < 2; ++i) {
      std::string n = std::to_string(i);
      ASSERT_EQ(first.Bind({{"PodName", "p" + n}, {"PodNamespace", "ns"}, {"PodUID", "u" + n}, {"Node", "n1"}})["Error"], "");
    }
  }
  // A new extender process knows nothing until it reads the API server.
  Extender second({}, &kube);
  std::string err;
  ASSERT_TRUE(second.Resync(&err)) << err;
  EXPECT_EQ(second.reservation_count(), 2u);
  json pod = MakePod("ns", "big", "u9", 1, 8192, 0);
  api.AddPod(pod);
  json args = {{"Pod", pod}, {"NodeNames", {"n1"}}};
  EXPECT_EQ(second.Filter(args)["NodeNames"].size(), 0u);  // 16 of 20 GiB are booked
  // One pod finishes: after the next resync its memory is free again.
  api.SetPodPhase("ns", "p0", "Succeeded");
  ASSERT_TRUE(second.Resync(&err)) << err;
  EXPECT_EQ(second.reservation_count(), 1u);
  EXPECT_EQ(second.Filter(args)["NodeNames"].size(), 1u);
  // A deleted pod too.
  api.DeletePod("ns", "p1");
  ASSERT_TRUE(second.Resync(&err)) << err;
  EXPECT_EQ(second.reservation_count(), 0u);
}

// A resync that reads the pod list while a bind is between its annotation and its binding
// must not drop the booking (the pod looks unbound in that list).
TEST(ExtenderApi, ResyncKeepsBindsInFlight) {
  FakeApiServer api;
  api.AddNode(MakeNode("n1", 1, 10240));
  api.AddPod(MakePod("ns", "p1", "u1", 1, 8192, 0));
  KubeClient kube(api.config());
  Extender ext({}, &kube);
  std::string err;
  ASSERT_TRUE(ext.Resync(&err)) << err;
  api.DelayBindings(600);
  std::thread bind([&] {
    EXPECT_EQ(ext.Bind({{"PodName", "p1"}, {"PodNamespace", "ns"}, {"PodUID", "u1"}, {"Node", "n1"}})["Error"], "");
  });
  for (int i = 0; i < 200 && api.Pod("ns", "p1")["metadata"]["annotations"].count("gslice.io/assignment") == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(ext.Resync(&err)) << err;  // sees the annotation, not the binding
  EXPECT_EQ(ext.reservation_count(), 1u);
  json other = MakePod("ns", "p2", "u2", 1, 8192, 0);
  EXPECT_EQ(ext.Filter({{"Pod", other}, {"NodeNames", {"n1"}}})["NodeNames"].size(), 0u);
  bind.join();
  ASSERT_TRUE(ext.Resync(&err)) << err;
  EXPECT_EQ(ext.reservation_count(), 1u);
}

// Many binds at once for one node with room for four slices: exactly four win, and the API
// server never books a GPU past its memory.
TEST(ExtenderConcurrency, NoDoubleBookingOnOneNode) {
  FakeApiServer api;
  api.AddNode(MakeNode("n1", 2, 10240));
  KubeClient kube(api.config());
  Extender ext({}, &kube);
  ExtenderServer http(&ext);
  std::string err;
  ASSERT_TRUE(ext.Resync(&err)) << err;
  const int kPods = 32;
  for (int i = 0; i < kPods; ++i) {
    json pod = MakePod("ns", "p" + std::to_string(i), "u" + std::to_string(i), 1, 4096, 0);
    api.AddPod(pod);
    // Every filter sees an empty node, as when the scheduler runs ahead of the binds.
    json r = http.Post("/filter", {{"Pod", pod}, {"NodeNames", {"n1"}}});
    ASSERT_EQ(r["NodeNames"].size(), 1u) << r;
  }
  std::atomic<int> ok{0}, refused{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kPods; ++i) {
    threads.emplace_back([&, i] {
      std::string n = std::to_string(i);
      json r = http.Post("/bind", {{"PodName", "p" + n}, {"PodNamespace", "ns"}, {"PodUID", "u" + n}, {"Node", "n1"}});
      if (r.value("Error", "x").empty()) ++ok;
      else ++refused;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 4);  // 2 GPUs x 2 slices of 4 GiB in 10 GiB
  EXPECT_EQ(refused.load(), kPods - 4);
  auto booked = BookedPerGpu(api);
  ASSERT_EQ(booked.size(), 2u);
  for (const auto& [gpu, b] : booked) EXPECT_LE(b.first, 10240) << gpu;
  EXPECT_EQ(ext.reservation_count(), 4u);
}

// Several scheduler threads run the whole filter -> prioritize -> bind cycle at once over a
// small cluster until it is full: no GPU is over-booked and every slice that fit was placed.
TEST(ExtenderConcurrency, ConcurrentSchedulingCycles) {
  FakeApiServer api;
  std::vector<std::string> names;
  for (int n = 0; n < 4; ++n) {
    names.push_back("node" + std::to_string(n));
    api.AddNode(MakeNode(names.back(), 2, 16384, 4));
  }
  KubeClient kube(api.config());
  Extender ext({}, &kube);
  ExtenderServer http(&ext);
  std::string err;
  ASSERT_TRUE(ext.Resync(&err)) << err;
  const int kPods = 60;  // each 4 GiB: the cluster holds 4 nodes x 2 GPUs x 4 = 32
  for (int i = 0; i < kPods; ++i) api.AddPod(MakePod("ns", "p" + std::to_string(i), "u" + std::to_string(i), 1, 4096, 10));
  std::atomic<int> next{0}, placed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < kPods; i = next++) {
        std::string n = std::to_string(i);
        json pod = api.Pod("ns", "p" + n);
        for (int attempt = 0; attempt < 8; ++attempt) {
          json f = http.Post("/filter", {{"Pod", pod}, {"NodeNames", names}});
          if (f["NodeNames"].empty()) break;
          json pr = http.Post("/prioritize", {{"Pod", pod}, {"NodeNames", f["NodeNames"]}});
          std::string best;
          int64_t best_score = -1;
          for (const auto& h : pr)
            if (h["Score"].get<int64_t>() > best_score) {
              best_score = h["Score"];
              best = h["Host"];
            }
          json b = http.Post("/bind", {{"PodName", "p" + n}, {"PodNamespace", "ns"}, {"PodUID", "u" + n}, {"Node", best}});
          if (b.value("Error", "x").empty()) {
            ++placed;
            break;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  auto booked = BookedPerGpu(api);
  int slices = 0;
  for (const auto& [gpu, b] : booked) {
    EXPECT_LE(b.first, 16384) << gpu;
    EXPECT_LE(b.second, 4) << gpu;
    slices += b.second;
  }
  EXPECT_EQ(placed.load(), 32);
  EXPECT_EQ(slices, 32);
  EXPECT_EQ(api.bindings(), 32);
}

}  // namespace
}  // namespace gslice::k8s

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "gslice/k8s/pod_directory_loader.h"

namespace gslice::k8s {
namespace {

TEST(KubeClientAuth, RereadsTheTokenFileForEveryRequest) {
  FakeApiServer api;
  std::string path = ::testing::TempDir() + "gslice-token-" + std::to_string(getpid());
  std::ofstream(path) << "first\n";
  KubeConfig c = api.config();
  c.token_file = path;
  KubeClient kube(c);
  ASSERT_TRUE(kube.ListNodes().ok());
  EXPECT_EQ(api.last_authorization(), "Bearer first");
  std::ofstream(path) << "rotated\n";
  ASSERT_TRUE(kube.ListNodes().ok());
  EXPECT_EQ(api.last_authorization(), "Bearer rotated");
  std::remove(path.c_str());
  KubeResult r = kube.ListNodes();
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error.find("cannot read the API token"), std::string::npos) << r.error;
}

TEST(PodDirectoryLoader, NamesProcessesOfThisNodesPods) {
  FakeApiServer api;
  const std::string uid = "5f3c1f5e-8a2b-4c3d-9e4f-0123456789ab";
  const std::string cid = "3e5a9d0c1b2f4e6a8c7d9b0a1f2e3d4c5b6a7980a1b2c3d4e5f60718293a4b5c";
  json pod = MakePod("team", "trainer-0", uid, 1, 4096, 0);
  pod["spec"]["nodeName"] = "node-a";
  pod["status"]["containerStatuses"] = {{{"name", "main"}, {"containerID", "containerd://" + cid}}};
  api.AddPod(pod);
  json elsewhere = MakePod("team", "other", "00000000-0000-0000-0000-000000000001", 1, 4096, 0);
  elsewhere["spec"]["nodeName"] = "node-b";
  api.AddPod(elsewhere);
  KubeClient kube(api.config());
  PodDirectory dir;
  std::string err;
  ASSERT_TRUE(LoadPodDirectory(kube, "node-a", &dir, &err)) << err;
  EXPECT_EQ(dir.size(), 1u);
  auto cg = ParsePodCgroup("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" +
                           std::string("5f3c1f5e_8a2b_4c3d_9e4f_0123456789ab.slice/cri-containerd-") + cid + ".scope");
  ASSERT_TRUE(cg);
  auto name = dir.Lookup(*cg);
  ASSERT_TRUE(name);
  EXPECT_EQ(name->namespace_name, "team");
  EXPECT_EQ(name->name, "trainer-0");
  EXPECT_EQ(name->container, "main");
  // An unreachable API server leaves the directory as it was.
  KubeConfig bad;
  bad.server = "http://127.0.0.1:1";
  bad.timeout_seconds = 1;
  EXPECT_FALSE(LoadPodDirectory(KubeClient(bad), "node-a", &dir, &err));
  EXPECT_FALSE(err.empty());
  EXPECT_EQ(dir.size(), 1u);
}

}  // namespace
}  // namespace gslice::k8s
