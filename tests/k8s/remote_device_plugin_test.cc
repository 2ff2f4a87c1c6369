// The device plugin on a node that runs clients of remote GPUs (--remote-client): it
// advertises gslice.io/remote-gpu, and Allocate gives the container of a pod the extender
// placed remotely the forwarding client, its GPU node's address and its own copies of the
// node's CA and token - with the fake kubelet, the fake API server and the real extender, as
// kube-scheduler would drive them.
#include <gtest/gtest.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "fake_apiserver.h"
#include "fake_kubelet.h"
#include "gslice/k8s/device_plugin.h"
#include "gslice/k8s/extender.h"
#include "token.h"

namespace gslice::k8s {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::FakeApiServer;
using testing::FakeKubelet;
using namespace std::chrono_literals;

constexpr const char* kToken = "0123456789abcdef0123456789abcdef";
constexpr const char* kCa = "-----BEGIN CERTIFICATE-----\nMIIBdGVzdA==\n-----END CERTIFICATE-----\n";
constexpr uid_t kPodUser = 65534;  // nobody

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

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& p, const std::string& text, mode_t mode) {
  std::ofstream(p) << text;
  ASSERT_EQ(chmod(p.c_str(), mode), 0);
}

// What the client's ReadTokenFile says about `path` when run as `uid`: "" when it accepts it.
std::string ReadTokenAs(uid_t uid, const std::string& path) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string token, error;
    if (setgroups(0, nullptr) != 0 || setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0)
      error = "cannot become uid " + std::to_string(uid);
    else if (remote::ReadTokenFile(path, &token, &error) && token != kToken)
      error = "read another token: " + token;
    else if (error.empty() && token.empty())
      error = "empty token";
    (void)!write(fds[1], error.data(), error.size());
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return out;
}

class RemoteClientPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("gslice-dp-remote-" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "plugins");
    fs::create_directories(root_ / "secret");
    WriteFile(root_ / "secret/token", std::string(kToken) + "\n", 0600);
    WriteFile(root_ / "secret/ca.crt", kCa, 0400);
    api_.AddNode({{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "cpu-a"}, {"annotations", json::object()}}}});
    json gpu_node = testing::MakeNode("gpu-a", 1, 81920);
    gpu_node["metadata"]["annotations"]["gslice.io/remote-address"] = "tls://10.0.0.7:7070";
    api_.AddNode(gpu_node);
    kube_ = std::make_unique<KubeClient>(api_.config());
  }

  void TearDown() override {
    if (loop_.joinable()) {
      stop_ = true;
      loop_.join();
    }
    if (runner_) runner_->Stop();
    runner_.reset();
    kubelet_.reset();
    fs::remove_all(root_);
  }

  DevicePluginConfig Config() const {
    DevicePluginConfig config;
    config.plugin_dir = (root_ / "plugins").string();
    config.node_name = "cpu-a";
    config.remote_client = true;
    config.resource_name = std::string(kResourceRemoteGpu);
    config.socket_name = "gslice-remote.sock";
    config.slices_per_gpu = 4;
    config.remote_lib_host_dir = config.remote_lib_container_dir = "/usr/lib/gslice/remote";
    config.remote_credentials = {.ca_file = (root_ / "secret/ca.crt").string(),
                                 .token_file = (root_ / "secret/token").string(),
                                 .host_dir = (root_ / "creds").string()};
    config.poll = 50ms;
    return config;
  }

  // Starts the plugin and its loop and waits until the kubelet sees it; *error when refused.
  bool StartPlugin(const DevicePluginConfig& config, std::string* error) {
    kubelet_ = std::make_unique<FakeKubelet>(config.plugin_dir);
    runner_ = std::make_unique<DevicePluginRunner>(config, source_.get(), kube_.get());
    if (!runner_->Start(error)) return false;
    loop_ = std::thread([this] { runner_->Run(stop_); });
    return kubelet_->WaitForRegistrations(1, 10s);
  }

  // kube-scheduler with the extender: the pod runs on cpu-a, its slice is booked on gpu-a.
  void Schedule(const json& pod) {
    api_.AddPod(pod);
    Extender ext({}, kube_.get());
    std::string err;
    ASSERT_TRUE(ext.Resync(&err)) << err;
    json f = ext.Filter({{"Pod", pod}, {"NodeNames", {"cpu-a"}}});
    ASSERT_EQ(f["NodeNames"].size(), 1u) << f;
    json b = ext.Bind({{"PodName", pod["metadata"]["name"]},
                       {"PodNamespace", pod["metadata"]["namespace"]},
                       {"PodUID", pod["metadata"]["uid"]},
                       {"Node", "cpu-a"}});
    ASSERT_EQ(b["Error"], "") << b;
  }

  grpc::Status Allocate(const std::string& device, v1beta1::AllocateResponse* resp) {
    auto stub = kubelet_->Dial();
    grpc::ClientContext ctx;
    v1beta1::AllocateRequest req;
    req.add_container_requests()->add_devices_ids(device);
    return stub->Allocate(&ctx, req, resp);
  }

  std::string BindPhase(const std::string& pod) {
    return api_.Pod("team", pod)["metadata"]["annotations"].value("gslice.io/bind-phase", "");
  }

  fs::path root_;
  FakeApiServer api_;
  std::unique_ptr<KubeClient> kube_;
  std::unique_ptr<GpuSource> source_ = MakeNoGpuSource();
  std::unique_ptr<FakeKubelet> kubelet_;
  std::unique_ptr<DevicePluginRunner> runner_;
  std::atomic<bool> stop_{false};
  std::thread loop_;
};

