// The DRA path on the simulated driver: the plugin finds the GPUs through NVML (the simulated
// libnvidia-ml.so.1) and publishes them, a claim allocated by the test is prepared through
// the fake kubelet as a slice of the real gsliced, and a CUDA program started with exactly
// the environment of the claim's CDI spec (plus the simulator's own variables, which stand
// for the real driver) sees the claim's memory as its GPU's and cannot allocate past it.
// Unprepare deletes the slice from gsliced.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "fake_apiserver.h"
#include "fake_dra_kubelet.h"
#include "gslice/k8s/dra_plugin.h"
#include "gslice/ledger.h"
#include "gslice/suspend_board.h"
#include "shim_env.h"

namespace gslice::k8s {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;
constexpr uint64_t kMiB = 1 << 20;

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// GET on gsliced's socket: (status, body); status 0 when it does not answer.
std::pair<int, json> Gsliced(const std::string& socket, const std::string& path) {
  httplib::Client c(socket);
  c.set_address_family(AF_UNIX);
  auto r = c.Get(path);
  if (!r) return {0, json()};
  return {r->status, json::parse(r->body, nullptr, false)};
}

TEST(DraOnSim, PreparedClaimRunsInsideItsSliceWithTheCdiEnvironment) {
  gslice::test::ShimEnv env("dra-e2e");
  env.vars["GSLICE_SIM_DEVICES"] = "2";
  env.vars["GSLICE_SIM_MEMORY"] = "4GiB";
  for (const char* k : {"GSLICE_SIM_STATE", "GSLICE_SIM_DEVICES", "GSLICE_SIM_MEMORY"})
    setenv(k, env.vars[k].c_str(), 1);
  const std::string nvml = std::string(GSLICE_TEST_SIM_DIR) + "/libnvidia-ml.so.1";
  auto source = MakeNvmlGpuSource(nvml);
  std::vector<GpuInfo> gpus;
  std::string err;
  ASSERT_TRUE(source->Discover(&gpus, &err)) << err;
  ASSERT_EQ(gpus.size(), 2u);

  const fs::path dir = fs::temp_directory_path() / ("gslice-dra-sim-" + std::to_string(getpid()));
  fs::remove_all(dir);
  for (const char* d : {"registry", "plugin", "cdi"}) fs::create_directories(dir / d);
  struct Cleanup {
    fs::path dir;
    pid_t daemon = -1;
    ~Cleanup() {
      if (daemon > 0) {
        kill(daemon, SIGTERM);
        waitpid(daemon, nullptr, 0);
      }
      fs::remove_all(dir);
    }
  } cleanup{dir};

  // gsliced on the simulated node, with the test's ledger.
  const std::string socket = (dir / "gsliced.sock").string();
  std::ofstream(dir / "gsliced.toml") << "socket = \"" << socket << "\"\n"
                                      << "database = \"" << (dir / "gsliced.db").string() << "\"\n"
                                      << "ledger = \"" << env.ledger_path() << "\"\n"
                                      << "nvml_library = \"" << nvml << "\"\n"
                                      << "sample_interval_ms = 100\n";
  const std::string log = (dir / "gsliced.log").string();
  cleanup.daemon = fork();
  if (cleanup.daemon == 0) {
    if (!freopen(log.c_str(), "a", stderr)) _exit(126);
    execl(GSLICED, GSLICED, "--config", (dir / "gsliced.toml").c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(cleanup.daemon, 0);
  for (int i = 0; i < 200 && Gsliced(socket, "/v1/gpus").first != 200; ++i) std::this_thread::sleep_for(50ms);
  ASSERT_EQ(Gsliced(socket, "/v1/gpus").first, 200) << ReadAll(log);

  testing::FakeApiServer api;
  KubeClient kube(api.config());
  DraPluginConfig config;
  config.node_name = config.container.node_name = "node-a";
  config.registry_dir = (dir / "registry").string();
  config.plugin_dir = (dir / "plugin").string();
  config.cdi_dir = (dir / "cdi").string();
  config.container.shim_host_dir = config.container.shim_container_dir = GSLICE_TEST_SHIM_DIR;
  config.container.ledger_host_path = config.container.ledger_container_path = env.ledger_path();
  config.container.board_host_path = config.container.board_container_path = (dir / "board").string();
  config.container.dev_root = (dir / "no-dev").string();
  ASSERT_TRUE(CreateSuspendBoard(config.container.board_host_path.c_str(), &err)) << err;
  auto store = MakeGslicedSliceStore(socket, env.ledger_path());
  DraPluginRunner runner(config, source.get(), &kube, store.get());
  ASSERT_TRUE(runner.Start(&err)) << err;
  testing::FakeDraKubelet kubelet(config.registry_dir);
  ASSERT_TRUE(kubelet.Register(10s, &err)) << err;

  // The scheduler's view: both GPUs with their whole memory to share.
  json published = api.Resource("/apis/resource.k8s.io/v1/resourceslices/node-a-gslice-io");
  ASSERT_EQ(published["spec"]["devices"].size(), 2u) << published.dump();
  EXPECT_EQ(published["spec"]["devices"][1]["attributes"]["uuid"]["string"], gpus[1].uuid);
  EXPECT_EQ(published["spec"]["devices"][1]["capacity"]["memory"]["value"], std::to_string(4096 * kMiB));

  // The scheduler allocated 1 GiB and 20% of gpu-1 to ml/train.
  json claim = {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata", {{"name", "train"}, {"namespace", "ml"}, {"uid", "5d1c0a2e-7f3b-4c6d-8e9f-0a1b2c3d4e5f"}}},
      {"status",
       {{"allocation",
         {{"devices",
           {{"results", json::array({{{"request", "gpu"}, {"driver", "gslice.io"}, {"pool", "node-a"},
                                      {"device", "gpu-1"}, {"shareID", "9a8b7c6d-0000-4000-8000-000000000001"},
                                      {"consumedCapacity", {{"memory", "1Gi"}, {"compute", "20"}}}}})},
            {"config", json::array({{{"source", "FromClaim"},
                                     {"requests", {"gpu"}},
                                     {"opaque",
                                      {{"driver", "gslice.io"},
                                       {"parameters", {{"apiVersion", "gslice.io/v1alpha1"},
                                                       {"kind", "SliceParameters"},
                                                       {"idleTimeout", "15m"}}}}}}})}}}}}}}};
  api.PutResource("/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/train", claim);
  const auto ref = testing::MakeClaimRef("ml", "train", "5d1c0a2e-7f3b-4c6d-8e9f-0a1b2c3d4e5f");
  grpc::Status st;
  auto resp = kubelet.Prepare(ref, &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.claims().at(ref.uid()).error(), "") << ReadAll(log);
  ASSERT_EQ(resp.claims().at(ref.uid()).devices(0).cdi_device_ids(0), "gslice.io/slice=ml.train.gpu");

  // gsliced admitted it: guaranteed, 1 GiB of gpu-1, the claim's idle timeout.
  auto [status, slice] = Gsliced(socket, "/v1/slices/ml.train.gpu");
  ASSERT_EQ(status, 200) << slice.dump() << ReadAll(log);
  EXPECT_EQ(slice["class"], "guaranteed") << slice.dump();
  EXPECT_EQ(slice["idle_timeout_s"], 900) << slice.dump();
  EXPECT_EQ(slice["user"], "ml") << slice.dump();

  // The container: the CDI spec's environment, and nothing else of gslice's.
  json cdi = json::parse(ReadAll(dir / "cdi" / ("gslice.io-" + ref.uid() + ".json")), nullptr, false);
  ASSERT_TRUE(cdi.is_object());
  ASSERT_EQ(cdi["devices"][0]["name"], "ml.train.gpu");
  std::map<std::string, std::string> vars;
  for (const char* k : {"GSLICE_REAL_DRIVER", "GSLICE_REAL_NVML", "GSLICE_SIM_STATE", "GSLICE_SIM_DEVICES",
                        "GSLICE_SIM_MEMORY", "ASAN_OPTIONS"})
    vars[k] = env.vars[k];
  for (const json& e : cdi["devices"][0]["containerEdits"]["env"]) {
    const std::string kv = e.get<std::string>();
    vars[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  }
  EXPECT_EQ(vars["CUDA_VISIBLE_DEVICES"], gpus[1].uuid);
  EXPECT_EQ(vars["GSLICE_MEMORY"], "1024MiB");
  if (std::string(GSLICE_TEST_ASAN_RUNTIME).size() > 0)
    vars["LD_PRELOAD"] = std::string(GSLICE_TEST_ASAN_RUNTIME) + " " + vars["LD_PRELOAD"];
  env.vars = vars;
  gslice::test::ChildResult r = env.Run({gslice::test::ClientPath(), "info"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("total=" + std::to_string(1024 * kMiB)), std::string::npos) << r.out;
  r = env.Run({gslice::test::ClientPath(), "hold", std::to_string(256 * kMiB)});
  EXPECT_NE(r.out.find("ok"), std::string::npos) << r.out << r.err;
  r = env.Run({gslice::test::ClientPath(), "hold", std::to_string(1024 * kMiB)});
  EXPECT_NE(r.out.find("oom"), std::string::npos) << r.out << r.err;

  // A claim reserved by a pod that runs as uid 65534: its slice's usage file is that uid's
  // in the node ledger (so the pod's processes charge it), and gsliced leaves it so.
  json pod = testing::MakePod("ml", "svc", "pod-svc", 0, 0, 0);
  pod["spec"]["securityContext"] = {{"runAsUser", 65534}};
  api.AddPod(pod);
  json claim2 = claim;
  claim2["metadata"] = {{"name", "svc"}, {"namespace", "ml"}, {"uid", "6e2d1b3f-8a4c-4d7e-9f0a-1b2c3d4e5f60"}};
  claim2["status"]["reservedFor"] = json::array({{{"resource", "pods"}, {"name", "svc"}, {"uid", "pod-svc"}}});
  api.PutResource("/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/svc", claim2);
  const auto ref2 = testing::MakeClaimRef("ml", "svc", "6e2d1b3f-8a4c-4d7e-9f0a-1b2c3d4e5f60");
  ASSERT_EQ(kubelet.Prepare(ref2).claims().at(ref2.uid()).error(), "") << ReadAll(log);
  std::this_thread::sleep_for(500ms);  // gsliced samples every 100 ms
  {
    Ledger ledger;
    ASSERT_EQ(ledger.Open(env.ledger_path().c_str(), 2000, false), LedgerError::kOk);
    const int index = ledger.FindSlice("ml.svc.gpu");
    ASSERT_GE(index, 0);
    EXPECT_EQ(ledger.limits()->slices[index].owner_uid, 65534u);
    struct stat file {};
    ASSERT_EQ(stat((env.ledger_path() + "/slice-" + std::to_string(index)).c_str(), &file), 0);
    EXPECT_EQ(file.st_uid, 65534u);
  }
  EXPECT_EQ(kubelet.Unprepare(ref2).claims().at(ref2.uid()).error(), "");

  // Unprepare: the slice leaves gsliced, the CDI spec leaves the node.
  auto un = kubelet.Unprepare(ref, &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(un.claims().at(ref.uid()).error(), "");
  EXPECT_EQ(Gsliced(socket, "/v1/slices/ml.train.gpu").first, 404);
  EXPECT_FALSE(fs::exists(dir / "cdi" / ("gslice.io-" + ref.uid() + ".json")));
  runner.Stop();
}

}  // namespace
}  // namespace gslice::k8s
