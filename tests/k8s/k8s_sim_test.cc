// The whole path on the simulated driver: the device plugin finds the GPUs through NVML (the
// simulated libnvidia-ml.so.1), the extender places a pod, the kubelet (fake) allocates it,
// and a CUDA program started with exactly the environment Allocate returned runs inside the
// slice: it sees gslice.io/gpu-memory as its GPU's memory and cannot allocate past it; and
// gsliced names that program's pod in its metrics.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
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

// The device plugin of node-a on the simulated node: its kubelet socket folder, the shim
// from this build, the test's ledger, and a suspend board and device root under dir.
DevicePluginConfig PluginConfig(const fs::path& plugin_dir, const fs::path& dir, const std::string& ledger) {
  DevicePluginConfig config;
  config.plugin_dir = plugin_dir.string();
  config.node_name = "node-a";
  config.shim_host_dir = config.shim_container_dir = GSLICE_TEST_SHIM_DIR;
  config.ledger_host_path = config.ledger_container_path = ledger;
  config.board_host_path = config.board_container_path = (dir / "suspend-board").string();
  config.dev_root = (dir / "no-dev").string();
  return config;
}

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
  DevicePluginConfig config = PluginConfig(dir, dir, env.ledger_path());
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
  EXPECT_EQ(envs.at("GSLICE_SLICE"), "ml.app.main");
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

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Per-pod metrics end to end: the device plugin allocates a container, a CUDA program runs
// with that environment, and gsliced (the real binary, on the same simulated node) names the
// program's pod from its cgroup (a fake /proc, as the systemd cgroup driver writes it) and
// the API server's pod list.
TEST(KubernetesOnSim, GslicedLabelsTheAllocatedContainersProcessWithItsPod) {
  gslice::test::ShimEnv env("k8s-pods");
  env.vars["GSLICE_SIM_DEVICES"] = "1";
  env.vars["GSLICE_SIM_MEMORY"] = "4GiB";
  for (const char* k : {"GSLICE_SIM_STATE", "GSLICE_SIM_DEVICES", "GSLICE_SIM_MEMORY"})
    setenv(k, env.vars[k].c_str(), 1);
  const std::string nvml = std::string(GSLICE_TEST_SIM_DIR) + "/libnvidia-ml.so.1";
  auto source = MakeNvmlGpuSource(nvml);
  std::vector<GpuInfo> gpus;
  std::string err;
  ASSERT_TRUE(source->Discover(&gpus, &err)) << err;
  ASSERT_EQ(gpus.size(), 1u);

  fs::path dir = fs::temp_directory_path() / ("gslice-k8s-pods-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "proc");
  testing::FakeApiServer api;
  api.AddNode({{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "node-a"}}}});
  KubeClient kube(api.config());
  fs::create_directories(dir / "plugins");
  DevicePluginConfig config = PluginConfig(dir / "plugins", dir, env.ledger_path());
  testing::FakeKubelet kubelet(config.plugin_dir);
  DevicePluginRunner runner(config, source.get(), &kube);
  ASSERT_TRUE(runner.Start(&err)) << err;
  ASSERT_TRUE(kubelet.WaitForRegistrations(1, 10s));

  const std::string uid = "7c0e5a2b-1d3f-4e6a-9b8c-0d1e2f3a4b5c";
  const std::string cid = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00";
  Extender ext({}, &kube);
  ASSERT_TRUE(ext.Resync(&err)) << err;
  json pod = testing::MakePod("ml", "app", uid, 1, 1024, 20);
  api.AddPod(pod);
  ASSERT_EQ(ext.Filter({{"Pod", pod}, {"NodeNames", {"node-a"}}})["NodeNames"].size(), 1u);
  ASSERT_EQ(ext.Bind({{"PodName", "app"}, {"PodNamespace", "ml"}, {"PodUID", uid}, {"Node", "node-a"}})["Error"], "");
  auto stub = kubelet.Dial();
  grpc::ClientContext ctx;
  v1beta1::AllocateRequest req;
  req.add_container_requests()->add_devices_ids(gpus[0].uuid + "::0");
  v1beta1::AllocateResponse resp;
  grpc::Status st = stub->Allocate(&ctx, req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  for (const auto& [k, v] : resp.container_responses(0).envs()) env.vars[k] = v;
  EXPECT_EQ(env.vars["GSLICE_SLICE"], "ml.app.main");
  if (std::string(GSLICE_TEST_ASAN_RUNTIME).size() > 0)
    env.vars["LD_PRELOAD"] = std::string(GSLICE_TEST_ASAN_RUNTIME) + " " + env.vars["LD_PRELOAD"];

  // gsliced on the node, told where the API server and the (fake) /proc are.
  const std::string socket = (dir / "gsliced.sock").string();
  std::ofstream(dir / "gsliced.toml") << "socket = \"" << socket << "\"\n"
                                      << "database = \"" << (dir / "gsliced.db").string() << "\"\n"
                                      << "ledger = \"" << env.ledger_path() << "\"\n"
                                      << "nvml_library = \"" << nvml << "\"\n"
                                      << "sample_interval_ms = 100\n"
                                      << "[kubernetes]\n"
                                      << "node = \"node-a\"\n"
                                      << "apiserver = \"" << api.url() << "\"\n"
                                      << "proc_root = \"" << (dir / "proc").string() << "\"\n"
                                      << "retry_seconds = 1\n";
  const std::string log = (dir / "gsliced.log").string();
  pid_t daemon = fork();
  if (daemon == 0) {
    freopen(log.c_str(), "a", stderr);
    execl(GSLICED, GSLICED, "--config", (dir / "gsliced.toml").c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(daemon, 0);

  // The container's program holds 256 MiB; its cgroup says pod <uid>, container <cid>, and
  // the kubelet reports the container's ID in the pod's status.
  int in = -1, out = -1;
  int pid = env.Start({gslice::test::ClientPath(), "hold", std::to_string(256 * kMiB)}, &in, &out);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(gslice::test::ReadLine(out), "ok");
  fs::create_directories(dir / "proc" / std::to_string(pid));
  std::string systemd_uid = uid;
  std::replace(systemd_uid.begin(), systemd_uid.end(), '-', '_');
  std::ofstream(dir / "proc" / std::to_string(pid) / "cgroup")
      << "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" << systemd_uid
      << ".slice/cri-containerd-" << cid << ".scope\n";
  json running = api.Pod("ml", "app");
  running["status"]["phase"] = "Running";
  running["status"]["containerStatuses"] = json::array({{{"name", "main"}, {"containerID", "containerd://" + cid}}});
  api.AddPod(running);

  const std::string want = "slice=\"ml.app.main\",pid=\"" + std::to_string(pid) +
                           "\",pod=\"app\",namespace=\"ml\",container=\"main\"} ";
  std::string metrics;
  for (int i = 0; i < 600 && metrics.find(want) == std::string::npos; ++i) {
    std::this_thread::sleep_for(100ms);
    httplib::Client c(socket);
    c.set_address_family(AF_UNIX);
    if (auto r = c.Get("/metrics"); r && r->status == 200) metrics = r->body;
  }
  EXPECT_NE(metrics.find("gslice_process_memory_used_bytes{gpu=\"" + gpus[0].uuid + "\"," + want +
                         std::to_string(256 * kMiB) + "\n"),
            std::string::npos)
      << metrics << "\n" << ReadAll(log);
  EXPECT_NE(metrics.find("slice=\"ml.app.main\",user=\"unknown\",project=\"default\",class=\"guaranteed\",pod=\"app\",namespace=\"ml\"} 1\n"),
            std::string::npos)
      << metrics;
  // Prometheus reads the page as it is.
  std::ofstream(dir / "metrics.txt") << metrics;
  const fs::path remarks = dir / "promtool.txt";
  int rc = std::system(("promtool check metrics < " + (dir / "metrics.txt").string() + " > " + remarks.string() + " 2>&1").c_str());
  EXPECT_EQ(rc, 0) << ReadAll(remarks);
  EXPECT_EQ(ReadAll(remarks), "");

  close(in);
  int status = 0;
  waitpid(pid, &status, 0);
  close(out);
  kill(daemon, SIGTERM);
  waitpid(daemon, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadAll(log);
  runner.Stop();
  kubelet.Shutdown();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gslice::k8s