TEST_F(RemoteClientPlugin, AdvertisesRemoteGpusAndSetsTheClientUp) {
  std::string err;
  ASSERT_TRUE(StartPlugin(Config(), &err)) << err;
  EXPECT_EQ(kubelet_->last_registration().resource_name(), "gslice.io/remote-gpu");
  kubelet_->Watch();
  ASSERT_TRUE(kubelet_->WaitForList([](const auto& l) { return testing::CountHealth(l, "Healthy") == 4; }, 10s));
  // A client node publishes no GPU inventory: the extender never places slices on it.
  EXPECT_FALSE(api_.Node("cpu-a")["metadata"]["annotations"].contains("gslice.io/gpus"));

  Schedule(RemotePod("nb", "u-nb", 8192));
  {
    v1beta1::AllocateResponse resp;
    grpc::Status st = Allocate("remote::2", &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(resp.container_responses_size(), 1);
    const auto& c = resp.container_responses(0);
    EXPECT_EQ(c.envs().at("GSLICE_REMOTE"), "tls://10.0.0.7:7070");
    EXPECT_EQ(c.envs().at("GSLICE_MEMORY"), "8192MiB");
    EXPECT_EQ(c.envs().at("GSLICE_CLASS"), "opportunistic");
    EXPECT_EQ(c.envs().at("GSLICE_IDLE_TIMEOUT"), "30m");
    EXPECT_EQ(c.envs().at("LD_LIBRARY_PATH"), "/usr/lib/gslice/remote");
    EXPECT_EQ(c.envs().at("GSLICE_REMOTE_TOKEN_FILE"), "/etc/gslice/remote/token");
    EXPECT_EQ(c.envs().at("GSLICE_REMOTE_CA"), "/etc/gslice/remote/ca.crt");
    EXPECT_EQ(c.envs().count("LD_PRELOAD"), 0u);        // no interposer: no local driver
    EXPECT_EQ(c.envs().count("CUDA_VISIBLE_DEVICES"), 0u);
    EXPECT_EQ(c.devices_size(), 0);                       // and no /dev/nvidia*
    ASSERT_EQ(c.mounts_size(), 2);
    EXPECT_EQ(c.mounts(0).host_path(), "/usr/lib/gslice/remote");
    EXPECT_TRUE(c.mounts(0).read_only());
    EXPECT_EQ(c.mounts(1).host_path(), (root_ / "creds/u-nb/0").string());
    EXPECT_EQ(c.mounts(1).container_path(), "/etc/gslice/remote");
    EXPECT_TRUE(c.mounts(1).read_only());
    // The spec names no user: the copy is root's (the image's user, root unless it says).
    struct stat token {};
    ASSERT_EQ(stat((root_ / "creds/u-nb/0/token").c_str(), &token), 0);
    EXPECT_EQ(token.st_uid, 0u);
    EXPECT_EQ(token.st_mode & 07777, 0400u);
  }
  EXPECT_EQ(BindPhase("nb"), "allocated");
  {
    // Nothing else is waiting: a second Allocate is refused with the reason.
    v1beta1::AllocateResponse resp;
    grpc::Status st = Allocate("remote::3", &resp);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.error_message().find("gslice.io/remote-gpu"), std::string::npos) << st.error_message();
  }
}

