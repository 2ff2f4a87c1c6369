// The registry and the API router in one process, over a real SQLite file and the real
// node ledger in shared memory: admission, quotas, hostile requests, restart persistence
// and re-adoption.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "api_server.h"
#include "daemon_test_support.h"
#include "gslice/ledger.h"
#include "ledger_binding.h"
#include "registry.h"
#include "store.h"

namespace gslice {
namespace {

using nlohmann::json;
using testing::kGiB;

class Node {
 public:
  Node(const std::string& db, const std::string& ledger) {
    auto store = Store::Open(db);
    EXPECT_TRUE(store.ok()) << store.status().message();
    auto l = OpenNodeLedger(ledger);
    EXPECT_TRUE(l.ok()) << l.status().message();
    registry = std::make_unique<Registry>(Registry::Options{}, std::move(store.value()),
                                          std::make_unique<testing::FixedInventory>(testing::TestGpus()),
                                          std::move(l.value()), MakeUnavailableSuspender());
    Status s = registry->Start();
    EXPECT_TRUE(s.ok()) << s.message();
    registry->Sample();
    router = std::make_unique<ApiRouter>(registry.get(), "", 0);
  }
  ApiResponse Call(const std::string& method, const std::string& path, const std::string& body = "") {
    ApiRequest r;
    r.method = method;
    r.path = path.substr(0, path.find('?'));
    if (auto q = path.find('?'); q != std::string::npos) {
      std::string kv = path.substr(q + 1);
      r.query[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
    }
    r.body = body;
    return router->Handle(r);
  }
  json CallJson(const std::string& method, const std::string& path, const std::string& body = "",
                int expect = 200) {
    ApiResponse r = Call(method, path, body);
    EXPECT_EQ(r.status, expect) << method << " " << path << ": " << r.body;
    return json::parse(r.body, nullptr, false);
  }
  // Everything the API can change, to compare before and after.
  std::string State() {
    json node = CallJson("GET", "/v1/node");
    node.erase("time_ms");
    return node.dump();
  }
  std::unique_ptr<Registry> registry;
  std::unique_ptr<ApiRouter> router;
};

class RegistryApiTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unlink(db_.c_str());
    unlink((db_ + "-wal").c_str());
    unlink((db_ + "-shm").c_str());
    unlink(ledger_.c_str());
  }
  std::string db_ = testing::UniquePath("registry.db", "/tmp");
  std::string ledger_ = testing::UniquePath("ledger");
};

TEST_F(RegistryApiTest, CreatesListsAndDeletesSlices) {
  Node node(db_, ledger_);
  json created = node.CallJson("POST", "/v1/slices",
                               R"({"name":"train","user":"alice","gpus":["0"],"memory":"8GiB","compute":"50%"})", 201);
  EXPECT_EQ(created["name"], "train");
  EXPECT_EQ(created["project"], "default");
  EXPECT_EQ(created["class"], "guaranteed");
  EXPECT_EQ(created["state"], "running");
  EXPECT_EQ(created["gpus"][0]["uuid"], testing::TestGpus()[0].uuid);
  EXPECT_EQ(created["gpus"][0]["memory_limit_bytes"], 8 * kGiB);
  EXPECT_DOUBLE_EQ(created["gpus"][0]["compute_share"].get<double>(), 0.5);

  json list = node.CallJson("GET", "/v1/slices");
  ASSERT_EQ(list["slices"].size(), 1u);
  json gpus = node.CallJson("GET", "/v1/gpus");
  EXPECT_EQ(gpus["gpus"][0]["guaranteed_memory_bytes"], 8 * kGiB);
  EXPECT_EQ(node.CallJson("GET", "/v1/users")["users"][0]["name"], "alice");

  // The limit is in the node ledger, where the shims read it.
  Ledger ledger;
  ASSERT_EQ(ledger.Open(ledger_.c_str()), LedgerError::kOk);
  int index = ledger.FindSlice("train");
  ASSERT_GE(index, 0);
  EXPECT_EQ(ledger.Limit(index, 0), static_cast<int64_t>(8 * kGiB));

  node.CallJson("DELETE", "/v1/slices/train", "", 200);
  EXPECT_EQ(node.CallJson("GET", "/v1/slices")["slices"].size(), 0u);
  node.CallJson("GET", "/v1/slices/train", "", 404);
  node.CallJson("DELETE", "/v1/slices/train", "", 404);
}

TEST_F(RegistryApiTest, AdmissionRefusalSaysWhatIsFree) {
  Node node(db_, ledger_);
  node.CallJson("POST", "/v1/slices", R"({"name":"a","user":"u","gpus":["0"],"memory":"10GiB","compute":0.5})", 201);
  json refused = node.CallJson("POST", "/v1/slices",
                               R"({"name":"b","user":"u","gpus":["0"],"memory":"8GiB","compute":0.1})", 409);
  std::string uuid = testing::TestGpus()[0].uuid;
  EXPECT_EQ(refused["error"].get<std::string>().rfind("GPU 0 (" + uuid + "): 6 GiB guaranteed memory free, asked 8 GiB", 0), 0u)
      << refused;
  // Opportunistic work is admitted where guaranteed memory is taken.
  node.CallJson("POST", "/v1/slices",
                R"({"name":"b","user":"u","class":"opportunistic","gpus":["0"],"memory":"8GiB"})", 201);
  EXPECT_NE(node.Call("GET", "/metrics").body.find("gslice_admission_refusals_total 1"), std::string::npos);
}

TEST_F(RegistryApiTest, ProjectQuotasAdmitOverQuotaWorkOnlyAsOpportunistic) {
  Node node(db_, ledger_);
  node.CallJson("POST", "/v1/projects", R"({"name":"ml","memory_quota":"12GiB","compute_quota":1.0,"priority":7})", 201);
  node.CallJson("POST", "/v1/slices",
                R"({"name":"a","user":"u","project":"ml","gpus":[{"gpu":"0","memory":"8GiB","compute":"40%"}]})", 201);
  json refused = node.CallJson(
      "POST", "/v1/slices",
      R"({"name":"b","user":"u","project":"ml","gpus":[{"gpu":"1","memory":"8GiB","compute":"40%"}]})", 409);
  EXPECT_NE(refused["error"].get<std::string>().find("project ml: 4 GiB of its 12 GiB memory quota free, asked 8 GiB"),
            std::string::npos)
      << refused;
  node.CallJson(
      "POST", "/v1/slices",
      R"({"name":"b","user":"u","project":"ml","class":"opportunistic","gpus":[{"gpu":"1","memory":"8GiB"}]})", 201);
  json project = node.CallJson("GET", "/v1/projects/ml");
  EXPECT_EQ(project["guaranteed_memory_bytes"], 8 * kGiB);
  EXPECT_EQ(project["priority"], 7);
  EXPECT_EQ(project["slices"], 2);
  // Raising the quota admits more guaranteed work.
  node.CallJson("PUT", "/v1/projects/ml", R"({"memory_quota":"20GiB"})", 200);
  node.CallJson("POST", "/v1/slices",
                R"({"name":"c","user":"u","project":"ml","gpus":[{"gpu":"1","memory":"8GiB","compute":"40%"}]})", 201);
  node.CallJson("POST", "/v1/slices", R"({"name":"d","user":"u","project":"nope","gpus":["0"],"memory":"1GiB"})", 404);
  node.CallJson("DELETE", "/v1/projects/ml", "", 409);  // still has slices
  node.CallJson("DELETE", "/v1/projects/default", "", 409);
}

TEST_F(RegistryApiTest, HostileRequestsGetAClear4xxAndChangeNothing) {
  Node node(db_, ledger_);
  node.CallJson("POST", "/v1/slices", R"({"name":"keep","user":"u","gpus":["0"],"memory":"1GiB"})", 201);
  const std::string before = node.State();
  struct Case {
    const char* method;
    const char* path;
    std::string body;
    int status;
  } cases[] = {
      {"POST", "/v1/slices", "{not json", 400},
      {"POST", "/v1/slices", "[1,2,3]", 400},
      {"POST", "/v1/slices", "", 400},
      {"POST", "/v1/slices", R"({"name":"x","user":"u","gpus":["0"],"memory":"1GiB","evil":1})", 400},
      {"POST", "/v1/slices", R"({"name":"../etc","user":"u","gpus":["0"],"memory":"1GiB"})", 400},
      {"POST", "/v1/slices", R"({"name":"x","user":"u","gpus":["0"],"memory":"-1"})", 400},
      {"POST", "/v1/slices", R"({"name":"x","user":"u","gpus":["0"],"memory":"1GiB","compute":"250%"})", 400},
      {"POST", "/v1/slices", R"({"name":"x","user":"u","gpus":["7"],"memory":"1GiB"})", 400},
      {"POST", "/v1/slices", R"({"name":"x","user":"u","gpus":["0"],"memory":"17GiB"})", 400},
      {"POST", "/v1/slices", R"({"name":"x","gpus":["0"],"memory":"1GiB"})", 400},
      {"POST", "/v1/slices", R"({"name":"x","user":"u","gpus":"0","memory":"1GiB"})", 400},
      {"POST", "/v1/slices", R"({"name":"x","user":"u","class":"vip","gpus":["0"],"memory":"1GiB"})", 400},
      {"POST", "/v1/slices", R"({"name":"keep","user":"u","gpus":["1"],"memory":"1GiB"})", 409},
      {"POST", "/v1/slices", R"({"name":"x","user":"u","gpus":[{"gpu":{"a":1}}],"memory":"1GiB"})", 400},
      {"POST", "/v1/slices", std::string(1000, '[') , 400},
      {"PUT", "/v1/slices", "{}", 405},
      {"DELETE", "/v1/slices", "", 405},
      {"PATCH", "/v1/slices/keep", "{}", 405},
      {"GET", "/v1/slices/keep/suspend", "", 405},
      {"GET", "/v1/../../etc/passwd", "", 400},
      {"GET", "/v1/slices/..", "", 400},
      {"GET", "/v1/slices/%2e%2e", "", 404},
      {"DELETE", "/v1/slices/Keep", "", 404},
      {"GET", "/v1/nothing", "", 404},
      {"GET", "/etc/passwd", "", 404},
      {"GET", "//v1/slices", "", 400},
      {"POST", "/v1/projects", R"({"name":"p","memory_quota":"lots"})", 400},
      {"POST", "/v1/projects", R"({"name":"p","priority":"high"})", 400},
      {"PUT", "/v1/projects/default", R"({"name":"other"})", 400},
      {"POST", "/v1/users", R"({"name":"Bad User"})", 400},
      {"GET", "/v1/history?since=yesterday", "", 400},
  };
  for (const Case& c : cases) {
    ApiResponse r = node.Call(c.method, c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.method << " " << c.path << " " << c.body.substr(0, 80) << " -> " << r.body;
    json j = json::parse(r.body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.body;
    EXPECT_FALSE(j["error"].get<std::string>().empty()) << r.body;
  }
  EXPECT_EQ(node.State(), before);
}

TEST_F(RegistryApiTest, SuspendIsAnsweredHonestlyAndChangesNoState) {
  Node node(db_, ledger_);
  node.CallJson("POST", "/v1/slices", R"({"name":"nb","user":"u","gpus":["0"],"memory":"1GiB"})", 201);
  json r = node.CallJson("POST", "/v1/slices/nb/suspend", "", 501);
  EXPECT_NE(r["error"].get<std::string>().find("keeps running"), std::string::npos) << r;
  json slice = node.CallJson("GET", "/v1/slices/nb");
  EXPECT_EQ(slice["state"], "running");
  EXPECT_NE(slice["last_error"].get<std::string>().find("no suspend mechanism"), std::string::npos);
  // Resuming a running slice is a no-op answered with the slice.
  EXPECT_EQ(node.CallJson("POST", "/v1/slices/nb/resume", "", 200)["state"], "running");
  json events = node.CallJson("GET", "/v1/events");
  bool recorded = false;
  for (const json& e : events["events"]) recorded = recorded || (e["slice"] == "nb" && e["kind"] == "suspend");
  EXPECT_TRUE(recorded) << events;
}

TEST_F(RegistryApiTest, RestartKeepsSlicesAndReadoptsRunningWorkUntouched) {
  {
    Node node(db_, ledger_);
    node.CallJson("POST", "/v1/projects", R"({"name":"ml","memory_quota":"32GiB","priority":3})", 201);
    node.CallJson("POST", "/v1/slices",
                  R"({"name":"train","user":"alice","project":"ml","gpus":["0","1"],"memory":"4GiB","compute":0.25})", 201);
  }
  // A process of the slice is running and holds 3 GiB (as a shimmed process would).
  Ledger app;
  ASSERT_EQ(app.Open(ledger_.c_str()), LedgerError::kOk);
  SliceHandle h;
  ASSERT_EQ(app.AttachByName("train", SliceClass::kGuaranteed, 0, static_cast<uint32_t>(getpid()),
                             ProcessStartTime(static_cast<uint32_t>(getpid())), &h),
            LedgerError::kOk);
  int gpu = app.FindGpu(h.slice, [] {
    static uint8_t uuid[16] = {0x7e, 0x57, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 0};
    return uuid;
  }());
  ASSERT_GE(gpu, 0);
  ASSERT_EQ(app.Charge(h, gpu, static_cast<int64_t>(3 * kGiB)), ChargeResult::kOk);
  // A slice started with `gslice run` while no daemon ran.
  SliceHandle h2;
  ASSERT_EQ(app.AttachByName("adhoc", SliceClass::kOpportunistic, kSliceEphemeral,
                             static_cast<uint32_t>(getpid()), ProcessStartTime(static_cast<uint32_t>(getpid())), &h2),
            LedgerError::kOk);

  // gsliced restarts.
  Node node(db_, ledger_);
  json slice = node.CallJson("GET", "/v1/slices/train");
  EXPECT_EQ(slice["user"], "alice");
  EXPECT_EQ(slice["project"], "ml");
  EXPECT_EQ(slice["gpus"].size(), 2u);
  EXPECT_EQ(slice["memory_used_bytes"], 3 * kGiB);
  ASSERT_EQ(slice["processes"].size(), 1u);  // one process, holding memory on one GPU
  EXPECT_EQ(slice["processes"][0]["pid"], getpid());
  EXPECT_EQ(node.CallJson("GET", "/v1/projects/ml")["priority"], 3);
  // The running process saw nothing: same usage, same limit, and it may still allocate.
  EXPECT_EQ(app.SlotUsage(h, gpu), static_cast<int64_t>(3 * kGiB));
  EXPECT_EQ(app.Limit(h.slice, gpu), static_cast<int64_t>(4 * kGiB));
  EXPECT_EQ(app.Charge(h, gpu, static_cast<int64_t>(kGiB)), ChargeResult::kOk);
  EXPECT_EQ(app.Charge(h, gpu, static_cast<int64_t>(kGiB)), ChargeResult::kOverLimit);
  // The ad-hoc slice was adopted into the registry.
  json adhoc = node.CallJson("GET", "/v1/slices/adhoc");
  EXPECT_EQ(adhoc["origin"], "adopted");
  EXPECT_EQ(adhoc["class"], "opportunistic");
  EXPECT_NE(node.Call("GET", "/metrics").body.find("gslice_slices_adopted_total 2"), std::string::npos);
  app.Detach(h);
  app.Detach(h2);
}

TEST_F(RegistryApiTest, AdoptsSlicesStartedWhileRunningButNotDeletedOnes) {
  Node node(db_, ledger_);
  node.CallJson("POST", "/v1/slices", R"({"name":"gone","user":"u","gpus":["0"],"memory":"1GiB"})", 201);
  Ledger app;
  ASSERT_EQ(app.Open(ledger_.c_str()), LedgerError::kOk);
  const uint32_t pid = static_cast<uint32_t>(getpid());
  SliceHandle in_gone, adhoc;
  ASSERT_EQ(app.AttachByName("gone", SliceClass::kGuaranteed, 0, pid, ProcessStartTime(pid), &in_gone), LedgerError::kOk);
  node.CallJson("DELETE", "/v1/slices/gone", "", 200);  // its process lives on
  ASSERT_EQ(app.AttachByName("late", SliceClass::kOpportunistic, kSliceEphemeral, pid, ProcessStartTime(pid), &adhoc),
            LedgerError::kOk);
  node.registry->Sample();
  json late = node.CallJson("GET", "/v1/slices/late");
  EXPECT_EQ(late["origin"], "adopted");
  EXPECT_EQ(late["processes"].size(), 1u);
  node.CallJson("GET", "/v1/slices/gone", "", 404);
  app.Detach(in_gone);
  app.Detach(adhoc);
}

TEST_F(RegistryApiTest, SchemaIsVersionedAndANewerOneIsRefused) {
  {
    auto store = Store::Open(db_);
    ASSERT_TRUE(store.ok());
    EXPECT_EQ(store.value()->schema_version(), Store::CurrentSchemaVersion());
  }
  std::string cmd = "sqlite3 " + db_ + " 'PRAGMA user_version=999'";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto store = Store::Open(db_);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("newer"), std::string::npos) << store.status().message();
}

TEST_F(RegistryApiTest, MigratesAVersionOneDatabase) {
  // A database as the first schema wrote it.
  std::string cmd = "sqlite3 " + db_ +
                    " \"CREATE TABLE projects (name TEXT PRIMARY KEY, memory_quota_bytes INTEGER NOT NULL DEFAULT 0,"
                    " compute_quota REAL NOT NULL DEFAULT 0, priority INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL);"
                    " CREATE TABLE users (name TEXT PRIMARY KEY, created_at INTEGER NOT NULL);"
                    " CREATE TABLE slices (name TEXT PRIMARY KEY, user TEXT NOT NULL, project TEXT NOT NULL, class TEXT NOT NULL,"
                    " state TEXT NOT NULL, origin TEXT NOT NULL, created_at INTEGER NOT NULL);"
                    " CREATE TABLE slice_gpus (slice TEXT NOT NULL REFERENCES slices(name) ON DELETE CASCADE, gpu_uuid TEXT NOT NULL,"
                    " memory_limit_bytes INTEGER NOT NULL, compute_share REAL NOT NULL, PRIMARY KEY (slice, gpu_uuid));"
                    " CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, time INTEGER NOT NULL, slice TEXT NOT NULL,"
                    " kind TEXT NOT NULL, detail TEXT NOT NULL);"
                    " INSERT INTO projects VALUES ('default', 0, 0, 0, 1);"
                    " INSERT INTO slices VALUES ('old', 'bob', 'default', 'guaranteed', 'running', 'api', 1);"
                    " INSERT INTO slice_gpus VALUES ('old', 'GPU-x', 1024, 0.5);"
                    " PRAGMA user_version=1;\"";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto store = Store::Open(db_);
  ASSERT_TRUE(store.ok()) << store.status().message();
  EXPECT_EQ(store.value()->schema_version(), Store::CurrentSchemaVersion());
  auto slices = store.value()->LoadSlices();
  ASSERT_TRUE(slices.ok());
  ASSERT_EQ(slices->size(), 1u);
  EXPECT_EQ(slices.value()[0].user, "bob");
  EXPECT_EQ(slices.value()[0].idle_timeout_s, 0);
  EXPECT_EQ(slices.value()[0].gpus[0].memory_limit, 1024u);
}

}  // namespace
}  // namespace gslice
