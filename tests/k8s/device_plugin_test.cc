#include "gslice/k8s/device_plugin.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "fake_apiserver.h"
#include "fake_kubelet.h"
#include "gslice/k8s/extender.h"
#include "gslice/ledger.h"
#include "gslice/mps_client.h"

extern char** environ;

namespace gslice::k8s {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::FakeApiServer;
using testing::FakeKubelet;
using namespace std::chrono_literals;

constexpr const char* kGpu0 = "GPU-11111111-2222-3333-4444-000000000000";
constexpr const char* kGpu1 = "GPU-11111111-2222-3333-4444-000000000001";

void WriteInventory(const fs::path& file, bool gpu1_healthy) {
  std::ofstream(file) << EncodeGpuInventory({{kGpu0, 0, 40960, "sim", true}, {kGpu1, 1, 40960, "sim", gpu1_healthy}});
}

// A node of two GPUs as the plugin sees it: plugin dir, inventory file, /dev, shim dir.
class DevicePluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("gslice-dp-" + std::to_string(getpid()) + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    for (const char* d : {"plugins", "dev", "shim"}) fs::create_directories(root_ / d);
    for (const char* n : {"nvidia0", "nvidia1", "nvidiactl"}) std::ofstream(root_ / "dev" / n) << "";
    WriteInventory(root_ / "gpus.json", true);
    config_.plugin_dir = (root_ / "plugins").string();
    config_.node_name = "node-a";
    config_.dev_root = (root_ / "dev").string();
    config_.shim_host_dir = (root_ / "shim").string();
    config_.ledger_host_path = (root_ / "ledger").string();
    config_.board_host_path = (root_ / "suspend").string();
    config_.poll = 50ms;
    api_.AddNode({{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "node-a"}}}});
  }
  void TearDown() override { fs::remove_all(root_); }

  // Schedules a pod the way kube-scheduler would with the extender: filter, then bind.
  void Schedule(const json& pod) {
    api_.AddPod(pod);
    Extender ext({}, &kube_);
    std::string err;
    ASSERT_TRUE(ext.Resync(&err)) << err;
    json f = ext.Filter({{"Pod", pod}, {"NodeNames", {"node-a"}}});
    ASSERT_EQ(f["NodeNames"].size(), 1u) << f;
    json b = ext.Bind({{"PodName", pod["metadata"]["name"]}, {"PodNamespace", pod["metadata"]["namespace"]},
                       {"PodUID", pod["metadata"]["uid"]}, {"Node", "node-a"}});
    ASSERT_EQ(b["Error"], "") << b;
  }

  fs::path root_;
  DevicePluginConfig config_;
  FakeApiServer api_;
  KubeClient kube_{api_.config()};
};