// A pod that runs as a non-root user gets a token copy that user alone may read, which the
// client's own rule (no group or other access) accepts; copies follow a rotated Secret and go
// with their pod.
TEST_F(RemoteClientPlugin, GivesANonRootContainerItsOwnTokenCopy) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give files to another user";
  ASSERT_EQ(chmod(root_.c_str(), 0755), 0);
  // A plugin started with a strict umask still makes folders the pod's user can pass through.
  const mode_t umask_before = umask(077);
  std::string err;
  ASSERT_TRUE(StartPlugin(Config(), &err)) << err;
  json pod = RemotePod("nb", "u-nb", 8192);
  pod["spec"]["securityContext"] = {{"runAsUser", kPodUser}, {"runAsNonRoot", true}};
  Schedule(pod);
  v1beta1::AllocateResponse resp;
  grpc::Status st = Allocate("remote::0", &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const auto& c = resp.container_responses(0);
  ASSERT_EQ(c.mounts_size(), 2);
  const fs::path dir = c.mounts(1).host_path();
  EXPECT_EQ(dir, root_ / "creds/u-nb/0");
  umask(umask_before);

  struct stat token {}, ca {}, folder {};
  ASSERT_EQ(stat((dir / "token").c_str(), &token), 0);
  ASSERT_EQ(stat((dir / "ca.crt").c_str(), &ca), 0);
  ASSERT_EQ(stat((root_ / "creds").c_str(), &folder), 0);
  EXPECT_EQ(token.st_uid, kPodUser);
  EXPECT_EQ(token.st_mode & 07777, 0400u);
  EXPECT_EQ(ca.st_mode & 07777, 0444u);
  EXPECT_EQ(folder.st_mode & 07777, 0711u);  // no one else lists the pods' folders
  EXPECT_EQ(Slurp(dir / "token"), std::string(kToken) + "\n");
  EXPECT_EQ(Slurp(dir / "ca.crt"), kCa);
  // The pod's user reads it with the client's code; another user cannot.
  EXPECT_EQ(ReadTokenAs(kPodUser, (dir / "token").string()), "");
  EXPECT_NE(ReadTokenAs(kPodUser - 1, (dir / "token").string()).find("Permission denied"), std::string::npos);

  // The Secret is rotated (kubelet swaps the files): running pods' copies follow.
  const std::string rotated = "fedcba9876543210fedcba9876543210";
  fs::remove(root_ / "secret/token");
  WriteFile(root_ / "secret/token", rotated + "\n", 0600);
  ASSERT_TRUE(runner_->service()->TidyRemoteCredentials(&err)) << err;
  EXPECT_EQ(Slurp(dir / "token"), rotated + "\n");
  ASSERT_EQ(stat((dir / "token").c_str(), &token), 0);
  EXPECT_EQ(token.st_uid, kPodUser);
  EXPECT_EQ(token.st_mode & 07777, 0400u);

  // The pod is gone: so are its copies.
  api_.DeletePod("team", "nb");
  ASSERT_TRUE(runner_->service()->TidyRemoteCredentials(&err)) << err;
  EXPECT_FALSE(fs::exists(root_ / "creds/u-nb"));
  EXPECT_TRUE(fs::exists(root_ / "creds"));
}

