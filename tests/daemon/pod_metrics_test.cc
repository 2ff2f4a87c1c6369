// Per-pod metrics: gsliced names the Kubernetes pod of each GPU process from its cgroup (a
// fake /proc with kubepods cgroups of both kubelet drivers) and the node's pod list (the
// fake API server), labels process and slice metrics with it, keeps the slice's pod across a
// restart, and carries on without labels while the API server is down.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "api_server.h"
#include "daemon_test_support.h"
#include "fake_apiserver.h"
#include "gslice/k8s/pod_directory_loader.h"
#include "pod_resolver.h"
#include "registry.h"
#include "store.h"

namespace gslice {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::kGiB;

constexpr const char* kAppUid = "5f3c1f5e-8a2b-4c3d-9e4f-0123456789ab";
constexpr const char* kAppCid = "3e5a9d0c1b2f4e6a8c7d9b0a1f2e3d4c5b6a7980a1b2c3d4e5f60718293a4b5c";
constexpr const char* kWebUid = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
constexpr const char* kWebCid = "aa11bb22cc33dd44ee55ff6600112233445566778899aabbccddeeff00112233";

// /proc/<pid>/cgroup of a container, as the systemd cgroup driver names it (cgroup v2).
std::string SystemdCgroup(std::string uid, const std::string& cid) {
  for (char& c : uid)
    if (c == '-') c = '_';
  return "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid +
         ".slice/cri-containerd-" + cid + ".scope\n";
}

// ... and as the cgroupfs driver names it (cgroup v1).
std::string CgroupfsCgroup(const std::string& uid, const std::string& cid) {
  return "12:memory:/kubepods/besteffort/pod" + uid + "/" + cid + "\n" +
         "1:name=systemd:/kubepods/besteffort/pod" + uid + "/" + cid + "\n";
}

// A pod on `node` with running containers (name, container ID).
json PodOn(const std::string& node, const std::string& ns, const std::string& name, const std::string& uid,
           const std::vector<std::pair<std::string, std::string>>& containers) {
  json statuses = json::array();
  json specs = json::array();
  for (const auto& [cname, cid] : containers) {
    specs.push_back({{"name", cname}, {"image", "cuda"}});
    statuses.push_back({{"name", cname}, {"containerID", "containerd://" + cid}, {"ready", true}});
  }
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", ns}, {"uid", uid}}},
          {"spec", {{"nodeName", node}, {"containers", specs}}},
          {"status", {{"phase", "Running"}, {"containerStatuses", statuses}}}};
}