TEST_F(DevicePluginTest, FullSequenceHealthFlipAndKubeletRestart) {
  auto kubelet = std::make_unique<FakeKubelet>(config_.plugin_dir);
  auto source = MakeFileGpuSource((root_ / "gpus.json").string());
  DevicePluginRunner runner(config_, source.get(), &kube_);
  std::string err;
  ASSERT_TRUE(runner.Start(&err)) << err;
  std::atomic<bool> stop{false};
  std::thread loop([&] { runner.Run(stop); });

  // Register.
  ASSERT_TRUE(kubelet->WaitForRegistrations(1, 10s));
  v1beta1::RegisterRequest reg = kubelet->last_registration();
  EXPECT_EQ(reg.version(), "v1beta1");
  EXPECT_EQ(reg.resource_name(), "gslice.io/gpu");
  EXPECT_EQ(reg.endpoint(), "gslice.sock");
  EXPECT_TRUE(reg.options().pre_start_required());
  EXPECT_TRUE(reg.options().get_preferred_allocation_available());

  auto stub = kubelet->Dial();
  {
    grpc::ClientContext ctx;
    v1beta1::DevicePluginOptions opts;
    ASSERT_TRUE(stub->GetDevicePluginOptions(&ctx, v1beta1::Empty(), &opts).ok());
    EXPECT_TRUE(opts.pre_start_required());
  }

  // Watch: 2 GPUs x 16 slices, all healthy.
  kubelet->Watch();
  ASSERT_TRUE(kubelet->WaitForList([](const auto& l) { return testing::CountHealth(l, "Healthy") == 32; }, 10s));

  // The node's inventory is on the API server for the extender.
  json node = api_.Node("node-a");
  auto inv = DecodeGpuInventory(node["metadata"]["annotations"].value("gslice.io/gpus", ""), &err);
  ASSERT_TRUE(inv) << err;
  EXPECT_EQ(inv->size(), 2u);
  EXPECT_EQ(node["metadata"]["annotations"]["gslice.io/slices-per-gpu"], "16");

  // Put a slice on GPU 1 first so the next pod's binpack choice is GPU 1, not the first one.
  Schedule(testing::MakePod("team", "filler", "u-filler", 1, 36864, 0));
  json pod = testing::MakePod("team", "p1", "u-p1", 1, 4096, 25, "opportunistic");
  pod["metadata"]["annotations"]["gslice.io/compute-cap"] = "40%";
  Schedule(pod);
  std::string filler_gpu, p1_gpu;
  {
    auto a = DecodeAssignment(api_.Pod("team", "filler")["metadata"]["annotations"]["gslice.io/assignment"].get<std::string>(), &err);
    ASSERT_TRUE(a) << err;
    filler_gpu = a->containers[0].gpus[0].uuid;
    auto b = DecodeAssignment(api_.Pod("team", "p1")["metadata"]["annotations"]["gslice.io/assignment"].get<std::string>(), &err);
    ASSERT_TRUE(b) << err;
    p1_gpu = b->containers[0].gpus[0].uuid;
    ASSERT_EQ(p1_gpu, filler_gpu) << "binpack puts 4 GiB next to the 36 GiB slice (exact fit)";
  }

  // Allocate the filler first (it was bound first), by the kubelet's own choice of device.
  {
    grpc::ClientContext ctx;
    v1beta1::AllocateRequest req;
    req.add_container_requests()->add_devices_ids(filler_gpu + "::3");
    v1beta1::AllocateResponse resp;
    ASSERT_TRUE(stub->Allocate(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.container_responses(0).envs().at("GSLICE_SLICE"), "team.filler.main");
  }

  // Preferred allocation steers the kubelet to the assigned GPU.
  std::string device;
  {
    grpc::ClientContext ctx;
    v1beta1::PreferredAllocationRequest req;
    auto* c = req.add_container_requests();
    for (const char* g : {kGpu0, kGpu1})
      for (int r = 0; r < 16; ++r) c->add_available_deviceids(std::string(g) + "::" + std::to_string(r));
    c->set_allocation_size(1);
    v1beta1::PreferredAllocationResponse resp;
    ASSERT_TRUE(stub->GetPreferredAllocation(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.container_responses_size(), 1);
    ASSERT_EQ(resp.container_responses(0).deviceids_size(), 1);
    device = resp.container_responses(0).deviceids(0);
    EXPECT_EQ(GpuOfDeviceId(device), p1_gpu);
  }

  // Allocate: the interposer, the ledger and the limits.
  {
    grpc::ClientContext ctx;
    v1beta1::AllocateRequest req;
    req.add_container_requests()->add_devices_ids(device);
    v1beta1::AllocateResponse resp;
    grpc::Status st = stub->Allocate(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(resp.container_responses_size(), 1);
    const auto& c = resp.container_responses(0);
    EXPECT_EQ(c.envs().at("CUDA_VISIBLE_DEVICES"), p1_gpu);
    EXPECT_EQ(c.envs().at("GSLICE_SLICE"), "team.p1.main");
    EXPECT_EQ(c.envs().at("GSLICE_MEMORY"), "4096MiB");
    EXPECT_EQ(c.envs().at("GSLICE_SHARE"), "25%");
    EXPECT_EQ(c.envs().at("GSLICE_COMPUTE"), "40%");
    EXPECT_EQ(c.envs().at("GSLICE_CLASS"), "opportunistic");
    EXPECT_EQ(c.envs().at("GSLICE_LEDGER"), "/dev/shm/gslice");
    EXPECT_EQ(c.envs().at("GSLICE_LEDGER_USAGE"), "/dev/shm/gslice-usage");
    EXPECT_EQ(c.envs().at("GSLICE_SUSPEND_BOARD"), "/dev/shm/gslice-suspend");
    EXPECT_EQ(c.envs().at("LD_PRELOAD"), "/usr/lib/gslice/libcuda.so.1 /usr/lib/gslice/libnvidia-ml.so.1");
    EXPECT_EQ(c.envs().at("GSLICE_SUSPEND_PARTITION"), "k8s-team.p1.main");
    ASSERT_EQ(c.mounts_size(), 6);
    EXPECT_EQ(c.mounts(0).host_path(), config_.shim_host_dir);
    EXPECT_TRUE(c.mounts(0).read_only());
    // The node's ledger read-only; only the container's own slice usage file is writable.
    EXPECT_EQ(c.mounts(1).host_path(), config_.ledger_host_path);
    EXPECT_TRUE(c.mounts(1).read_only());
    Ledger ledger;
    ASSERT_EQ(ledger.Open(config_.ledger_host_path.c_str()), LedgerError::kOk);
    const int slice = ledger.FindSlice("team.p1.main");
    ASSERT_GE(slice, 0);
    EXPECT_EQ(c.mounts(2).host_path(), config_.ledger_host_path + "/slice-" + std::to_string(slice));
    EXPECT_EQ(c.mounts(2).container_path(), "/dev/shm/gslice-usage");
    EXPECT_FALSE(c.mounts(2).read_only());
    uint8_t uuid[16];
    ASSERT_TRUE(ParseGpuUuid(p1_gpu.c_str(), uuid));
    const int gpu = ledger.FindGpu(slice, uuid);
    ASSERT_GE(gpu, 0);
    EXPECT_EQ(ledger.Limit(slice, gpu), int64_t{4096} << 20);  // its limit, written by the plugin
    struct stat usage_st;
    ASSERT_EQ(stat(c.mounts(2).host_path().c_str(), &usage_st), 0);
    EXPECT_EQ(usage_st.st_uid, 0u);  // the pod spec names no runAsUser: root's
    EXPECT_EQ(usage_st.st_mode & 0777, 0644u);
    // The suspend board: the service's header and the container's gates read-only, its own
    // partition writable, nothing of anyone else; the files exist before the container starts.
    const std::string board = config_.board_host_path;
    EXPECT_EQ(c.mounts(3).host_path(), board + "/service");
    EXPECT_EQ(c.mounts(3).container_path(), "/dev/shm/gslice-suspend/service");
    EXPECT_TRUE(c.mounts(3).read_only());
    EXPECT_EQ(c.mounts(4).host_path(), board + "/pods/k8s-team.p1.main");
    EXPECT_EQ(c.mounts(4).container_path(), "/dev/shm/gslice-suspend/shim/k8s-team.p1.main");
    EXPECT_FALSE(c.mounts(4).read_only());
    EXPECT_EQ(c.mounts(5).host_path(), board + "/gates/k8s-team.p1.main");
    EXPECT_EQ(c.mounts(5).container_path(), "/dev/shm/gslice-suspend/gates/k8s-team.p1.main");
    EXPECT_TRUE(c.mounts(5).read_only());
    for (int m = 3; m <= 5; ++m) EXPECT_TRUE(fs::is_regular_file(c.mounts(m).host_path())) << c.mounts(m).host_path();
    EXPECT_EQ(fs::status(board + "/pods").permissions(), fs::perms::owner_all);
    std::string want_dev = std::string("/dev/nvidia") + (p1_gpu == kGpu0 ? "0" : "1");
    ASSERT_EQ(c.devices_size(), 2);  // its GPU and nvidiactl (no uvm node in this /dev)
    EXPECT_EQ(c.devices(0).container_path(), want_dev);
    EXPECT_EQ(c.devices(1).container_path(), "/dev/nvidiactl");
  }
  json bound = api_.Pod("team", "p1");
  EXPECT_EQ(bound["metadata"]["annotations"]["gslice.io/bind-phase"], "allocated");
  EXPECT_EQ(bound["metadata"]["annotations"]["gslice.io/allocated-containers"], "1");

  // Nothing is waiting any more: a second allocation is refused with a reason.
  {
    grpc::ClientContext ctx;
    v1beta1::AllocateRequest req;
    req.add_container_requests()->add_devices_ids(device);
    v1beta1::AllocateResponse resp;
    grpc::Status st = stub->Allocate(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(st.error_message().find("gslice-scheduler-extender"), std::string::npos) << st.error_message();
  }
  // PreStartContainer.
  {
    grpc::ClientContext ctx;
    v1beta1::PreStartContainerRequest req;
    req.add_devices_ids(device);
    v1beta1::PreStartContainerResponse resp;
    EXPECT_TRUE(stub->PreStartContainer(&ctx, req, &resp).ok());
    grpc::ClientContext ctx2;
    req.add_devices_ids("GPU-nope::0");
    EXPECT_EQ(stub->PreStartContainer(&ctx2, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }

  // Health flip: GPU 1 fails; the kubelet hears of it on the open stream.
  WriteInventory(root_ / "gpus.json", false);
  ASSERT_TRUE(kubelet->WaitForList([](const auto& l) {
    return testing::CountHealth(l, "Unhealthy", kGpu1) == 16 && testing::CountHealth(l, "Healthy", kGpu0) == 16;
  }, 10s));
  {
    grpc::ClientContext ctx;
    v1beta1::PreStartContainerRequest req;
    req.add_devices_ids(std::string(kGpu1) + "::0");
    v1beta1::PreStartContainerResponse resp;
    EXPECT_EQ(stub->PreStartContainer(&ctx, req, &resp).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  for (int i = 0; i < 200 && api_.Node("node-a")["metadata"]["annotations"]["gslice.io/gpus"].get<std::string>().find("false") == std::string::npos; ++i)
    std::this_thread::sleep_for(20ms);
  EXPECT_NE(api_.Node("node-a")["metadata"]["annotations"]["gslice.io/gpus"].get<std::string>().find("\"healthy\":false"), std::string::npos);

  // Kubelet restart: it dies, its folder is wiped, a new kubelet.sock appears.
  stub.reset();
  kubelet->Shutdown();
  kubelet.reset();
  for (const auto& e : fs::directory_iterator(config_.plugin_dir)) fs::remove_all(e.path());
  kubelet = std::make_unique<FakeKubelet>(config_.plugin_dir);
  ASSERT_TRUE(kubelet->WaitForRegistrations(1, 10s)) << "the plugin did not register again";
  EXPECT_TRUE(fs::exists(fs::path(config_.plugin_dir) / "gslice.sock"));
  kubelet->Watch();
  ASSERT_TRUE(kubelet->WaitForList([](const auto& l) { return testing::CountHealth(l, "Unhealthy", kGpu1) == 16; }, 10s));
  // Health comes back.
  WriteInventory(root_ / "gpus.json", true);
  ASSERT_TRUE(kubelet->WaitForList([](const auto& l) { return testing::CountHealth(l, "Healthy") == 32; }, 10s));
  EXPECT_GE(runner.registrations(), 2);

  stop = true;
  loop.join();
  kubelet->Shutdown();
  runner.Stop();
}

// Whoever may connect to the plugin's socket may set up devices for any pod: it is kubelet's
// (root's) alone, mode 0600, whatever the umask, when first served and when served again.
TEST_F(DevicePluginTest, TheSocketIsRootsAloneUnderAnyUmask) {
  FakeKubelet kubelet(config_.plugin_dir);
  auto source = MakeFileGpuSource((root_ / "gpus.json").string());
  DevicePluginRunner runner(config_, source.get(), &kube_);
  const mode_t old = umask(0);
  std::string err;
  const bool started = runner.Start(&err);
  const fs::path socket = fs::path(config_.plugin_dir) / "gslice.sock";
  struct stat first {};
  const int first_stat = stat(socket.c_str(), &first);
  fs::remove(socket);  // what a kubelet restart does
  runner.RunOnce();    // serves again
  struct stat again {};
  const int again_stat = stat(socket.c_str(), &again);
  umask(old);
  ASSERT_TRUE(started) << err;
  ASSERT_EQ(first_stat, 0);
  EXPECT_TRUE(S_ISSOCK(first.st_mode));
  EXPECT_EQ(first.st_mode & 07777, 0600u);
  ASSERT_EQ(again_stat, 0);
  EXPECT_EQ(again.st_mode & 07777, 0600u);
  EXPECT_TRUE(kubelet.WaitForRegistrations(1, 10s));
  // Nothing else is left in kubelet's folder (the socket is bound in a private folder first).
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(config_.plugin_dir)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"gslice.sock", "kubelet.sock"}));
  runner.Stop();
}

TEST_F(DevicePluginTest, MultiContainerPodsAllocateInSpecOrder) {
  json pod = testing::MakePod("team", "two", "u-two", 1, 2048, 10);
  json second = pod["spec"]["containers"][0];
  second["name"] = "second";
  second["resources"]["limits"]["gslice.io/gpu"] = "2";
  pod["spec"]["containers"].push_back(second);
  FakeKubelet kubelet(config_.plugin_dir);
  auto source = MakeFileGpuSource((root_ / "gpus.json").string());
  DevicePluginRunner runner(config_, source.get(), &kube_);
  std::string err;
  ASSERT_TRUE(runner.Start(&err)) << err;
  ASSERT_TRUE(kubelet.WaitForRegistrations(1, 10s));
  Schedule(pod);
  auto stub = kubelet.Dial();
  auto allocate = [&](std::vector<std::string> ids, v1beta1::AllocateResponse* resp) {
    grpc::ClientContext ctx;
    v1beta1::AllocateRequest req;
    auto* c = req.add_container_requests();
    for (const auto& id : ids) c->add_devices_ids(id);
    return stub->Allocate(&ctx, req, resp);
  };
  v1beta1::AllocateResponse r1, r2;
  // The kubelet asks for a 2-device container while the pod's first container needs 1:
  // no match, refused.
  EXPECT_FALSE(allocate({std::string(kGpu0) + "::0", std::string(kGpu1) + "::0"}, &r1).ok());
  ASSERT_TRUE(allocate({std::string(kGpu0) + "::0"}, &r1).ok());
  EXPECT_EQ(r1.container_responses(0).envs().at("GSLICE_SLICE"), "team.two.main");
  EXPECT_EQ(api_.Pod("team", "two")["metadata"]["annotations"]["gslice.io/bind-phase"], "allocating");
  grpc::Status st = allocate({std::string(kGpu0) + "::1", std::string(kGpu1) + "::1"}, &r2);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const auto& envs = r2.container_responses(0).envs();
  EXPECT_EQ(envs.at("GSLICE_SLICE"), "team.two.second");
  EXPECT_EQ(envs.at("GSLICE_MEMORY"), "2048MiB");
  EXPECT_EQ(envs.at("CUDA_VISIBLE_DEVICES").size(), std::string(kGpu0).size() * 2 + 1);
  EXPECT_EQ(api_.Pod("team", "two")["metadata"]["annotations"]["gslice.io/bind-phase"], "allocated");
  runner.Stop();
}

// gslice.io/protect from the pod to the slice the device plugin creates in the node ledger,
// where the shims read it; an annotation changed to a level it cannot keep after binding is
// refused at allocation, and no slice is made for it.
TEST_F(DevicePluginTest, ProtectionAnnotationReachesTheSliceInTheLedger) {
  FakeKubelet kubelet(config_.plugin_dir);
  auto source = MakeFileGpuSource((root_ / "gpus.json").string());
  DevicePluginRunner runner(config_, source.get(), &kube_);
  std::string err;
  ASSERT_TRUE(runner.Start(&err)) << err;
  ASSERT_TRUE(kubelet.WaitForRegistrations(1, 10s));
  auto stub = kubelet.Dial();
  auto allocate = [&](const std::string& id, v1beta1::AllocateResponse* resp) {
    grpc::ClientContext ctx;
    v1beta1::AllocateRequest req;
    req.add_container_requests()->add_devices_ids(id);
    return stub->Allocate(&ctx, req, resp);
  };
  auto gpu_of = [&](const std::string& name) {
    std::string why;
    auto a = DecodeAssignment(api_.Pod("team", name)["metadata"]["annotations"]["gslice.io/assignment"].get<std::string>(),
                              &why);
    return a ? a->containers[0].gpus[0].uuid : std::string();
  };

  json pod = testing::MakePod("team", "serve", "u-serve", 1, 4096, 50);
  pod["metadata"]["annotations"]["gslice.io/protect"] = "90%";
  Schedule(pod);
  v1beta1::AllocateResponse resp;
  grpc::Status st = allocate(gpu_of("serve") + "::0", &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  Ledger ledger;
  ASSERT_EQ(ledger.Open(config_.ledger_host_path.c_str()), LedgerError::kOk);
  int slice = ledger.FindSlice("team.serve.main");
  ASSERT_GE(slice, 0);
  EXPECT_EQ(ledger.limits()->slices[slice].protect_permille, 900u);
  EXPECT_EQ(ledger.limits()->slices[slice].slice_class, static_cast<uint32_t>(gslice::SliceClass::kGuaranteed));

  // No annotation: the default (0 in the ledger).
  Schedule(testing::MakePod("team", "plain", "u-plain", 1, 4096, 0));
  ASSERT_TRUE(allocate(gpu_of("plain") + "::1", &resp).ok());
  slice = ledger.FindSlice("team.plain.main");
  ASSERT_GE(slice, 0);
  EXPECT_EQ(ledger.limits()->slices[slice].protect_permille, 0u);

  // Bound with a valid level, then changed to one the plugin cannot keep.
  json late = testing::MakePod("team", "late", "u-late", 1, 4096, 0);
  late["metadata"]["annotations"]["gslice.io/protect"] = "0.95";
  Schedule(late);
  json bound = api_.Pod("team", "late");
  bound["metadata"]["annotations"]["gslice.io/protect"] = "0.2";
  api_.AddPod(bound);
  st = allocate(gpu_of("late") + "::2", &resp);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.error_message().find("gslice.io/protect '0.2': must be from 0.5 to 1"), std::string::npos)
      << st.error_message();
  EXPECT_LT(ledger.FindSlice("team.late.main"), 0);
  runner.Stop();
}

TEST(PendingPods, OldestBindFirstUnlessTheDevicesSayOtherwise) {
  auto pod = [](const std::string& name, const std::string& gpu, int64_t t) {
    Assignment a;
    a.node = "n";
    a.containers.push_back({"main", {{gpu, 0, 1024, 0}}});
    return json{{"metadata", {{"name", name}, {"namespace", "ns"}, {"uid", name},
                              {"annotations", {{"gslice.io/assignment", EncodeAssignment(a)},
                                               {"gslice.io/bind-phase", "allocating"},
                                               {"gslice.io/bind-time", std::to_string(t)}}}}},
                {"spec", {{"nodeName", "n"}}}};
  };
  json list = {{"items", {pod("late", "GPU-a", 200), pod("early", "GPU-b", 100)}}};
  std::string why;
  auto p = FindPendingContainer(list, "n", 1, {}, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->pod_name, "early");
  p = FindPendingContainer(list, "n", 1, {"GPU-a"}, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->pod_name, "late");
  EXPECT_FALSE(FindPendingContainer(list, "other-node", 1, {}, &why));
  EXPECT_FALSE(FindPendingContainer(list, "n", 2, {}, &why));
  EXPECT_NE(why.find("2 gslice.io/gpu"), std::string::npos) << why;
}

// A container's slice: written by the plugin into the node ledger, its usage file owned by the
// uid the pod runs as (runAsUser of the container, else of the pod), so that a non-root
// container can charge into its own slice and nothing else.
TEST(ContainerSlices, UsageBelongsToTheUidThePodRunsAs) {
  Assignment a;
  a.node = "n";
  a.containers.push_back({"main", {{"GPU-a0010203-0405-0607-0809-0a0b0c0d0e0f", 0, 1024, 0}}});
  json pod{{"metadata", {{"name", "u"}, {"namespace", "ns"}, {"uid", "u"},
                         {"annotations", {{"gslice.io/assignment", EncodeAssignment(a)},
                                          {"gslice.io/bind-phase", "allocating"}}}}},
           {"spec", {{"nodeName", "n"},
                     {"securityContext", {{"runAsUser", 1000}}},
                     {"containers", {{{"name", "main"}, {"securityContext", {{"runAsUser", 65534}}}}}}}}};
  std::string why;
  auto p = FindPendingContainer(json{{"items", {pod}}}, "n", 1, {}, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->run_as_user, 65534);  // the container's, over the pod's
  pod["spec"]["containers"][0].erase("securityContext");
  EXPECT_EQ(FindPendingContainer(json{{"items", {pod}}}, "n", 1, {}, &why)->run_as_user, 1000);

  DevicePluginConfig config;
  config.ledger_host_path = (fs::temp_directory_path() / ("gslice-plugin-ledger-" + std::to_string(getpid()))).string();
  fs::remove_all(config.ledger_host_path);
  const std::string usage = PrepareContainerSlice(config, *p, &why);
  ASSERT_FALSE(usage.empty()) << why;
  struct stat st;
  ASSERT_EQ(stat(usage.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ASSERT_EQ(stat((config.ledger_host_path + "/limits").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);  // the limits stay the plugin's (root's)
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  v1beta1::ContainerAllocateResponse resp;
  BuildContainerResponse(config, *p, usage, &resp);
  int writable = 0;
  for (const auto& m : resp.mounts()) {
    if (m.read_only()) continue;
    ++writable;
    EXPECT_TRUE(m.host_path() == usage || m.host_path().rfind(config.board_host_path + "/pods/", 0) == 0)
        << m.host_path();
  }
  EXPECT_EQ(writable, 2);  // its own usage file and its own board partition, nothing else
  fs::remove_all(config.ledger_host_path);
}

// MPS for a container (PlaceOnMps): one GPU whose MPS gsliced gives to the container's uid (or
// to no one yet), a pod in the host's IPC namespace; anything else is time-sliced and says why.
TEST(ContainerMps, OnlyAContainerOfTheGpusUidGetsItsMps) {
  if (geteuid() != 0) GTEST_SKIP() << "the plugins trust only root's tenant files";
  const std::string uuid = "GPU-a0010203-0405-0607-0809-0a0b0c0d0e0f";
  DevicePluginConfig config;
  config.mps_directory = (fs::temp_directory_path() / ("gslice-plugin-mps-" + std::to_string(getpid()))).string();
  fs::remove_all(config.mps_directory);
  fs::create_directories(config.mps_directory + "/" + uuid);
  PendingContainer p;
  p.namespace_name = "ns";
  p.pod_name = "pod";
  p.container = {"main", {{uuid, 0, 1024, 0}}};
  p.slice_class = SliceClass::kOpportunistic;
  p.compute_cap = "40%";
  p.run_as_user = 1000;
  p.host_ipc = true;
  auto env_of = [&](const PendingContainer& c, v1beta1::ContainerAllocateResponse* resp) {
    BuildContainerResponse(config, c, "/dev/null", resp);
    return std::map<std::string, std::string>(resp->envs().begin(), resp->envs().end());
  };

  // No tenant file: gsliced serves no MPS on the GPU.
  v1beta1::ContainerAllocateResponse none;
  EXPECT_EQ(env_of(p, &none).count("CUDA_MPS_PIPE_DIRECTORY"), 0u);
  EXPECT_NE(none.annotations().at("gslice.io/sharing").find("serves no MPS"), std::string::npos);

  std::string error;
  ASSERT_TRUE(WriteMpsTenant(config.mps_directory, uuid,
                             {.serving = true, .uid = 1000, .one_class = true, .slice_class = gslice::SliceClass::kOpportunistic},
                             &error))
      << error;
  v1beta1::ContainerAllocateResponse on;
  auto env = env_of(p, &on);
  const std::string dir = config.mps_directory + "/" + uuid;
  EXPECT_EQ(env["CUDA_MPS_PIPE_DIRECTORY"], dir + "/pipe");
  EXPECT_EQ(env["CUDA_MPS_LOG_DIRECTORY"], dir + "/log");
  EXPECT_EQ(env["CUDA_MPS_CLIENT_PRIORITY"], "1");
  EXPECT_EQ(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "40");
  int mps_mounts = 0;
  for (const auto& m : on.mounts()) {
    if (m.host_path().rfind(dir, 0) != 0) continue;
    ++mps_mounts;
    EXPECT_TRUE(m.read_only()) << m.host_path();
    EXPECT_EQ(m.container_path(), m.host_path());
  }
  EXPECT_EQ(mps_mounts, 2);
  EXPECT_EQ(on.annotations().at("gslice.io/sharing").rfind("mps: ", 0), 0u);

  // A GPU given to no one yet under mps_classes "mixed": gsliced gives it when it adopts the
  // slice.
  ASSERT_TRUE(WriteMpsTenant(config.mps_directory, uuid, {.serving = true}, &error)) << error;
  v1beta1::ContainerAllocateResponse free;
  EXPECT_EQ(env_of(p, &free).count("CUDA_MPS_PIPE_DIRECTORY"), 1u);

  // Another uid's GPU, an unknown uid, no hostIPC, two GPUs: time-sliced, and why.
  ASSERT_TRUE(WriteMpsTenant(config.mps_directory, uuid, {.serving = true, .uid = 1001}, &error)) << error;
  struct Case {
    std::function<void(PendingContainer*)> change;
    const char* why;
  };
  const Case cases[] = {
      {[](PendingContainer*) {}, "serves uid 1001"},
      {[](PendingContainer* c) { c->run_as_user = -1; }, "runAsUser"},
      {[](PendingContainer* c) { c->run_as_user = 1001, c->host_ipc = false; }, "hostIPC"},
      {[&](PendingContainer* c) { c->run_as_user = 1001, c->container.gpus.push_back({uuid, 1, 1024, 0}); }, "one per GPU"},
  };
  for (const Case& k : cases) {
    PendingContainer c = p;
    k.change(&c);
    v1beta1::ContainerAllocateResponse resp;
    EXPECT_EQ(env_of(c, &resp).count("CUDA_MPS_PIPE_DIRECTORY"), 0u) << k.why;
    const std::string& sharing = resp.annotations().at("gslice.io/sharing");
    EXPECT_EQ(sharing.rfind("time-sliced: ", 0), 0u) << sharing;
    EXPECT_NE(sharing.find(k.why), std::string::npos) << sharing;
  }
  // A tenant file anyone could have written is not gsliced's.
  ASSERT_TRUE(WriteMpsTenant(config.mps_directory, uuid, {.serving = true, .uid = 1001}, &error)) << error;
  chmod(MpsTenantPath(config.mps_directory, uuid).c_str(), 0666);
  v1beta1::ContainerAllocateResponse planted;
  PendingContainer c = p;
  c.run_as_user = 1001;
  EXPECT_EQ(env_of(c, &planted).count("CUDA_MPS_PIPE_DIRECTORY"), 0u);
  fs::remove_all(config.mps_directory);
}

std::string TenantText(const std::string& mps_directory, const std::string& uuid) {
  std::ifstream in(MpsTenantPath(mps_directory, uuid));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A fatal fault of one MPS client ends every client of its server (docs/compute.md, "Faults"):
// under gsliced's mps_classes "one" a container joins its GPU's MPS only where the tenant file
// names its uid and its slice's class; a class not settled yet keeps it off.
TEST(ContainerMps, OnlyAContainerOfTheServersClassGetsItsMps) {
  if (geteuid() != 0) GTEST_SKIP() << "the plugins trust only root's tenant files";
  const std::string uuid = "GPU-a0010203-0405-0607-0809-0a0b0c0d0e10";
  DevicePluginConfig config;
  config.mps_directory = (fs::temp_directory_path() / ("gslice-plugin-mpsc-" + std::to_string(getpid()))).string();
  fs::remove_all(config.mps_directory);
  fs::create_directories(config.mps_directory + "/" + uuid);
  PendingContainer p;
  p.namespace_name = "ns";
  p.pod_name = "pod";
  p.container = {"main", {{uuid, 0, 1024, 0}}};
  p.run_as_user = 1000;
  p.host_ipc = true;
  auto place = [&](SliceClass cls) {
    PendingContainer c = p;
    c.slice_class = cls;
    return PlaceOnMps(config, c);
  };
  std::string error;
  ASSERT_TRUE(WriteMpsTenant(config.mps_directory, uuid,
                             {.serving = true, .uid = 1000, .one_class = true, .slice_class = gslice::SliceClass::kGuaranteed},
                             &error))
      << error;
  EXPECT_EQ(TenantText(config.mps_directory, uuid), "uid 1000 class guaranteed\n");
  EXPECT_TRUE(place(SliceClass::kGuaranteed).mps) << place(SliceClass::kGuaranteed).why;
  MpsPlacement off = place(SliceClass::kOpportunistic);
  EXPECT_FALSE(off.mps);
  EXPECT_NE(off.why.find("its faults would end the guaranteed work on that server"), std::string::npos) << off.why;

  ASSERT_TRUE(WriteMpsTenant(config.mps_directory, uuid,
                             {.serving = true, .uid = 1000, .one_class = true, .slice_class = gslice::SliceClass::kOpportunistic},
                             &error))
      << error;
  EXPECT_TRUE(place(SliceClass::kOpportunistic).mps);
  off = place(SliceClass::kGuaranteed);
  EXPECT_FALSE(off.mps);
  EXPECT_NE(off.why.find("a fault of theirs would end its work"), std::string::npos) << off.why;

  // Given to no one yet, or adopted with a class gsliced does not know: neither class, since
  // the server may end up the other's.
  for (int64_t uid : {int64_t{-1}, int64_t{1000}}) {
    ASSERT_TRUE(WriteMpsTenant(config.mps_directory, uuid, {.serving = true, .uid = uid, .one_class = true}, &error))
        << error;
    for (SliceClass cls : {SliceClass::kGuaranteed, SliceClass::kOpportunistic}) {
      MpsPlacement pending = place(cls);
      EXPECT_FALSE(pending.mps) << uid;
      EXPECT_NE(pending.why.find("not settled"), std::string::npos) << pending.why;
    }
  }

  // "mixed": both classes of the uid.
  ASSERT_TRUE(WriteMpsTenant(config.mps_directory, uuid, {.serving = true, .uid = 1000}, &error)) << error;
  EXPECT_EQ(TenantText(config.mps_directory, uuid), "uid 1000 class any\n");
  EXPECT_TRUE(place(SliceClass::kGuaranteed).mps);
  EXPECT_TRUE(place(SliceClass::kOpportunistic).mps);
  fs::remove_all(config.mps_directory);
}

// The tenant file's lines (gslice/mps_client.h), the one-field lines of earlier versions
// (which put both classes on a server: class any), and anything else (not serving).
TEST(MpsTenantFile, ReadsWhatGslicedWritesAndRefusesTheRest) {
  if (geteuid() != 0) GTEST_SKIP() << "the plugins trust only root's tenant files";
  const std::string dir = (fs::temp_directory_path() / ("gslice-tenant-" + std::to_string(getpid()))).string();
  const std::string uuid = "GPU-x";
  fs::remove_all(dir);
  fs::create_directories(dir + "/" + uuid);
  auto read = [&](const std::string& text) {
    std::ofstream(MpsTenantPath(dir, uuid), std::ios::trunc) << text;
    chmod(MpsTenantPath(dir, uuid).c_str(), 0644);
    return ReadMpsTenant(dir, uuid);
  };
  MpsTenant t = read("uid 1000 class opportunistic\n");
  EXPECT_TRUE(t.serving && t.uid == 1000 && t.one_class && t.slice_class == gslice::SliceClass::kOpportunistic);
  t = read("uid 1000 class any\n");
  EXPECT_TRUE(t.serving && t.uid == 1000 && !t.one_class && !t.slice_class);
  t = read("none class pending\n");
  EXPECT_TRUE(t.serving && t.uid == -1 && t.one_class && !t.slice_class);
  t = read("none class any\n");
  EXPECT_TRUE(t.serving && t.uid == -1 && !t.one_class);
  // An earlier version's lines.
  t = read("uid 1000\n");
  EXPECT_TRUE(t.serving && t.uid == 1000 && !t.one_class && !t.slice_class);
  EXPECT_TRUE(MpsTakes(t, 1000, gslice::SliceClass::kOpportunistic) && MpsTakes(t, 1000, gslice::SliceClass::kGuaranteed));
  t = read("none\n");
  EXPECT_TRUE(t.serving && t.uid == -1 && !t.one_class);
  for (const char* bad : {"uid 1000 class both\n", "uid 1000 class\n", "uid 1000 class guaranteed", "uid x class any\n",
                          "uid -1 class any\n", "uid 99999999999 class any\n", "none class guaranteed\n",
                          "uid 1000  class any\n", "\n"}) {
    EXPECT_FALSE(read(bad).serving) << bad;
  }
  EXPECT_EQ(MpsClassName(std::nullopt), "any");
  EXPECT_EQ(MpsClassName(gslice::SliceClass::kGuaranteed), "guaranteed");
  fs::remove_all(dir);
}

// gsliced adopts only names of 1-63 characters of [a-z0-9._-] starting with a letter or digit
// (daemon/model.h ValidateName).
bool AdoptableByGsliced(const std::string& name) {
  if (name.empty() || name.size() > 63 || !std::isalnum(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name)
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) ||
          c == '.' || c == '_' || c == '-'))
      return false;
  return true;
}

TEST(SliceNames, AreAdoptableStableAndUnique) {
  PendingContainer p;
  p.namespace_name = "ns";
  p.pod_name = "short";
  p.pod_uid = "5f3c1f5e-8a2b-4c3d-9e4f-0123456789ab";
  p.container.name = "main";
  EXPECT_EQ(SliceNameFor(p), "ns.short.main");
  EXPECT_EQ(SliceNameFor(p), SliceNameFor(p));
  // Pod names may hold dots; namespaces and containers may not, so the name splits back.
  p.pod_name = "web.v2";
  EXPECT_EQ(SliceNameFor(p), "ns.web.v2.main");

  // Past 63 characters: the pod UID and the container's index.
  p.pod_name = std::string(100, 'p');
  EXPECT_EQ(SliceNameFor(p), "pod_5f3c1f5e-8a2b-4c3d-9e4f-0123456789ab_0");
  p.index = 1;
  p.container.name = "sidecar";
  EXPECT_EQ(SliceNameFor(p), "pod_5f3c1f5e-8a2b-4c3d-9e4f-0123456789ab_1");
  // Exactly 63 fits, 64 does not.
  p.index = 0;
  p.container.name = "main";
  p.pod_name = std::string(63 - 3 - 5, 'q');  // "ns." + pod + ".main"
  EXPECT_EQ(SliceNameFor(p).size(), 63u);
  EXPECT_EQ(SliceNameFor(p).rfind("ns.q", 0), 0u);
  p.pod_name += "q";
  EXPECT_EQ(SliceNameFor(p).rfind("pod_", 0), 0u);

  // Every form is a name gsliced adopts, also for odd input from the API server.
  std::set<std::string> seen;
  for (const char* ns : {"default", "kube-system", "a"})
    for (const char* pod : {"x", "job-0.worker", "Upper", "with_underscore", ""})
      for (size_t i = 0; i < 2; ++i) {
        const char* c = i == 0 ? "main" : "c2";
        p.index = i;
        p.namespace_name = ns;
        p.pod_name = pod;
        p.container.name = c;
        p.pod_uid = std::string("UID:") + ns + pod;
        std::string name = SliceNameFor(p);
        EXPECT_TRUE(AdoptableByGsliced(name)) << name;
        EXPECT_TRUE(seen.insert(name).second) << "two containers share " << name;
      }
}

// The real binary: it starts, creates the ledger, registers with the kubelet, publishes the
// node's GPUs, and exits cleanly on SIGTERM.
TEST_F(DevicePluginTest, BinaryRegistersAndStopsOnSigterm) {
  FakeKubelet kubelet(config_.plugin_dir);
  std::vector<std::string> args = {GSLICE_DEVICE_PLUGIN_BIN, "--node-name", "node-a",
                                   "--gpus", "file:" + (root_ / "gpus.json").string(),
                                   "--plugin-dir", config_.plugin_dir, "--ledger", config_.ledger_host_path,
                                   "--suspend-board", config_.board_host_path,
                                   "--apiserver", api_.url(), "--poll-ms", "50"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ), 0);
  bool registered = kubelet.WaitForRegistrations(1, 20s);
  EXPECT_TRUE(registered);
  EXPECT_TRUE(fs::exists(config_.ledger_host_path));
  // It maps usage files that pods' users own and may shrink: under the shrink guard, whose
  // SIGBUS handler is installed (SigCgt).
  std::ifstream status_file("/proc/" + std::to_string(pid) + "/status");
  unsigned long long caught = 0;
  for (std::string line; std::getline(status_file, line);) {
    if (line.rfind("SigCgt:", 0) == 0) caught = std::stoull(line.substr(7), nullptr, 16);
  }
  EXPECT_NE(caught & (1ull << (SIGBUS - 1)), 0u) << "the device plugin does not catch SIGBUS";
  EXPECT_TRUE(fs::is_regular_file(config_.board_host_path + "/service"));  // the board: a directory
  for (int i = 0; i < 250 && !api_.Node("node-a")["metadata"]["annotations"].contains("gslice.io/gpus"); ++i)
    std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(api_.Node("node-a")["metadata"]["annotations"].contains("gslice.io/gpus"));
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_FALSE(fs::exists(fs::path(config_.plugin_dir) / "gslice.sock"));
}

TEST(DevicePluginBinary, RefusesBadFlags) {
  for (std::vector<std::string> args : {std::vector<std::string>{"--gpus", "magic", "--node-name", "n"},
                                        std::vector<std::string>{"--slices-per-gpu", "0", "--node-name", "n"},
                                        std::vector<std::string>{"--bogus", "1"}}) {
    std::string cmd = std::string(GSLICE_DEVICE_PLUGIN_BIN);
    for (const auto& a : args) cmd += " " + a;
    cmd += " --apiserver http://127.0.0.1:1 2>/dev/null";
    int rc = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 2) << cmd;
  }
}

}  // namespace
}  // namespace gslice::k8s