// With --remote-token-dir each namespace has a token of its own (the file named after it):
// its pods get copies of that one, a namespace without one is refused and never given
// another's, and a namespace whose token is removed loses its pods' copies.
TEST_F(RemoteClientPlugin, EachNamespaceGetsItsOwnTokenAndNoOther) {
  const std::string team = "1111111111111111team", lab = "2222222222222222lab";
  fs::create_directories(root_ / "tokens");
  WriteFile(root_ / "tokens/team", team + "\n", 0600);
  WriteFile(root_ / "tokens/lab", lab + "\n", 0600);
  DevicePluginConfig config = Config();
  config.remote_credentials.token_file.clear();
  config.remote_credentials.token_dir = (root_ / "tokens").string();
  std::string err;
  ASSERT_TRUE(StartPlugin(config, &err)) << err;
  const auto allocate = [&](const std::string& ns, const std::string& name, const std::string& device,
                            v1beta1::AllocateResponse* resp) {
    json pod = RemotePod(name, "u-" + name, 4096);
    pod["metadata"]["namespace"] = ns;
    Schedule(pod);
    return Allocate(device, resp);
  };
  v1beta1::AllocateResponse a, b, c;
  grpc::Status st = allocate("team", "t1", "remote::0", &a);
  ASSERT_TRUE(st.ok()) << st.error_message();
  st = allocate("lab", "l1", "remote::1", &b);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(Slurp(root_ / "creds/u-t1/0/token"), team + "\n");
  EXPECT_EQ(Slurp(root_ / "creds/u-l1/0/token"), lab + "\n");
  st = allocate("other", "o1", "remote::2", &c);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.error_message().find("no token for namespace other"), std::string::npos) << st.error_message();
  EXPECT_FALSE(fs::exists(root_ / "creds/u-o1"));
  // The lab's token is revoked: its pod's copies go, the team's stay.
  fs::remove(root_ / "tokens/lab");
  EXPECT_FALSE(runner_->service()->TidyRemoteCredentials(&err));
  EXPECT_NE(err.find("no token for namespace lab"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(root_ / "creds/u-l1"));
  EXPECT_EQ(Slurp(root_ / "creds/u-t1/0/token"), team + "\n");
  // One way of handing out tokens at a time, and a folder that is one.
  config.remote_credentials.token_file = (root_ / "secret/token").string();
  {
    DevicePluginRunner runner(config, source_.get(), kube_.get());
    EXPECT_FALSE(runner.Start(&err));
    EXPECT_NE(err.find("give one"), std::string::npos) << err;
  }
  config.remote_credentials.token_file.clear();
  config.remote_credentials.token_dir = (root_ / "tokens/team").string();
  {
    DevicePluginRunner runner(config, source_.get(), kube_.get());
    EXPECT_FALSE(runner.Start(&err));
    EXPECT_NE(err.find("not a folder"), std::string::npos) << err;
  }
}

