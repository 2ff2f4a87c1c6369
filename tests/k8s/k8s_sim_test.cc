// The whole path on the simulated driver: the device plugin finds the GPUs through NVML (the
// simulated libnvidia-ml.so.1), the extender places a pod, the kubelet (fake) allocates it,
// and a CUDA program started with exactly the environment Allocate returned runs inside the
// slice: it sees gslice.io/gpu-memory as its GPU's memory and cannot allocate past it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "fake_apiserver.h"
#include "fake_kubelet.h"
#include "gslice/k8s/device_plugin.h"
#include "gslice/k8s/extender.h"
#include "shim_env.h"

namespace gslice::k8s {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;
constexpr uint64_t kMiB = 1 << 20;

TEST(KubernetesOnSim, AllocatedContainerRunsInsideItsSlice) {
  gslice::test::ShimEnv env("k8s-e2e");
  env.vars["GSLICE_SIM_DEVICES"] = "2";
  env.vars["GSLICE_SIM_MEMORY"] = "4GiB";
  // The plugin (this process) and the containers (children) share one simulated node.
  for (const char* k : {"GSLICE_SIM_STATE", "GSLICE_SIM_DEVICES", "GSLICE_SIM_MEMORY"})
    setenv(k, env.vars[k].c_str(), 1);
  auto source = MakeNvmlGpuSource(std::string(GSLICE_TEST_SIM_DIR) + "/libnvidia-ml.so.1");
  std::vector<GpuInfo> gpus;
  std::string err;
  ASSERT_TRUE(source->Discover(&gpus, &err)) << err;
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].memory_mib, 4096);
  EXPECT_TRUE(gpus[1].healthy);
  EXPECT_NE(gpus[0].uuid, gpus[1].uuid);

  fs::path dir = fs::temp_directory_path() / ("gslice-k8s-sim-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  testing::FakeApiServer api;
  api.AddNode({{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "node-a"}}}});
  KubeClient kube(api.config());
  DevicePluginConfig config;
  config.plugin_dir = dir.string();
  config.node_name = "node-a";
  config.shim_host_dir = config.shim_container_dir = GSLICE_TEST_SHIM_DIR;
  config.ledger_host_path = config.ledger_container_path = env.ledger_path();
  config.dev_root = (dir / "no-dev").string();
  testing::FakeKubelet kubelet(config.plugin_dir);
  DevicePluginRunner runner(config, source.get(), &kube);
  ASSERT_TRUE(runner.Start(&err)) << err;
  ASSERT_TRUE(kubelet.WaitForRegistrations(1, 10s));

  // A filler leaves 512 MiB on GPU 0, so a 1 GiB slice must go to GPU 1.
  Extender ext({}, &kube);
  ASSERT_TRUE(ext.Resync(&err)) << err;
  for (auto [name, mib] : {std::pair<std::string, int>{"filler", 3584}, {"app", 1024}}) {
    json pod = testing::MakePod("ml", name, "uid-" + name, 1, mib, 20);
    api.AddPod(pod);
    ASSERT_EQ(ext.Filter({{"Pod", pod}, {"NodeNames", {"node-a"}}})["NodeNames"].size(), 1u);
    ASSERT_EQ(ext.Bind({{"PodName", name}, {"PodNamespace", "ml"}, {"PodUID", "uid-" + name}, {"Node", "node-a"}})["Error"], "");
  }

  auto stub = kubelet.Dial();
  grpc::ClientContext ctx;
  v1beta1::AllocateRequest req;
  req.add_container_requests()->add_devices_ids(gpus[1].uuid + "::0");
  v1beta1::AllocateResponse resp;
  grpc::Status st = stub->Allocate(&ctx, req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const auto& envs = resp.container_responses(0).envs();
  EXPECT_EQ(envs.at("GSLICE_SLICE"), "ml/app/main");
  EXPECT_EQ(envs.at("CUDA_VISIBLE_DEVICES"), gpus[1].uuid);

  // The container: the plugin's environment, nothing else of gslice's (the sanitize build
  // puts its runtime first in LD_PRELOAD).
  for (const auto& [k, v] : envs) env.vars[k] = v;
  if (std::string(GSLICE_TEST_ASAN_RUNTIME).size() > 0)
    env.vars["LD_PRELOAD"] = std::string(GSLICE_TEST_ASAN_RUNTIME) + " " + env.vars["LD_PRELOAD"];
  gslice::test::ChildResult r = env.Run({gslice::test::ClientPath(), "info"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("total=" + std::to_string(1024 * kMiB)), std::string::npos) << r.out;
  r = env.Run({gslice::test::ClientPath(), "hold", std::to_string(768 * kMiB)});
  EXPECT_NE(r.out.find("ok"), std::string::npos) << r.out << r.err;
  r = env.Run({gslice::test::ClientPath(), "hold", std::to_string(1536 * kMiB)});
  EXPECT_NE(r.out.find("oom"), std::string::npos) << r.out << r.err;

  runner.Stop();
  kubelet.Shutdown();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gslice::k8s
