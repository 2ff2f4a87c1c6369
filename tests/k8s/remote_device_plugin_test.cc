// The device plugin on a node that runs clients of remote GPUs (--remote-client): it
// advertises gslice.io/remote-gpu, and Allocate gives the container of a pod the extender
// placed remotely the forwarding client and its GPU node's address - with the fake kubelet,
// the fake API server and the real extender, as kube-scheduler would drive them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fake_apiserver.h"
#include "fake_kubelet.h"
#include "gslice/k8s/device_plugin.h"
#include "gslice/k8s/extender.h"

namespace gslice::k8s {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::FakeApiServer;
using testing::FakeKubelet;
using namespace std::chrono_literals;

json RemotePod(const std::string& name, const std::string& uid, int64_t memory_mib) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"namespace", "team"},
            {"name", name},
            {"uid", uid},
            {"annotations", {{"gslice.io/class", "opportunistic"}, {"gslice.io/idle-timeout", "30m"}}}}},
          {"spec",
           {{"schedulerName", "gslice-scheduler"},
            {"containers",
             {{{"name", "main"},
               {"resources",
                {{"limits", {{"gslice.io/remote-gpu", "1"}, {"gslice.io/remote-memory", std::to_string(memory_mib)}}}}}}}}}},
          {"status", {{"phase", "Pending"}}}};
}

TEST(RemoteClientPlugin, AdvertisesRemoteGpusAndSetsTheClientUp) {
  const fs::path root = fs::temp_directory_path() / ("gslice-dp-remote-" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "plugins");
  FakeApiServer api;
  api.AddNode({{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "cpu-a"}, {"annotations", json::object()}}}});
  json gpu_node = testing::MakeNode("gpu-a", 1, 81920);
  gpu_node["metadata"]["annotations"]["gslice.io/remote-address"] = "tls://10.0.0.7:7070";
  api.AddNode(gpu_node);
  KubeClient kube(api.config());

  DevicePluginConfig config;
  config.plugin_dir = (root / "plugins").string();
  config.node_name = "cpu-a";
  config.remote_client = true;
  config.resource_name = std::string(kResourceRemoteGpu);
  config.socket_name = "gslice-remote.sock";
  config.slices_per_gpu = 4;
  config.remote_lib_host_dir = config.remote_lib_container_dir = "/usr/lib/gslice/remote";
  config.poll = 50ms;
  auto kubelet = std::make_unique<FakeKubelet>(config.plugin_dir);
  auto source = MakeNoGpuSource();
  DevicePluginRunner runner(config, source.get(), &kube);
  std::string err;
  ASSERT_TRUE(runner.Start(&err)) << err;
  std::atomic<bool> stop{false};
  std::thread loop([&] { runner.Run(stop); });

  ASSERT_TRUE(kubelet->WaitForRegistrations(1, 10s));
  EXPECT_EQ(kubelet->last_registration().resource_name(), "gslice.io/remote-gpu");
  kubelet->Watch();
  ASSERT_TRUE(kubelet->WaitForList([](const auto& l) { return testing::CountHealth(l, "Healthy") == 4; }, 10s));
  // A client node publishes no GPU inventory: the extender never places slices on it.
  EXPECT_FALSE(api.Node("cpu-a")["metadata"]["annotations"].contains("gslice.io/gpus"));

  // kube-scheduler with the extender: the pod runs on cpu-a, its slice is booked on gpu-a.
  json pod = RemotePod("nb", "u-nb", 8192);
  api.AddPod(pod);
  Extender ext({}, &kube);
  ASSERT_TRUE(ext.Resync(&err)) << err;
  json f = ext.Filter({{"Pod", pod}, {"NodeNames", {"cpu-a"}}});
  ASSERT_EQ(f["NodeNames"].size(), 1u) << f;
  json b = ext.Bind({{"PodName", "nb"}, {"PodNamespace", "team"}, {"PodUID", "u-nb"}, {"Node", "cpu-a"}});
  ASSERT_EQ(b["Error"], "") << b;

  auto stub = kubelet->Dial();
  {
    grpc::ClientContext ctx;
    v1beta1::AllocateRequest req;
    req.add_container_requests()->add_devices_ids("remote::2");
    v1beta1::AllocateResponse resp;
    grpc::Status st = stub->Allocate(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(resp.container_responses_size(), 1);
    const auto& c = resp.container_responses(0);
    EXPECT_EQ(c.envs().at("GSLICE_REMOTE"), "tls://10.0.0.7:7070");
    EXPECT_EQ(c.envs().at("GSLICE_MEMORY"), "8192MiB");
    EXPECT_EQ(c.envs().at("GSLICE_CLASS"), "opportunistic");
    EXPECT_EQ(c.envs().at("GSLICE_IDLE_TIMEOUT"), "30m");
    EXPECT_EQ(c.envs().at("LD_LIBRARY_PATH"), "/usr/lib/gslice/remote");
    EXPECT_EQ(c.envs().count("LD_PRELOAD"), 0u);        // no interposer: no local driver
    EXPECT_EQ(c.envs().count("CUDA_VISIBLE_DEVICES"), 0u);
    EXPECT_EQ(c.devices_size(), 0);                       // and no /dev/nvidia*
    ASSERT_EQ(c.mounts_size(), 1);
    EXPECT_EQ(c.mounts(0).host_path(), "/usr/lib/gslice/remote");
    EXPECT_TRUE(c.mounts(0).read_only());
  }
  EXPECT_EQ(api.Pod("team", "nb")["metadata"]["annotations"]["gslice.io/bind-phase"], "allocated");
  {
    // Nothing else is waiting: a second Allocate is refused with the reason.
    grpc::ClientContext ctx;
    v1beta1::AllocateRequest req;
    req.add_container_requests()->add_devices_ids("remote::3");
    v1beta1::AllocateResponse resp;
    grpc::Status st = stub->Allocate(&ctx, req, &resp);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.error_message().find("gslice.io/remote-gpu"), std::string::npos) << st.error_message();
  }
  stop = true;
  loop.join();
  runner.Stop();
  fs::remove_all(root);
}

}  // namespace
}  // namespace gslice::k8s