TEST_F(RemoteClientPlugin, RefusesAMissingOrExposedTokenFile) {
  std::string err;
  DevicePluginConfig config = Config();
  config.remote_credentials.token_file = (root_ / "secret/absent").string();
  {
    DevicePluginRunner runner(config, source_.get(), kube_.get());
    EXPECT_FALSE(runner.Start(&err));
    EXPECT_NE(err.find("--remote-token-file"), std::string::npos) << err;
    EXPECT_NE(err.find(config.remote_credentials.token_file + ": No such file"), std::string::npos) << err;
  }
  ASSERT_EQ(chmod((root_ / "secret/token").c_str(), 0640), 0);
  {
    DevicePluginRunner runner(Config(), source_.get(), kube_.get());
    EXPECT_FALSE(runner.Start(&err));
    EXPECT_NE(err.find("group or others"), std::string::npos) << err;
  }
  ASSERT_EQ(chmod((root_ / "secret/token").c_str(), 0600), 0);
  config = Config();
  config.remote_credentials.token_file.clear();
  {
    DevicePluginRunner runner(config, source_.get(), kube_.get());
    EXPECT_FALSE(runner.Start(&err));  // a CA alone serves no tls:// GPU node
    EXPECT_NE(err.find("without --remote-token-file"), std::string::npos) << err;
  }

  // The file goes away while the plugin runs: Allocate says so and consumes nothing.
  ASSERT_TRUE(StartPlugin(Config(), &err)) << err;
  Schedule(RemotePod("nb", "u-nb", 8192));
  fs::remove(root_ / "secret/token");
  v1beta1::AllocateResponse resp;
  grpc::Status st = Allocate("remote::0", &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find((root_ / "secret/token").string() + ": No such file"), std::string::npos)
      << st.error_message();
  EXPECT_NE(st.error_message().find("team/nb"), std::string::npos) << st.error_message();
  EXPECT_EQ(BindPhase("nb"), "allocating");
  EXPECT_FALSE(fs::exists(root_ / "creds/u-nb"));

  // Back: the same pod is allocated.
  WriteFile(root_ / "secret/token", std::string(kToken) + "\n", 0600);
  st = Allocate("remote::0", &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(BindPhase("nb"), "allocated");
}

TEST_F(RemoteClientPlugin, RefusesWhatCannotWork) {
  std::string err;
  DevicePluginConfig config = Config();
  config.remote_credentials = {.host_dir = (root_ / "creds").string()};  // no token, no CA
  ASSERT_TRUE(StartPlugin(config, &err)) << err;
  Schedule(RemotePod("nb", "u-nb", 8192));
  v1beta1::AllocateResponse resp;
  grpc::Status st = Allocate("remote::0", &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("--remote-token-file"), std::string::npos) << st.error_message();
  EXPECT_EQ(BindPhase("nb"), "allocating");
}

TEST_F(RemoteClientPlugin, RefusesRunAsNonRootWithoutAUser) {
  std::string err;
  ASSERT_TRUE(StartPlugin(Config(), &err)) << err;
  json pod = RemotePod("nb", "u-nb", 8192);
  pod["spec"]["containers"][0]["securityContext"] = {{"runAsNonRoot", true}};
  Schedule(pod);
  v1beta1::AllocateResponse resp;
  grpc::Status st = Allocate("remote::0", &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("runAsNonRoot without runAsUser"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("container main"), std::string::npos) << st.error_message();
  EXPECT_EQ(BindPhase("nb"), "allocating");
}

// The binary: a missing token file stops it at start, with the reason.
TEST(RemoteClientPluginBinary, RefusesAMissingTokenFileAtStart) {
  const std::string absent = "/tmp/gslice-dp-remote-absent-" + std::to_string(getpid());
  struct Case {
    std::string flags, says;
  } cases[] = {
      {"--remote-client --remote-token-file " + absent, absent + ": No such file or directory"},
      {"--remote-token-file " + absent, "are for --remote-client nodes"},
  };
  for (const Case& c : cases) {
    const std::string cmd = std::string(GSLICE_DEVICE_PLUGIN_BIN) + " --node-name n --apiserver http://127.0.0.1:1 " +
                            c.flags + " 2>&1";
    FILE* out = popen(cmd.c_str(), "r");
    ASSERT_NE(out, nullptr);
    std::string text;
    char buf[512];
    for (size_t n; (n = fread(buf, 1, sizeof buf, out)) > 0;) text.append(buf, n);
    const int rc = pclose(out);
    EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 2) << cmd << ": " << text;
    EXPECT_NE(text.find(c.says), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace gslice::k8s
