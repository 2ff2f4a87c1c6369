// The DRA kubelet plugin against a fake kubelet (plugin registration and the DRA node service
// over unix sockets) and the fake API server (ResourceSlices published, claims allocated by
// the test): registration, the published devices, prepare and unprepare, bad parameters, and
// a restart of the plugin that keeps its prepared claims.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "fake_apiserver.h"
#include "fake_dra_kubelet.h"
#include "gslice/k8s/dra_plugin.h"
#include "gslice/suspend_board.h"

namespace gslice::k8s {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

const char* kUuid0 = "GPU-11111111-2222-3333-4444-555555555550";
const char* kUuid1 = "GPU-11111111-2222-3333-4444-555555555551";
const std::string kSlicePath = "/apis/resource.k8s.io/v1/resourceslices/node-a-gslice-io";

class StaticGpus final : public GpuSource {
 public:
  bool Discover(std::vector<GpuInfo>* gpus, std::string*) override {
    *gpus = gpus_;
    return true;
  }
  std::vector<GpuInfo> gpus_ = {{kUuid0, 0, 81559, "NVIDIA H100 80GB HBM3", true, "9.0"},
                                {kUuid1, 1, 81559, "NVIDIA H100 80GB HBM3", true, "9.0"}};
};

// Records what the plugin asks of gsliced.
class RecordingStore final : public SliceStore {
 public:
  explicit RecordingStore(std::string dir) : dir_(std::move(dir)) {}
  std::string Create(const ClaimSlice& s, std::string* error) override {
    if (fail_next_ > 0 && --fail_next_ == 0) {
      *error = "does not fit";
      return "";
    }
    created.push_back(s);
    live.insert(SliceNameFor(s.slice));
    return dir_ + "/usage-" + SliceNameFor(s.slice);
  }
  bool Delete(const std::string& name, std::string*) override {
    deleted.push_back(name);
    live.erase(name);
    return true;
  }
  void FailCreate(int nth) { fail_next_ = nth; }
  std::vector<ClaimSlice> created;
  std::vector<std::string> deleted;
  std::set<std::string> live;

 private:
  std::string dir_;
  int fail_next_ = 0;
};

// A ResourceClaim allocated on node-a: each result (request, device, memory, compute), and
// the claim's SliceParameters (null: none).
json MakeClaim(const std::string& ns, const std::string& name, const std::string& uid,
               const std::vector<std::tuple<std::string, std::string, std::string, std::string>>& results,
               const json& params = nullptr) {
  json res = json::array();
  std::set<std::string> requests;
  for (const auto& [request, device, memory, compute] : results) {
    json consumed = {{"memory", memory}};
    if (!compute.empty()) consumed["compute"] = compute;
    res.push_back({{"request", request}, {"driver", "gslice.io"}, {"pool", "node-a"}, {"device", device},
                   {"shareID", "0b5e1a2c-0000-4000-8000-" + uid.substr(0, 4) + "00000000"},
                   {"consumedCapacity", consumed}});
    requests.insert(request);
  }
  json config = json::array();
  if (!params.is_null())
    config.push_back({{"source", "FromClaim"}, {"requests", requests},
                      {"opaque", {{"driver", "gslice.io"}, {"parameters", params}}}});
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", {{"name", name}, {"namespace", ns}, {"uid", uid}}},
          {"spec", json::object()},
          {"status", {{"allocation", {{"devices", {{"results", res}, {"config", config}}}}},
                      {"reservedFor", json::array({{{"resource", "pods"}, {"name", "app"}, {"uid", "pod-1"}}})}}}};
}

std::string ClaimPath(const std::string& ns, const std::string& name) {
  return "/apis/resource.k8s.io/v1/namespaces/" + ns + "/resourceclaims/" + name;
}

json ReadJson(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str(), nullptr, false);
}

bool Has(const json& array, const std::string& s) {
  for (const auto& v : array)
    if (v == s) return true;
  return false;
}

class DraPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gslice-dra-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    for (const char* d : {"registry", "plugin", "cdi", "board"}) fs::create_directories(dir_ / d);
    config_.node_name = "node-a";
    config_.registry_dir = (dir_ / "registry").string();
    config_.plugin_dir = (dir_ / "plugin").string();
    config_.cdi_dir = (dir_ / "cdi").string();
    config_.container.node_name = "node-a";
    config_.container.ledger_host_path = config_.container.ledger_container_path = (dir_ / "ledger").string();
    config_.container.board_host_path = config_.container.board_container_path = (dir_ / "board").string();
    config_.container.dev_root = (dir_ / "no-dev").string();
    std::string err;
    ASSERT_TRUE(CreateSuspendBoard(config_.container.board_host_path.c_str(), &err)) << err;
    store_ = std::make_unique<RecordingStore>(dir_.string());
    runner_ = std::make_unique<DraPluginRunner>(config_, &gpus_, &kube_, store_.get());
    ASSERT_TRUE(runner_->Start(&err)) << err;
    ASSERT_TRUE(kubelet_.Register(10s, &err)) << err;
  }
  void TearDown() override {
    runner_.reset();
    fs::remove_all(dir_);
  }
  // The plugin dies and starts again with the same folders (a new store: gsliced's view).
  void Restart() {
    runner_.reset();
    std::string err;
    runner_ = std::make_unique<DraPluginRunner>(config_, &gpus_, &kube_, store_.get());
    ASSERT_TRUE(runner_->Start(&err)) << err;
    kubelet_ = testing::FakeDraKubelet(config_.registry_dir);
    ASSERT_TRUE(kubelet_.Register(10s, &err)) << err;
  }

  fs::path dir_;
  testing::FakeApiServer api_;
  KubeClient kube_{api_.config()};
  StaticGpus gpus_;
  DraPluginConfig config_;
  std::unique_ptr<RecordingStore> store_;
  std::unique_ptr<DraPluginRunner> runner_;
  testing::FakeDraKubelet kubelet_{(fs::temp_directory_path() / ("gslice-dra-" + std::to_string(getpid())) / "registry").string()};
};

TEST_F(DraPluginTest, RegistersWithKubeletAsADraPluginServingV1) {
  EXPECT_EQ(kubelet_.info().type(), "DRAPlugin");
  EXPECT_EQ(kubelet_.info().name(), "gslice.io");
  EXPECT_EQ(kubelet_.info().endpoint(), (dir_ / "plugin" / "dra.sock").string());
  ASSERT_EQ(kubelet_.info().supported_versions_size(), 1);
  EXPECT_EQ(kubelet_.info().supported_versions(0), "v1.DRAPlugin");
  EXPECT_EQ(runner_->registrations(), 1);
  EXPECT_TRUE(fs::exists(dir_ / "registry" / "gslice.io-reg.sock"));
  // Stopped: the registration socket is gone, so kubelet forgets the plugin.
  runner_->Stop();
  EXPECT_FALSE(fs::exists(dir_ / "registry" / "gslice.io-reg.sock"));
}

// Whoever may connect to the plugin's sockets may prepare devices for any claim: they are
// kubelet's (root's) alone, mode 0600, whatever the umask.
TEST_F(DraPluginTest, TheSocketsAreRootsAloneUnderAnyUmask) {
  const mode_t old = umask(0);
  Restart();
  umask(old);
  for (const fs::path& socket : {dir_ / "plugin" / "dra.sock", dir_ / "registry" / "gslice.io-reg.sock"}) {
    struct stat st {};
    ASSERT_EQ(stat(socket.c_str(), &st), 0) << socket;
    EXPECT_TRUE(S_ISSOCK(st.st_mode)) << socket;
    EXPECT_EQ(st.st_mode & 07777, 0600u) << socket;
  }
  // Nothing else is left in the registry folder kubelet watches.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_ / "registry")) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"gslice.io-reg.sock"});
}