// A node ledger whose slices and processes the test sets, as shimmed processes would.
class ScriptedLedger final : public NodeLedger {
 public:
  struct State {
    std::mutex mu;
    std::vector<PublishedSlice> slices;
    std::vector<ProcessUsage> processes;
    // Runs once, after Slices() took its snapshot and before it returns it.
    std::function<void()> after_snapshot;
  };
  explicit ScriptedLedger(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::string Describe() const override { return "scripted ledger"; }
  Result<std::vector<PublishedSlice>> Slices() override {
    std::vector<PublishedSlice> snapshot;
    std::function<void()> then;
    {
      std::lock_guard lock(state_->mu);
      snapshot = state_->slices;
      then = std::exchange(state_->after_snapshot, nullptr);
    }
    if (then) then();
    return snapshot;
  }
  Result<std::vector<ProcessUsage>> Processes() override {
    std::lock_guard lock(state_->mu);
    return state_->processes;
  }
  Status Publish(const Slice& slice) override {
    std::lock_guard lock(state_->mu);
    std::erase_if(state_->slices, [&](const PublishedSlice& s) { return s.name == slice.name; });
    state_->slices.push_back({slice.name, slice.slice_class, slice.gpus, false});
    return Status::Ok();
  }
  Status PublishNew(const Slice& slice) override { return Publish(slice); }
  Status SetClass(const std::string& name, SliceClass slice_class) override {
    std::lock_guard lock(state_->mu);
    for (PublishedSlice& s : state_->slices) {
      if (s.name == name) s.slice_class = slice_class;
    }
    return Status::Ok();
  }
  Status Withdraw(const std::string& name, Withdrawal) override {
    std::lock_guard lock(state_->mu);
    std::erase_if(state_->slices, [&](const PublishedSlice& s) { return s.name == name; });
    return Status::Ok();
  }
  Status Restore(const std::string&) override { return Status::Ok(); }

 private:
  std::shared_ptr<State> state_;
};

// gsliced samples the ledger without its lock. A slice deleted between that snapshot and the
// adoption that follows is still in the snapshot: it must not come back as adopted.
TEST(RegistrySample, ASliceDeletedWhileTheLedgerIsReadIsNotAdoptedAgain) {
  const std::string db = testing::UniquePath("race.db");
  auto state = std::make_shared<ScriptedLedger::State>();
  auto store = Store::Open(db);
  ASSERT_TRUE(store.ok()) << store.status().message();
  Registry registry(Registry::Options{}, std::move(store.value()),
                    std::make_unique<testing::FixedInventory>(testing::TestGpus()),
                    std::make_unique<ScriptedLedger>(state), MakeUnavailableSuspender(), nullptr);
  ASSERT_TRUE(registry.Start().ok());
  ApiRouter router(&registry, "", 0);
  auto call = [&](const std::string& method, const std::string& path, const std::string& body = "") {
    ApiRequest r;
    r.method = method;
    r.path = path;
    r.body = body;
    r.caller = Caller::Daemon();
    return router.Handle(r);
  };
  ASSERT_EQ(call("POST", "/v1/slices", R"({"name":"gone","user":"root","gpus":["0"],"memory":"1GiB"})").status, 201);
  {
    std::lock_guard lock(state->mu);
    state->after_snapshot = [&] { EXPECT_EQ(call("DELETE", "/v1/slices/gone").status, 200); };
  }
  registry.Sample();
  EXPECT_EQ(call("GET", "/v1/slices/gone").status, 404) << call("GET", "/v1/slices/gone").body;
  for (const char* suffix : {"", "-wal", "-shm"}) unlink((db + suffix).c_str());
}

class PodMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(proc_);
    gpu_ = testing::TestGpus()[0].uuid;
  }
  void TearDown() override {
    registry_.reset();
    fs::remove_all(proc_);
    for (const char* suffix : {"", "-wal", "-shm"}) unlink((db_ + suffix).c_str());
  }

  void WriteCgroup(int pid, const std::string& text) {
    fs::create_directories(proc_ + "/" + std::to_string(pid));
    std::ofstream(proc_ + "/" + std::to_string(pid) + "/cgroup") << text;
  }
  // A slice started in a container (not through gsliced's API): it is adopted from the ledger.
  void AddLedgerSlice(const std::string& name) {
    std::lock_guard lock(ledger_->mu);
    ledger_->slices.push_back({name, SliceClass::kGuaranteed, {SliceGpu{gpu_, 4 * kGiB, 0}}, false});
  }
  void AddProcess(int pid, const std::string& slice, uint64_t bytes) {
    std::lock_guard lock(ledger_->mu);
    ProcessUsage p;
    p.pid = pid;
    p.slice = slice;
    p.gpu_uuid = gpu_;
    p.memory_used = bytes;
    ledger_->processes.push_back(p);
  }

  // gsliced as main.cc builds it: the resolver from the configuration, on its own thread.
  void StartRegistry(const std::string& apiserver) {
    DaemonConfig config = DefaultConfig();
    config.kubernetes_node = "node-a";
    config.kubernetes_apiserver = apiserver;
    config.kubernetes_proc_root = proc_;
    config.kubernetes_retry_seconds = 1;
    config.kubernetes_refresh_seconds = refresh_seconds_;
    std::string note;
    auto resolver = MakePodResolver(config, &note);
    ASSERT_NE(resolver, nullptr) << note;
    resolver_ = resolver.get();
    registry_.reset();
    auto store = Store::Open(db_);
    ASSERT_TRUE(store.ok()) << store.status().message();
    registry_ = std::make_unique<Registry>(Registry::Options{}, std::move(store.value()),
                                           std::make_unique<testing::FixedInventory>(testing::TestGpus()),
                                           std::make_unique<ScriptedLedger>(ledger_), MakeUnavailableSuspender(),
                                           std::move(resolver));
    Status s = registry_->Start();
    ASSERT_TRUE(s.ok()) << s.message();
    router_ = std::make_unique<ApiRouter>(registry_.get(), "", 0);
  }

  ApiResponse Call(const std::string& method, const std::string& path, const std::string& body = "") {
    ApiRequest r;
    r.method = method;
    r.path = path;
    r.body = body;
    r.caller = Caller::Daemon();  // root: may do everything
    return router_->Handle(r);
  }
  std::string Metrics() { return Call("GET", "/metrics").body; }

  // Samples (as the sampler thread does) until the metrics page holds `want`; loads of the
  // pod list run on the resolver's thread, so the labels appear a sample or two later.
  bool SampleUntilMetricsHold(const std::string& want) {
    for (int i = 0; i < 1000; ++i) {
      registry_->Sample();
      if (Metrics().find(want) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // Samples until the resolver has tried at least `n` loads of the pod list.
  void SampleUntilLoads(int n) {
    for (int i = 0; i < 1000 && resolver_->loads() < n; ++i) {
      registry_->Sample();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_GE(resolver_->loads(), n);
    registry_->Sample();
  }

  std::string proc_ = testing::UniquePath("proc", "/tmp");
  std::string db_ = testing::UniquePath("pods.db", "/tmp");
  std::string gpu_;
  std::shared_ptr<ScriptedLedger::State> ledger_ = std::make_shared<ScriptedLedger::State>();
  PodResolver* resolver_ = nullptr;
  int64_t refresh_seconds_ = 60;
  std::unique_ptr<Registry> registry_;
  std::unique_ptr<ApiRouter> router_;
};

TEST_F(PodMetricsTest, ProcessAndSliceMetricsCarryTheirPodAcrossARestart) {
  k8s::testing::FakeApiServer api;
  api.AddPod(PodOn("node-a", "team", "app", kAppUid, {{"main", kAppCid}}));
  api.AddPod(PodOn("node-a", "web", "front.v2", kWebUid, {{"server", kWebCid}}));
  api.AddPod(PodOn("node-b", "elsewhere", "other", "99999999-8a2b-4c3d-9e4f-0123456789ab", {}));

  AddLedgerSlice("team.app.main");  // one pod, two processes: systemd driver and cgroupfs driver
  AddProcess(101, "team.app.main", 3 * kGiB);
  WriteCgroup(101, SystemdCgroup(kAppUid, kAppCid));
  AddProcess(102, "team.app.main", 1 * kGiB);
  WriteCgroup(102, CgroupfsCgroup(kAppUid, kAppCid));
  AddLedgerSlice("shared");  // processes of two pods: no one pod for the slice
  AddProcess(201, "shared", 2 * kGiB);
  WriteCgroup(201, CgroupfsCgroup(kWebUid, kWebCid));
  AddProcess(202, "shared", 2 * kGiB);
  WriteCgroup(202, SystemdCgroup(kAppUid, kAppCid));
  AddLedgerSlice("host-job");  // a process outside any pod, and one with no cgroup file
  AddProcess(301, "host-job", kGiB);
  WriteCgroup(301, "0::/user.slice/user-1000.slice/session-3.scope\n");
  AddProcess(302, "host-job", kGiB);

  StartRegistry(api.url());
  const std::string g = "gpu=\"" + gpu_ + "\"";
  ASSERT_TRUE(SampleUntilMetricsHold("gslice_process_memory_used_bytes{" + g +
                                     ",slice=\"team.app.main\",pid=\"101\",pod=\"app\",namespace=\"team\",container=\"main\"} 3221225472\n"))
      << Metrics();
  std::string m = Metrics();
  EXPECT_NE(m.find("gslice_process_memory_used_bytes{" + g +
                   ",slice=\"team.app.main\",pid=\"102\",pod=\"app\",namespace=\"team\",container=\"main\"} 1073741824\n"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("gslice_process_memory_used_bytes{" + g +
                   ",slice=\"shared\",pid=\"201\",pod=\"front.v2\",namespace=\"web\",container=\"server\"} 2147483648\n"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("gslice_process_memory_used_bytes{" + g + ",slice=\"host-job\",pid=\"301\"} 1073741824\n"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("gslice_process_memory_used_bytes{" + g + ",slice=\"host-job\",pid=\"302\"} 1073741824\n"),
            std::string::npos)
      << m;
  // The slice takes its pod; a slice of two pods and one outside any do not.
  EXPECT_NE(m.find("gslice_slice_memory_used_bytes{" + g +
                   ",slice=\"team.app.main\",user=\"unknown\",project=\"default\",class=\"guaranteed\",pod=\"app\",namespace=\"team\"} 4294967296\n"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("gslice_slice_processes{slice=\"shared\",user=\"unknown\",project=\"default\",class=\"guaranteed\"} 2\n"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("gslice_slice_processes{slice=\"host-job\",user=\"unknown\",project=\"default\",class=\"guaranteed\"} 2\n"),
            std::string::npos)
      << m;

  // The API shows the same.
  json slice = json::parse(Call("GET", "/v1/slices/team.app.main").body);
  EXPECT_EQ(slice["pod"], "app");
  EXPECT_EQ(slice["namespace"], "team");
  ASSERT_EQ(slice["processes"].size(), 2u);
  EXPECT_EQ(slice["processes"][0]["container"], "main");
  json host = json::parse(Call("GET", "/v1/slices/host-job").body);
  EXPECT_EQ(host["pod"], "");
  EXPECT_EQ(host["processes"][0]["pod"], "");

  // gsliced restarts with the processes gone and the API server away: the slice keeps its pod.
  {
    std::lock_guard lock(ledger_->mu);
    ledger_->processes.clear();
  }
  StartRegistry("http://127.0.0.1:1");
  auto view = registry_->GetSlice("team.app.main");
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->slice.pod, "app");
  EXPECT_EQ(view->slice.pod_namespace, "team");
  registry_->Sample();
  EXPECT_NE(Metrics().find("gslice_slice_processes{slice=\"team.app.main\",user=\"unknown\",project=\"default\",class=\"guaranteed\",pod=\"app\",namespace=\"team\"} 0\n"),
            std::string::npos)
      << Metrics();
}

// kubectl annotate pod app gslice.io/memory=8GiB: gsliced resizes the pod's running slice (as
// `gslice set` does, admitted like a create), and a change it refuses is logged, not retried.
TEST_F(PodMetricsTest, ChangingAPodsAnnotationResizesItsSlice) {
  k8s::testing::FakeApiServer api;
  json pod = PodOn("node-a", "team", "app", kAppUid, {{"main", kAppCid}});
  api.AddPod(pod);
  AddLedgerSlice("team.app.main");  // 4 GiB, as the device plugin made it
  AddProcess(101, "team.app.main", 3 * kGiB);
  WriteCgroup(101, SystemdCgroup(kAppUid, kAppCid));
  refresh_seconds_ = 1;
  StartRegistry(api.url());
  auto slice = [&] { return json::parse(Call("GET", "/v1/slices/team.app.main").body); };
  auto sample_until = [&](const std::function<bool(const json&)>& done) {
    for (int i = 0; i < 500; ++i) {
      registry_->Sample();
      if (done(slice())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  ASSERT_TRUE(sample_until([](const json& s) { return s["pod"] == "app"; })) << slice().dump();
  EXPECT_EQ(slice()["memory_limit_bytes"], 4 * kGiB);

  pod["metadata"]["annotations"] = {{"gslice.io/memory", "8GiB"}, {"gslice.io/compute-cap", "40%"}};
  api.AddPod(pod);
  ASSERT_TRUE(sample_until([](const json& s) { return s["memory_limit_bytes"] == 8 * kGiB; })) << slice().dump();
  EXPECT_DOUBLE_EQ(slice()["gpus"][0]["compute_cap"].get<double>(), 0.4);
  {
    std::lock_guard lock(ledger_->mu);  // published to the ledger the processes read
    ASSERT_EQ(ledger_->slices.size(), 1u);
    EXPECT_EQ(ledger_->slices[0].gpus[0].memory_limit, 8 * kGiB);
  }

  // Past the GPU (16 GiB): refused like a create, the slice stays, and the event says why.
  pod["metadata"]["annotations"]["gslice.io/memory"] = "20480";  // MiB, as gslice.io/gpu-memory
  api.AddPod(pod);
  auto refused = [&] {
    const json events = json::parse(Call("GET", "/v1/events").body);
    for (const json& e : events["events"]) {
      const std::string detail = e["detail"];
      if (e["slice"] == "team.app.main" && detail.find("refused: pod annotations") != std::string::npos) return true;
    }
    return false;
  };
  for (int i = 0; i < 500 && !refused(); ++i) {
    registry_->Sample();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(refused()) << Call("GET", "/v1/events").body;
  EXPECT_EQ(slice()["memory_limit_bytes"], 8 * kGiB);

  // A malformed annotation changes nothing either.
  pod["metadata"]["annotations"]["gslice.io/memory"] = "lots";
  api.AddPod(pod);
  for (int i = 0; i < 100; ++i) {
    registry_->Sample();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(slice()["memory_limit_bytes"], 8 * kGiB);
  // Back down: the shrink goes through (the scripted ledger holds nothing).
  pod["metadata"]["annotations"]["gslice.io/memory"] = "6GiB";
  api.AddPod(pod);
  EXPECT_TRUE(sample_until([](const json& s) { return s["memory_limit_bytes"] == 6 * kGiB; })) << slice().dump();
}

TEST_F(PodMetricsTest, APodGivenThroughTheApiIsNotOverwritten) {
  k8s::testing::FakeApiServer api;
  api.AddPod(PodOn("node-a", "team", "app", kAppUid, {{"main", kAppCid}}));
  StartRegistry(api.url());
  ApiResponse created = Call("POST", "/v1/slices",
                             R"({"name":"given","user":"u","gpus":["0"],"memory":"1GiB","pod":"declared","namespace":"ops"})");
  ASSERT_EQ(created.status, 201) << created.body;
  AddProcess(101, "given", kGiB);
  WriteCgroup(101, SystemdCgroup(kAppUid, kAppCid));
  ASSERT_TRUE(SampleUntilMetricsHold("slice=\"given\",pid=\"101\",pod=\"app\",namespace=\"team\",container=\"main\"}"))
      << Metrics();
  auto view = registry_->GetSlice("given");
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->slice.pod, "declared");
  EXPECT_EQ(view->slice.pod_namespace, "ops");
}

TEST_F(PodMetricsTest, ApiServerDownMeansNoLabelsAndNothingElse) {
  // A port nothing listens on: bound, read, closed.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  const int port = ntohs(a.sin_port);
  AddLedgerSlice("team.app.main");
  AddProcess(101, "team.app.main", 3 * kGiB);
  WriteCgroup(101, SystemdCgroup(kAppUid, kAppCid));
  ::testing::internal::CaptureStderr();
  StartRegistry("http://127.0.0.1:" + std::to_string(port));
  SampleUntilLoads(2);  // the first load and a retry failed
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("cannot read the pods of node node-a"), std::string::npos) << log;
  EXPECT_EQ(log.find("cannot read the pods"), log.rfind("cannot read the pods")) << "logged once:\n" << log;
  std::string m = Metrics();
  EXPECT_NE(m.find("gslice_process_memory_used_bytes{gpu=\"" + gpu_ + "\",slice=\"team.app.main\",pid=\"101\"} 3221225472\n"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("pod="), std::string::npos) << m;
  EXPECT_NE(m.find("gslice_slice_memory_used_bytes{gpu=\"" + gpu_ +
                   "\",slice=\"team.app.main\",user=\"unknown\",project=\"default\",class=\"guaranteed\"} 3221225472\n"),
            std::string::npos)
      << m;
  EXPECT_EQ(Call("GET", "/healthz").status, 200);
}

TEST_F(PodMetricsTest, APodNotYetListedIsNamedOnceItAppears) {
  k8s::testing::FakeApiServer api;
  AddLedgerSlice("team.app.main");
  AddProcess(101, "team.app.main", kGiB);
  WriteCgroup(101, SystemdCgroup(kAppUid, kAppCid));
  StartRegistry(api.url());
  SampleUntilLoads(1);
  EXPECT_EQ(Metrics().find("pod="), std::string::npos) << Metrics();
  api.AddPod(PodOn("node-a", "team", "app", kAppUid, {{"main", kAppCid}}));
  ASSERT_TRUE(SampleUntilMetricsHold("slice=\"team.app.main\",pid=\"101\",pod=\"app\",namespace=\"team\",container=\"main\"} 1073741824\n"))
      << Metrics();
  EXPECT_NE(Metrics().find("slice=\"team.app.main\",user=\"unknown\",project=\"default\",class=\"guaranteed\",pod=\"app\",namespace=\"team\"}"),
            std::string::npos);
}

TEST(PodResolverConfig, OffWithoutANodeName) {
  DaemonConfig config = DefaultConfig();
  unsetenv("NODE_NAME");
  std::string note;
  EXPECT_EQ(MakePodResolver(config, &note), nullptr);
  EXPECT_EQ(note, "");
  // A node name but no API server (not in a pod): off, and it says why.
  config.kubernetes_node = "node-a";
  unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_EQ(MakePodResolver(config, &note), nullptr);
  EXPECT_NE(note.find("kubernetes.apiserver"), std::string::npos) << note;
  config.kubernetes_apiserver = "http://127.0.0.1:1";
  EXPECT_NE(MakePodResolver(config, &note), nullptr);
  setenv("NODE_NAME", "node-env", 1);
  config.kubernetes_node = "";
  EXPECT_NE(MakePodResolver(config, &note), nullptr);
  EXPECT_NE(note.find("node-env"), std::string::npos) << note;
  unsetenv("NODE_NAME");
}

// The reload policy, on a clock the test moves: a list that lacks a process's pod is read
// again at most every retry_ms, a complete one every refresh_ms; no pod process, no load.
TEST(PodResolverPolicy, ReloadsOnAMissAtMostEveryRetryAndRefreshesPeriodically) {
  std::string proc = testing::UniquePath("proc", "/tmp");
  fs::create_directories(proc + "/7");
  std::ofstream(proc + "/7/cgroup") << SystemdCgroup(kAppUid, kAppCid);
  fs::create_directories(proc + "/8");
  std::ofstream(proc + "/8/cgroup") << "0::/system.slice/sshd.service\n";

  int64_t now = 1000;
  bool listed = false, fail = false;
  int loads = 0;
  PodResolver::Options options;
  options.node = "node-a";
  options.proc_root = proc;
  options.retry_ms = 10000;
  options.refresh_ms = 60000;
  options.load_inline = true;
  PodResolver resolver(
      options,
      [&](k8s::PodDirectory* dir, std::string* error) {
        ++loads;
        if (fail) {
          *error = "connection refused";
          return false;
        }
        if (listed) {
          dir->AddPod(kAppUid, "team", "app");
          dir->AddContainer(kAppUid, std::string("containerd://") + kAppCid, "main");
        }
        return true;
      },
      [&] { return now; });

  std::vector<ProcessUsage> host(1);
  host[0].pid = 8;
  resolver.Label(&host);
  EXPECT_EQ(loads, 0) << "no process in a pod: the API server is not asked";

  std::vector<ProcessUsage> procs(2);
  procs[0].pid = 7;
  procs[1].pid = 8;
  resolver.Label(&procs);
  EXPECT_EQ(loads, 1);
  EXPECT_EQ(procs[0].pod, "");
  listed = true;  // the pod shows up in the API server
  now += 9999;
  resolver.Label(&procs);
  EXPECT_EQ(loads, 1) << "a miss reloads at most every retry_ms";
  EXPECT_EQ(procs[0].pod, "");
  now += 1;
  resolver.Label(&procs);
  EXPECT_EQ(loads, 2);
  EXPECT_EQ(procs[0].pod, "app");
  EXPECT_EQ(procs[0].pod_namespace, "team");
  EXPECT_EQ(procs[0].container, "main");
  EXPECT_EQ(procs[1].pod, "");

  // Everything named: only the periodic refresh.
  now += 59999;
  resolver.Label(&procs);
  EXPECT_EQ(loads, 2);
  now += 1;
  fail = true;  // and that refresh fails: the last list stays in use
  resolver.Label(&procs);
  EXPECT_EQ(loads, 3);
  EXPECT_EQ(procs[0].pod, "app");
  fs::remove_all(proc);
}

}  // namespace
}  // namespace gslice
