// A remote pod end to end on the simulated driver: the GPU node's gslice-remoted serves tls://
// with a token; the extender places the pod's slice there; the client node's device plugin
// (--remote-client, with the node's CA and token) answers Allocate; the container - here a
// process with the answer's environment, the answer's mounts resolved to their host folders,
// running as the pod's non-root user - reaches its remote GPU with the copies it was given.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fake_apiserver.h"
#include "fake_kubelet.h"
#include "gslice/k8s/device_plugin.h"
#include "gslice/k8s/extender.h"
#include "sim_world.h"
#include "test_support.h"
#include "tls_files.h"

namespace gslice::k8s {
namespace {

namespace fs = std::filesystem;
using gslice::test::Child;
using nlohmann::json;
using testing::FakeApiServer;
using testing::FakeKubelet;
using namespace std::chrono_literals;

const std::string kBin = GSLICE_TEST_BIN;
const std::string kProbe = GSLICE_TEST_PROBE;
constexpr int kPodUser = 65534;  // nobody

std::string Prefix() { return "/dev/shm/gslice-test-" + std::to_string(getpid()) + "-k8s-remote"; }

class RemotePodOnSim : public ::testing::Test {
 protected:
  void SetUp() override {
    gslice::test::SetUpSimWorld(Prefix(), {"GSLICE_IDLE_TIMEOUT", "GSLICE_REMOTE_CA", "GSLICE_REMOTE_TOKEN_FILE"});
    if (const std::string asan = GSLICE_TEST_ASAN_RUNTIME; !asan.empty()) setenv("LD_PRELOAD", asan.c_str(), 1);
    dir_ = "/tmp/gslice-test-" + std::to_string(getpid()) + "-k8s-remote";
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "plugins");
    chmod(dir_.c_str(), 0755);
  }

  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    gslice::test::RemoveSimWorld(Prefix());
  }

  fs::path dir_;
  // The GPU node's certificate for 127.0.0.1, its key, the CA that signed it, and the token.
  gslice::test::TlsFiles tls_{"k8s-remote-tls"};
};

TEST_F(RemotePodOnSim, ANonRootPodReachesItsRemoteGpuWithTheCopiesItWasGiven) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run the container as another user";
  ASSERT_TRUE(tls_.ok()) << "the openssl command is needed to make the test certificates";
  Child server({kBin + "/gslice-remoted", "--listen", "tls://127.0.0.1:0", "--cert", tls_("server.pem"),
                "--key", tls_("server.key"), "--token-file", tls_("token"), "--token-user", "root",
                "--allow-root-tenant", "--sim"});
  const std::string line = server.ReadUntil("gslice-remoted: listening on", 20000);
  const size_t at = line.find("tls://");
  ASSERT_NE(at, std::string::npos) << line;
  const std::string address = line.substr(at, line.find(' ', at) - at);

  FakeApiServer api;
  api.AddNode({{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "cpu-a"}, {"annotations", json::object()}}}});
  json gpu_node = testing::MakeNode("gpu-a", 1, 2048);
  gpu_node["metadata"]["annotations"]["gslice.io/remote-address"] = address;
  api.AddNode(gpu_node);
  KubeClient kube(api.config());

  DevicePluginConfig config;
  config.plugin_dir = (dir_ / "plugins").string();
  config.node_name = "cpu-a";
  config.remote_client = true;
  config.resource_name = std::string(kResourceRemoteGpu);
  config.socket_name = "gslice-remote.sock";
  config.slices_per_gpu = 2;
  config.remote_lib_host_dir = config.remote_lib_container_dir = kBin + "/../lib/remote";
  config.remote_credentials = {.ca_file = tls_("ca.pem"),
                               .token_file = tls_("token"),
                               .host_dir = (dir_ / "creds").string()};
  config.poll = 50ms;
  FakeKubelet kubelet(config.plugin_dir);
  auto source = MakeNoGpuSource();
  DevicePluginRunner runner(config, source.get(), &kube);
  std::string err;
  ASSERT_TRUE(runner.Start(&err)) << err;
  ASSERT_TRUE(kubelet.WaitForRegistrations(1, 10s));

  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"namespace", "team"}, {"name", "nb"}, {"uid", "u-nb"}, {"annotations", json::object()}}},
              {"spec",
               {{"schedulerName", "gslice-scheduler"},
                {"securityContext", {{"runAsUser", kPodUser}, {"runAsNonRoot", true}}},
                {"containers",
                 {{{"name", "main"},
                   {"resources", {{"limits", {{"gslice.io/remote-gpu", "1"}, {"gslice.io/remote-memory", "1024"}}}}}}}}}},
              {"status", {{"phase", "Pending"}}}};
  api.AddPod(pod);
  Extender ext({}, &kube);
  ASSERT_TRUE(ext.Resync(&err)) << err;
  ASSERT_EQ(ext.Filter({{"Pod", pod}, {"NodeNames", {"cpu-a"}}})["NodeNames"].size(), 1u);
  json b = ext.Bind({{"PodName", "nb"}, {"PodNamespace", "team"}, {"PodUID", "u-nb"}, {"Node", "cpu-a"}});
  ASSERT_EQ(b["Error"], "") << b;

  auto stub = kubelet.Dial();
  grpc::ClientContext ctx;
  v1beta1::AllocateRequest req;
  req.add_container_requests()->add_devices_ids("remote::0");
  v1beta1::AllocateResponse resp;
  grpc::Status st = stub->Allocate(&ctx, req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const auto& c = resp.container_responses(0);

  // The container runtime's part: the answer's variables, with each mounted path seen at its
  // host folder (this test has no mount namespace of its own).
  std::vector<std::string> env = {"GSLICE_LOG=info"};
  for (const auto& [name, value] : c.envs()) {
    std::string v = value;
    for (const auto& m : c.mounts())
      if (v.rfind(m.container_path(), 0) == 0) v = m.host_path() + v.substr(m.container_path().size());
    env.push_back(name + "=" + v);
  }
  auto run_as = [&](int uid) {
    Child container({"/usr/bin/setpriv", "--reuid=" + std::to_string(uid), "--regid=" + std::to_string(uid),
                     "--clear-groups", "--", kProbe, "alloc", "4096"},
                    env);
    std::string out;
    const int code = container.Wait(&out, 60000);
    return std::make_pair(code, out);
  };
  auto [code, out] = run_as(kPodUser);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("(TLS), worker pid"), std::string::npos) << out;  // the CA verified the server
  EXPECT_NE(out.find("CUDA_SUCCESS\n"), std::string::npos) << out;     // and the token let it in

  // Another user cannot use the pod's copy.
  auto [other_code, other] = run_as(kPodUser - 1);
  EXPECT_NE(other.find("token file " + (dir_ / "creds/u-nb/0/token").string() + ": Permission denied"),
            std::string::npos)
      << other;
  EXPECT_EQ(other.find("worker pid"), std::string::npos) << other;

  runner.Stop();
  server.Kill(SIGTERM);
  server.Wait(nullptr, 10000);
}

}  // namespace
}  // namespace gslice::k8s