TEST_F(DraPluginTest, PublishesEachGpuWithConsumableMemoryAndCompute) {
  json slice = api_.Resource(kSlicePath);
  ASSERT_TRUE(slice.is_object()) << "no ResourceSlice published";
  EXPECT_EQ(slice["apiVersion"], "resource.k8s.io/v1");
  const json& spec = slice["spec"];
  EXPECT_EQ(spec["driver"], "gslice.io");
  EXPECT_EQ(spec["nodeName"], "node-a");
  EXPECT_EQ(spec["pool"]["name"], "node-a");
  EXPECT_EQ(spec["pool"]["generation"], 1);
  EXPECT_EQ(spec["pool"]["resourceSliceCount"], 1);
  ASSERT_EQ(spec["devices"].size(), 2u);
  const json& d = spec["devices"][1];
  EXPECT_EQ(d["name"], "gpu-1");
  EXPECT_EQ(d["allowMultipleAllocations"], true);
  EXPECT_EQ(d["attributes"]["uuid"]["string"], kUuid1);
  EXPECT_EQ(d["attributes"]["productName"]["string"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(d["attributes"]["index"]["int"], 1);
  EXPECT_EQ(d["attributes"]["computeCapability"]["version"], "9.0.0");
  EXPECT_EQ(d["capacity"]["memory"]["value"], std::to_string(81559ll << 20));
  EXPECT_EQ(d["capacity"]["memory"]["requestPolicy"]["validRange"]["step"], std::to_string(64 << 20));
  EXPECT_EQ(d["capacity"]["compute"]["value"], "100");
  EXPECT_EQ(d["capacity"]["compute"]["requestPolicy"]["validRange"]["max"], "100");
  // The DeviceClass selects exactly this driver's devices.
  EXPECT_EQ(BuildDeviceClass("gslice.io")["spec"]["selectors"][0]["cel"]["expression"],
            "device.driver == \"gslice.io\"");
}

TEST_F(DraPluginTest, AGpuLostIsWithdrawnWithTheNextPoolGenerationAndARestartWritesNothing) {
  gpus_.gpus_[0].healthy = false;
  runner_->RunOnce();
  json spec = api_.Resource(kSlicePath)["spec"];
  EXPECT_EQ(spec["pool"]["generation"], 2);
  ASSERT_EQ(spec["devices"].size(), 1u);
  EXPECT_EQ(spec["devices"][0]["name"], "gpu-1");
  const int writes = api_.resource_writes();
  Restart();
  EXPECT_EQ(api_.resource_writes(), writes);
  EXPECT_EQ(runner_->generation(), 2);
}

TEST_F(DraPluginTest, ASliceDeletedBehindThePluginsBackIsPublishedAgain) {
  ASSERT_TRUE(kube_.Call("DELETE", kSlicePath).ok());
  for (int i = 0; i < 60 && api_.Resource(kSlicePath).is_null(); ++i) runner_->RunOnce();
  json slice = api_.Resource(kSlicePath);
  ASSERT_TRUE(slice.is_object()) << "not published again";
  EXPECT_EQ(slice["spec"]["devices"].size(), 2u);
}

TEST_F(DraPluginTest, PreparesAClaimAsASliceWithItsCdiSpec) {
  api_.PutResource(ClaimPath("ml", "train"),
                   MakeClaim("ml", "train", "c1a1", {{"gpu", "gpu-1", "8Gi", "25"}},
                             {{"apiVersion", "gslice.io/v1alpha1"}, {"kind", "SliceParameters"},
                              {"class", "opportunistic"}, {"idleTimeout", "10m"}}));
  grpc::Status st;
  auto resp = kubelet_.Prepare(testing::MakeClaimRef("ml", "train", "c1a1"), &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const auto& answer = resp.claims().at("c1a1");
  ASSERT_EQ(answer.error(), "");
  ASSERT_EQ(answer.devices_size(), 1);
  EXPECT_EQ(answer.devices(0).pool_name(), "node-a");
  EXPECT_EQ(answer.devices(0).device_name(), "gpu-1");
  EXPECT_EQ(answer.devices(0).request_names(0), "gpu");
  ASSERT_EQ(answer.devices(0).cdi_device_ids_size(), 1);
  EXPECT_EQ(answer.devices(0).cdi_device_ids(0), "gslice.io/slice=ml.train.gpu");

  ASSERT_EQ(store_->created.size(), 1u);
  const ClaimSlice& s = store_->created[0];
  EXPECT_EQ(s.slice.run_as_user, -1);  // no pod says
  EXPECT_EQ(SliceNameFor(s.slice), "ml.train.gpu");
  EXPECT_EQ(s.slice.slice_class, SliceClass::kOpportunistic);
  EXPECT_EQ(s.idle_timeout_s, 600);
  ASSERT_EQ(s.slice.container.gpus.size(), 1u);
  EXPECT_EQ(s.slice.container.gpus[0].uuid, kUuid1);
  EXPECT_EQ(s.slice.container.gpus[0].memory_mib, 8192);
  EXPECT_EQ(s.slice.container.gpus[0].compute_percent, 25);

  json cdi = ReadJson(dir_ / "cdi" / "gslice.io-c1a1.json");
  ASSERT_TRUE(cdi.is_object());
  EXPECT_EQ(cdi["kind"], "gslice.io/slice");
  ASSERT_EQ(cdi["devices"].size(), 1u);
  EXPECT_EQ(cdi["devices"][0]["name"], "ml.train.gpu");
  const json& edits = cdi["devices"][0]["containerEdits"];
  for (const std::string& e : std::vector<std::string>{"GSLICE_SLICE=ml.train.gpu", "GSLICE_MEMORY=8192MiB",
                                                       "GSLICE_SHARE=25%", "GSLICE_CLASS=opportunistic",
                                                       std::string("CUDA_VISIBLE_DEVICES=") + kUuid1})
    EXPECT_TRUE(Has(edits["env"], e)) << e << " not in " << edits["env"].dump();
  bool usage_rw = false, ledger_ro = false;
  for (const json& m : edits["mounts"]) {
    if (m["hostPath"] == (dir_ / "usage-ml.train.gpu").string()) usage_rw = m["options"][0] == "rw";
    if (m["hostPath"] == (dir_ / "ledger").string()) ledger_ro = m["options"][0] == "ro";
  }
  EXPECT_TRUE(usage_rw) << edits["mounts"].dump();
  EXPECT_TRUE(ledger_ro) << edits["mounts"].dump();

  // kubelet asks again (it may, after its own restart): the same answer, nothing made twice.
  resp = kubelet_.Prepare(testing::MakeClaimRef("ml", "train", "c1a1"));
  EXPECT_EQ(resp.claims().at("c1a1").devices(0).cdi_device_ids(0), "gslice.io/slice=ml.train.gpu");
  EXPECT_EQ(store_->created.size(), 1u);

  auto un = kubelet_.Unprepare(testing::MakeClaimRef("ml", "train", "c1a1"), &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(un.claims().at("c1a1").error(), "");
  EXPECT_EQ(store_->deleted, std::vector<std::string>{"ml.train.gpu"});
  EXPECT_FALSE(fs::exists(dir_ / "cdi" / "gslice.io-c1a1.json"));
  // Unprepared already: still an answer without an error.
  un = kubelet_.Unprepare(testing::MakeClaimRef("ml", "train", "c1a1"));
  ASSERT_EQ(un.claims().count("c1a1"), 1u);
  EXPECT_EQ(un.claims().at("c1a1").error(), "");
  EXPECT_EQ(store_->deleted.size(), 1u);
}

TEST_F(DraPluginTest, ARestartedPluginKeepsItsPreparedClaims) {
  api_.PutResource(ClaimPath("ml", "nb"), MakeClaim("ml", "nb", "c2b2", {{"gpu", "gpu-0", "4Gi", ""}}));
  // The pod that reserved the claim runs as uid 1000: the slice's usage file becomes its.
  json pod = testing::MakePod("ml", "app", "pod-1", 0, 0, 0);
  pod["spec"]["securityContext"] = {{"runAsUser", 1000}};
  api_.AddPod(pod);
  ASSERT_EQ(kubelet_.Prepare(testing::MakeClaimRef("ml", "nb", "c2b2")).claims().at("c2b2").error(), "");
  ASSERT_EQ(store_->created.size(), 1u);
  EXPECT_EQ(store_->created[0].slice.run_as_user, 1000);
  EXPECT_EQ(store_->created[0].slice.slice_class, SliceClass::kGuaranteed);
  EXPECT_EQ(store_->created[0].slice.container.gpus[0].compute_percent, 0);
  Restart();
  // The claim is gone from the API server (deleted while the pod ends): the record suffices.
  api_.PutResource(ClaimPath("ml", "nb"), json{{"metadata", {{"uid", "other"}}}});
  auto resp = kubelet_.Prepare(testing::MakeClaimRef("ml", "nb", "c2b2"));
  ASSERT_EQ(resp.claims().at("c2b2").error(), "");
  EXPECT_EQ(resp.claims().at("c2b2").devices(0).cdi_device_ids(0), "gslice.io/slice=ml.nb.gpu");
  EXPECT_EQ(store_->created.size(), 1u);
  EXPECT_EQ(runner_->service()->prepared().size(), 1u);
  EXPECT_EQ(kubelet_.Unprepare(testing::MakeClaimRef("ml", "nb", "c2b2")).claims().at("c2b2").error(), "");
  EXPECT_TRUE(store_->live.empty());
  EXPECT_FALSE(fs::exists(dir_ / "cdi" / "gslice.io-c2b2.json"));
  Restart();
  EXPECT_TRUE(runner_->service()->prepared().empty());
}

TEST_F(DraPluginTest, BadParametersAreRefusedAndNothingIsMade) {
  struct Case {
    json params;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{{"class", "best-effort"}}, "class \"best-effort\": expected \"guaranteed\" or \"opportunistic\""},
      {{{"class", "opportunistic"}, {"protect", "0.9"}}, "protect"},
      {{{"protect", "2"}}, "protect"},
      {{{"idleTimeout", "ten minutes"}}, "idleTimeout"},
      {{{"idle", "10m"}}, "unknown field \"idle\""},
      {{{"kind", "GpuConfig"}}, "kind"},
      {{{"computeCap", "fast"}}, "computeCap"},
      {{{"computeCap", "140%"}}, "computeCap"},
  };
  int n = 0;
  for (const Case& c : cases) {
    const std::string uid = "bad" + std::to_string(n++);
    api_.PutResource(ClaimPath("ml", uid), MakeClaim("ml", uid, uid, {{"gpu", "gpu-0", "1Gi", "10"}}, c.params));
    auto resp = kubelet_.Prepare(testing::MakeClaimRef("ml", uid, uid));
    const std::string error = resp.claims().at(uid).error();
    EXPECT_NE(error.find(c.says), std::string::npos) << c.params.dump() << ": " << error;
    EXPECT_EQ(resp.claims().at(uid).devices_size(), 0);
    EXPECT_FALSE(fs::exists(dir_ / "cdi" / ("gslice.io-" + uid + ".json")));
  }
  EXPECT_TRUE(store_->created.empty());
  EXPECT_TRUE(runner_->service()->prepared().empty());
}

TEST_F(DraPluginTest, ClaimsThatAreNotThisNodesOrNotAllocatedAreRefused) {
  // A different UID: the claim was deleted and made again since kubelet looked.
  api_.PutResource(ClaimPath("ml", "a"), MakeClaim("ml", "a", "new-uid", {{"gpu", "gpu-0", "1Gi", ""}}));
  EXPECT_NE(kubelet_.Prepare(testing::MakeClaimRef("ml", "a", "old-uid")).claims().at("old-uid").error().find("UID"),
            std::string::npos);
  // Not allocated.
  api_.PutResource(ClaimPath("ml", "b"), json{{"metadata", {{"name", "b"}, {"namespace", "ml"}, {"uid", "ub"}}}});
  EXPECT_NE(kubelet_.Prepare(testing::MakeClaimRef("ml", "b", "ub")).claims().at("ub").error().find("not allocated"),
            std::string::npos);
  // A GPU this node does not have.
  api_.PutResource(ClaimPath("ml", "c"), MakeClaim("ml", "c", "uc", {{"gpu", "gpu-7", "1Gi", ""}}));
  EXPECT_NE(kubelet_.Prepare(testing::MakeClaimRef("ml", "c", "uc")).claims().at("uc").error().find("gpu-7"),
            std::string::npos);
  // Missing altogether.
  EXPECT_NE(kubelet_.Prepare(testing::MakeClaimRef("ml", "d", "ud")).claims().at("ud").error(), "");
  EXPECT_TRUE(store_->created.empty());
}

TEST_F(DraPluginTest, ASliceThatDoesNotFitUndoesTheClaimsOtherSlices) {
  api_.PutResource(ClaimPath("ml", "two"),
                   MakeClaim("ml", "two", "u2", {{"a", "gpu-0", "1Gi", ""}, {"b", "gpu-1", "2Gi", ""}}));
  store_->FailCreate(2);
  auto resp = kubelet_.Prepare(testing::MakeClaimRef("ml", "two", "u2"));
  EXPECT_NE(resp.claims().at("u2").error().find("does not fit"), std::string::npos) << resp.claims().at("u2").error();
  EXPECT_TRUE(store_->live.empty());
  EXPECT_EQ(store_->deleted, std::vector<std::string>{"ml.two.a"});
  EXPECT_FALSE(fs::exists(dir_ / "cdi" / "gslice.io-u2.json"));
  // Retried once it fits: both slices, one CDI device each.
  resp = kubelet_.Prepare(testing::MakeClaimRef("ml", "two", "u2"));
  ASSERT_EQ(resp.claims().at("u2").error(), "");
  ASSERT_EQ(resp.claims().at("u2").devices_size(), 2);
  EXPECT_EQ(resp.claims().at("u2").devices(1).cdi_device_ids(0), "gslice.io/slice=ml.two.b");
  EXPECT_EQ(ReadJson(dir_ / "cdi" / "gslice.io-u2.json")["devices"].size(), 2u);
}

}  // namespace
}  // namespace gslice::k8s
