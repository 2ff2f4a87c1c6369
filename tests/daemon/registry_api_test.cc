// The registry and the API router in one process, over a real SQLite file and the real
// node ledger in shared memory: admission, quotas, hostile requests, restart persistence
// and re-adoption.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "api_server.h"
#include "daemon_test_support.h"
#include "gslice/ledger.h"
#include "gslice/pid_namespace.h"
#include "ledger_binding.h"
#include "registry.h"
#include "store.h"
#include <filesystem>

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
    r.caller = Caller::Daemon();  // root: may do everything (ownership: gsliced_process_test)
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
    std::filesystem::remove_all(ledger_);
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
      // Numbers out of range, overflow included (an idle timeout of 2^55 s once became 1 s).
      {"POST", "/v1/slices", R"({"name":"x","gpus":["0"],"memory":"1GiB","idle_timeout_s":36028797018963968})", 400},
      {"POST", "/v1/slices", R"({"name":"x","gpus":["0"],"memory":"1GiB","idle_timeout_s":18446744073709551615})", 400},
      {"POST", "/v1/slices", R"({"name":"x","gpus":["0"],"memory":18446744073709551615})", 400},
      {"POST", "/v1/slices", R"({"name":"x","gpus":["0"],"memory":1.5})", 400},
      {"POST", "/v1/slices", R"({"name":"x","gpus":[18446744073709551615],"memory":"1GiB"})", 400},
      {"POST", "/v1/projects", R"({"name":"p","priority":18446744073709551615})", 400},
      {"POST", "/v1/projects", R"({"name":"p","memory_quota":"100000EiB"})", 400},
      {"GET", "/v1/history?since=99999999999999999999999", "", 400},
      {"POST", "/v1/slices", R"({"name":"x","user":"u","gpus":"0","memory":"1GiB"})", 400},
      {"POST", "/v1/slices", R"({"name":"x","user":"u","class":"vip","gpus":["0"],"memory":"1GiB"})", 400},
      {"POST", "/v1/slices", R"({"name":"keep","user":"u","gpus":["1"],"memory":"1GiB"})", 409},
      {"POST", "/v1/slices", R"({"name":"x","user":"u","gpus":[{"gpu":{"a":1}}],"memory":"1GiB"})", 400},
      {"POST", "/v1/slices", std::string(1000, '[') , 400},
      {"PUT", "/v1/slices", "{}", 405},
      {"DELETE", "/v1/slices", "", 405},
      {"PATCH", "/v1/slices", "{}", 405},
      {"PATCH", "/v1/slices/keep", R"({"memory":"lots"})", 400},
      {"PATCH", "/v1/slices/keep", R"({"memory":"17GiB"})", 400},
      {"PATCH", "/v1/slices/keep", R"({"memory":["1GiB","2GiB"]})", 400},
      {"PATCH", "/v1/slices/keep", R"({"memory":0})", 400},
      {"PATCH", "/v1/slices/keep", R"({"memory":[]})", 400},
      {"PATCH", "/v1/slices/keep", R"({"compute_cap":"250%"})", 400},
      {"PATCH", "/v1/slices/keep", R"({"compute_share":-1})", 400},
      {"PATCH", "/v1/slices/keep", R"({"class":"vip"})", 400},
      {"PATCH", "/v1/slices/keep", R"({"idle_timeout_s":36028797018963968})", 400},
      {"PATCH", "/v1/slices/keep", R"({"make_room":"yes"})", 400},
      {"PATCH", "/v1/slices/keep", R"({"size":1})", 400},
      {"PATCH", "/v1/slices/keep", "[1]", 400},
      {"PATCH", "/v1/slices/nosuch", R"({"memory":"1GiB"})", 404},
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

// Values read back from the database are checked as the API checks them: a row no request
// could have written (edited by hand, damaged) stops the load with where and what, rather
// than becoming a slice whose idle timeout wrapped or whose limit is negative.
TEST_F(RegistryApiTest, OutOfRangeValuesInTheDatabaseAreRefusedOnLoad) {
  {
    Node node(db_, ledger_);
    node.CallJson("POST", "/v1/slices", R"({"name":"ok","user":"root","gpus":["0"],"memory":"1GiB"})", 201);
    node.CallJson("POST", "/v1/projects", R"({"name":"p","memory_quota":"1GiB"})", 201);
  }
  struct Case {
    const char* update;
    const char* expect;
  };
  const Case cases[] = {
      {"UPDATE slices SET idle_timeout_s = 36028797018963968", "idle_timeout_s 36028797018963968 is out of range"},
      {"UPDATE slices SET idle_timeout_s = -1", "idle_timeout_s -1 is out of range"},
      {"UPDATE slice_gpus SET memory_limit_bytes = -5", "memory_limit_bytes -5 is out of range"},
      {"UPDATE slice_gpus SET compute_share = 7.5", "compute_share 7.5"},
      {"UPDATE slices SET class = 'platinum'", "class 'platinum' is unknown"},
      {"UPDATE slices SET user = 'Bad User'", "slice 'ok'"},
      {"UPDATE projects SET priority = 99999999 WHERE name = 'p'", "priority 99999999 is out of range"},
      {"UPDATE projects SET compute_quota = -1 WHERE name = 'p'", "compute_quota"},
      {"UPDATE slices SET protect_permille = 1500", "protect_permille 1500 is out of range"},
      {"UPDATE slices SET protect_permille = 100", "protect_permille 100 is out of range"},
      {"UPDATE slices SET protect_permille = -1", "protect_permille -1 is out of range"},
  };
  const std::string good = db_ + ".good";
  std::filesystem::copy_file(db_, good, std::filesystem::copy_options::overwrite_existing);
  for (const Case& c : cases) {
    std::filesystem::copy_file(good, db_, std::filesystem::copy_options::overwrite_existing);
    const std::string cmd = "sqlite3 " + db_ + " \"" + c.update + "\"";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    auto store = Store::Open(db_);
    ASSERT_TRUE(store.ok()) << store.status().message();
    auto slices = store.value()->LoadSlices();
    auto projects = store.value()->LoadProjects();
    const std::string message = !slices.ok() ? slices.status().message() : !projects.ok() ? projects.status().message() : "";
    EXPECT_NE(message.find(c.expect), std::string::npos) << c.update << ": '" << message << "'";
  }
  std::filesystem::remove(good);
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

// A database as schema 3 left it (owners recorded, no protection level): migrated in place,
// its slices keep everything and get the default level; the new column round-trips.
TEST_F(RegistryApiTest, MigratesAVersionThreeDatabase) {
  std::string cmd = "sqlite3 " + db_ +
                    " \"CREATE TABLE projects (name TEXT PRIMARY KEY, memory_quota_bytes INTEGER NOT NULL DEFAULT 0,"
                    " compute_quota REAL NOT NULL DEFAULT 0, priority INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL);"
                    " CREATE TABLE users (name TEXT PRIMARY KEY, created_at INTEGER NOT NULL);"
                    " CREATE TABLE slices (name TEXT PRIMARY KEY, user TEXT NOT NULL, project TEXT NOT NULL, class TEXT NOT NULL,"
                    " state TEXT NOT NULL, origin TEXT NOT NULL, created_at INTEGER NOT NULL,"
                    " pod TEXT NOT NULL DEFAULT '', pod_namespace TEXT NOT NULL DEFAULT '',"
                    " idle_timeout_s INTEGER NOT NULL DEFAULT 0, last_error TEXT NOT NULL DEFAULT '',"
                    " owner_uid INTEGER NOT NULL DEFAULT -1);"
                    " CREATE TABLE slice_gpus (slice TEXT NOT NULL REFERENCES slices(name) ON DELETE CASCADE, gpu_uuid TEXT NOT NULL,"
                    " memory_limit_bytes INTEGER NOT NULL, compute_share REAL NOT NULL, PRIMARY KEY (slice, gpu_uuid));"
                    " CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, time INTEGER NOT NULL, slice TEXT NOT NULL,"
                    " kind TEXT NOT NULL, detail TEXT NOT NULL);"
                    " INSERT INTO projects VALUES ('default', 0, 0, 0, 1);"
                    " INSERT INTO slices VALUES ('old', 'bob', 'default', 'guaranteed', 'running', 'api', 1, '', '', 60, '', 1000);"
                    " INSERT INTO slice_gpus VALUES ('old', 'GPU-x', 1024, 0.5);"
                    " PRAGMA user_version=3;\"";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  {
    auto store = Store::Open(db_);
    ASSERT_TRUE(store.ok()) << store.status().message();
    EXPECT_EQ(store.value()->schema_version(), 6);
    EXPECT_EQ(store.value()->schema_version(), Store::CurrentSchemaVersion());
    auto slices = store.value()->LoadSlices();
    ASSERT_TRUE(slices.ok()) << slices.status().message();
    ASSERT_EQ(slices->size(), 1u);
    Slice old = slices.value()[0];
    EXPECT_EQ(old.owner_uid, 1000);
    EXPECT_EQ(old.idle_timeout_s, 60);
    EXPECT_EQ(old.protect_permille, 0u);  // the default
    EXPECT_EQ(old.remote_client, "");     // a local slice
    old.protect_permille = 900;
    old.remote_client = "laptop (tcp 10.0.0.5:41234)";
    ASSERT_TRUE(store.value()->PutSlice(old).ok());
  }
  auto store = Store::Open(db_);
  ASSERT_TRUE(store.ok()) << store.status().message();
  auto slices = store.value()->LoadSlices();
  ASSERT_TRUE(slices.ok()) << slices.status().message();
  ASSERT_EQ(slices->size(), 1u);
  EXPECT_EQ(slices.value()[0].protect_permille, 900u);
  EXPECT_EQ(slices.value()[0].remote_client, "laptop (tcp 10.0.0.5:41234)");
  EXPECT_EQ(slices.value()[0].owner_uid, 1000);
}

// A guaranteed slice's protection level: set on create, shown by the API, kept in the
// database across a restart, and written into the node ledger where the shims read it.
TEST_F(RegistryApiTest, ProtectionLevelIsStoredShownAndWrittenToTheLedger) {
  Ledger ledger;
  {
    Node node(db_, ledger_);
    json made = node.CallJson("POST", "/v1/slices",
                              R"({"name":"train","user":"u","gpus":["0"],"memory":"1GiB","protect":0.9})", 201);
    EXPECT_DOUBLE_EQ(made["protect"].get<double>(), 0.9);
    json plain = node.CallJson("POST", "/v1/slices", R"({"name":"plain","user":"u","gpus":["0"],"memory":"1GiB"})", 201);
    EXPECT_DOUBLE_EQ(plain["protect"].get<double>(), 0.97);  // the default, shown as what holds
    json opp = node.CallJson("POST", "/v1/slices",
                             R"({"name":"opp","user":"u","class":"opportunistic","gpus":["0"],"memory":"1GiB"})", 201);
    EXPECT_TRUE(opp["protect"].is_null()) << opp;
    EXPECT_DOUBLE_EQ(node.CallJson("GET", "/v1/slices/train")["protect"].get<double>(), 0.9);
    bool listed = false;
    const json list = node.CallJson("GET", "/v1/slices");
    for (const json& s : list["slices"]) {
      if (s["name"] == "train") {
        listed = true;
        EXPECT_DOUBLE_EQ(s["protect"].get<double>(), 0.9);
      }
    }
    EXPECT_TRUE(listed);
    const std::string metrics = node.Call("GET", "/metrics").body;
    EXPECT_NE(metrics.find("gslice_slice_protect_ratio{slice=\"train\",user=\"u\",project=\"default\",class=\"guaranteed\"} 0.9\n"),
              std::string::npos) << metrics;
    EXPECT_NE(metrics.find("gslice_slice_protect_ratio{slice=\"plain\""), std::string::npos);
    EXPECT_EQ(metrics.find("gslice_slice_protect_ratio{slice=\"opp\""), std::string::npos);
    ASSERT_EQ(ledger.Open(ledger_.c_str()), LedgerError::kOk);
    const LedgerLimits* l = ledger.limits();
    EXPECT_EQ(l->slices[ledger.FindSlice("train")].protect_permille, 900u);
    EXPECT_EQ(l->slices[ledger.FindSlice("plain")].protect_permille, 0u);
    EXPECT_EQ(l->slices[ledger.FindSlice("opp")].protect_permille, 0u);
  }
  // A restart: the database has it, and publishing again keeps it in the ledger.
  Node node(db_, ledger_);
  EXPECT_DOUBLE_EQ(node.CallJson("GET", "/v1/slices/train")["protect"].get<double>(), 0.9);
  EXPECT_EQ(ledger.limits()->slices[ledger.FindSlice("train")].protect_permille, 900u);
}

// A remote slice (a gslice-remoted worker's) carries its client: shown with the slice's state
// as seen by its client, kept across a restart; a local slice has none; a client text that is
// not printable or too long is refused.
TEST_F(RegistryApiTest, RemoteSlicesShowTheirClient) {
  {
    Node node(db_, ledger_);
    json made = node.CallJson(
        "POST", "/v1/slices",
        R"j({"name":"remote-1","user":"u","gpus":["0"],"memory":"1GiB","remote_client":"laptop (tcp 10.0.0.5:41234)"})j",
        201);
    EXPECT_EQ(made["remote"]["client"], "laptop (tcp 10.0.0.5:41234)") << made;
    EXPECT_EQ(made["remote"]["state"], "attached") << made;
    json local = node.CallJson("POST", "/v1/slices", R"({"name":"local","user":"u","gpus":["0"],"memory":"1GiB"})", 201);
    EXPECT_TRUE(local["remote"].is_null()) << local;
    node.CallJson("POST", "/v1/slices",
                  R"({"name":"bad","user":"u","gpus":["0"],"memory":"1GiB","remote_client":"a
b"})", 400);
    node.CallJson("POST", "/v1/slices",
                  json{{"name", "long"}, {"user", "u"}, {"gpus", {"0"}}, {"memory", "1GiB"},
                       {"remote_client", std::string(201, 'x')}}
                      .dump(),
                  400);
    EXPECT_EQ(node.Call("GET", "/v1/slices/bad").status, 404);
  }
  Node node(db_, ledger_);
  EXPECT_EQ(node.CallJson("GET", "/v1/slices/remote-1")["remote"]["client"], "laptop (tcp 10.0.0.5:41234)");
}

// PATCH changes a guaranteed slice's protection level in the database and the ledger, where the
// opportunistic gates read it; an opportunistic slice, or a level out of range, is refused and
// changes nothing.
TEST_F(RegistryApiTest, PatchChangesTheProtectionLevel) {
  Node node(db_, ledger_);
  node.CallJson("POST", "/v1/slices", R"({"name":"serve","user":"u","gpus":["0"],"memory":"1GiB"})", 201);
  node.CallJson("POST", "/v1/slices", R"({"name":"opp","user":"u","class":"opportunistic","gpus":["0"],"memory":"1GiB"})",
                201);
  json changed = node.CallJson("PATCH", "/v1/slices/serve", R"({"protect":0.8})", 200);
  EXPECT_DOUBLE_EQ(changed["protect"].get<double>(), 0.8) << changed;
  Ledger ledger;
  ASSERT_EQ(ledger.Open(ledger_.c_str()), LedgerError::kOk);
  EXPECT_EQ(ledger.limits()->slices[ledger.FindSlice("serve")].protect_permille, 800u);
  EXPECT_EQ(node.Call("PATCH", "/v1/slices/serve", R"({"protect":90})").status, 400);
  EXPECT_EQ(node.Call("PATCH", "/v1/slices/opp", R"({"protect":0.9})").status, 400);
  EXPECT_DOUBLE_EQ(node.CallJson("GET", "/v1/slices/serve")["protect"].get<double>(), 0.8);
  EXPECT_EQ(ledger.limits()->slices[ledger.FindSlice("serve")].protect_permille, 800u);
  EXPECT_EQ(ledger.limits()->slices[ledger.FindSlice("opp")].protect_permille, 0u);
}

// A slice a `gslice run --no-daemon --protect` wrote into the node ledger keeps its level when
// gsliced adopts it.
TEST_F(RegistryApiTest, AdoptionKeepsTheLedgersProtectionLevel) {
  Node node(db_, ledger_);
  Ledger app;
  ASSERT_EQ(app.Open(ledger_.c_str()), LedgerError::kOk);
  int index = -1;
  ASSERT_EQ(app.FindOrCreateSlice("solo", SliceClass::kGuaranteed, kSliceEphemeral, &index, kLedgerOwnerCaller, 800),
            LedgerError::kOk);
  SliceHandle h;
  const uint32_t pid = static_cast<uint32_t>(getpid());
  ASSERT_EQ(app.Attach(index, pid, ProcessStartTime(pid), &h), LedgerError::kOk);
  node.registry->Sample();
  json solo = node.CallJson("GET", "/v1/slices/solo");
  EXPECT_EQ(solo["origin"], "adopted");
  EXPECT_DOUBLE_EQ(solo["protect"].get<double>(), 0.8);
  EXPECT_EQ(app.limits()->slices[index].protect_permille, 800u);
  app.Detach(h);
}

// The level is a fraction of solo speed from 0.5 to 1, for guaranteed slices only: anything
// else is a 400 that says what to write, and changes nothing.
TEST_F(RegistryApiTest, ProtectionLevelRefusalsSayWhatToWrite) {
  Node node(db_, ledger_);
  const std::string before = node.State();
  struct Case {
    const char* body;
    const char* expect;
  } cases[] = {
      {R"({"name":"x","gpus":["0"],"memory":"1GiB","protect":0.3})", "protect: 0.3 is out of range: from 0.5 to 1"},
      {R"({"name":"x","gpus":["0"],"memory":"1GiB","protect":90})", "protect: 90 is out of range"},
      {R"({"name":"x","gpus":["0"],"memory":"1GiB","protect":1.2})", "protect: 1.2 is out of range"},
      {R"({"name":"x","gpus":["0"],"memory":"1GiB","protect":-1})", "out of range"},
      {R"({"name":"x","gpus":["0"],"memory":"1GiB","protect":"0.9"})", "protect: expected a number from 0.5 to 1"},
      {R"({"name":"x","gpus":["0"],"memory":"1GiB","protect":[0.9]})", "protect: expected a number"},
      {R"({"name":"x","class":"opportunistic","gpus":["0"],"memory":"1GiB","protect":0.9})",
       "protect: only guaranteed slices have a protection level"},
  };
  for (const Case& c : cases) {
    ApiResponse r = node.Call("POST", "/v1/slices", c.body);
    EXPECT_EQ(r.status, 400) << c.body << " -> " << r.body;
    json j = json::parse(r.body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.body;
    EXPECT_NE(j["error"].get<std::string>().find(c.expect), std::string::npos) << c.body << " -> " << r.body;
  }
  EXPECT_EQ(node.State(), before);
  // The ends of the range are levels too.
  EXPECT_DOUBLE_EQ(node.CallJson("POST", "/v1/slices", R"({"name":"lo","gpus":["0"],"memory":"1GiB","protect":0.5})",
                                 201)["protect"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(node.CallJson("POST", "/v1/slices", R"({"name":"hi","gpus":["0"],"memory":"1GiB","protect":1})",
                                 201)["protect"].get<double>(), 1.0);
}

}  // namespace
}  // namespace gslice

namespace gslice {
namespace {

// Admission cannot be skipped and the database and the ledger never disagree: adoption,
// delete, name reuse, expiry and failing database writes.
class ConsistencyTest : public RegistryApiTest {
 protected:
  // A shimmed process of a slice gsliced did not create (`gslice run` without a daemon):
  // attached to `name` with `limit` bytes (<0 unlimited) on test GPU `gpu`.
  SliceHandle RunWithoutDaemon(Ledger* app, const std::string& name, int gpu, int64_t limit) {
    const uint32_t pid = static_cast<uint32_t>(getpid());
    SliceHandle h;
    EXPECT_EQ(app->AttachByName(name.c_str(), SliceClass::kGuaranteed, kSliceEphemeral, pid, ProcessStartTime(pid), &h),
              LedgerError::kOk);
    int g = -1;
    EXPECT_EQ(app->FindOrAddGpu(h.slice, Uuid(gpu), limit, &g), LedgerError::kOk);
    return h;
  }
  static const uint8_t* Uuid(int gpu) {
    static uint8_t uuids[2][16] = {{0x7e, 0x57, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 0},
                                   {0x7e, 0x57, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 1}};
    return uuids[gpu];
  }
  // The slices the ledger lists, as gsliced reads them after a restart.
  std::vector<PublishedSlice> Published() {
    auto l = OpenNodeLedger(ledger_);
    EXPECT_TRUE(l.ok());
    auto slices = l.value()->Slices();
    EXPECT_TRUE(slices.ok());
    return slices.value();
  }
  const PublishedSlice* Find(const std::vector<PublishedSlice>& slices, const std::string& name) {
    for (const PublishedSlice& s : slices) {
      if (s.name == name) return &s;
    }
    return nullptr;
  }
  std::string EventsOf(Node& node, const std::string& slice) {
    std::string out;
    const json events = node.CallJson("GET", "/v1/events");
    for (const json& e : events["events"]) {
      if (e["slice"] == slice) out += e["kind"].get<std::string>() + ": " + e["detail"].get<std::string>() + "\n";
    }
    return out;
  }
  // Node::State with slices in name order (a restart lists slices made in one second by name).
  std::string SortedState(Node& node) {
    json state = json::parse(node.State());
    std::sort(state["slices"].begin(), state["slices"].end(),
              [](const json& a, const json& b) { return a["name"] < b["name"]; });
    return state.dump();
  }
  // Runs SQL on the database from outside, as another process would (sqlite3 CLI).
  void Sql(const std::string& sql) {
    std::string cmd = "sqlite3 " + db_ + " \"" + sql + "\"";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << sql;
  }
  // Makes the statements `when` names fail (a trigger), as a full disk or a broken database
  // would.
  void FailDatabase(const std::string& when) {
    Sql("CREATE TRIGGER gslice_test_fault " + when + " BEGIN SELECT RAISE(FAIL, 'injected fault'); END;");
  }
  void HealDatabase() { Sql("DROP TRIGGER gslice_test_fault"); }
};

TEST_F(ConsistencyTest, AdoptionNeverPushesAGpuPastItsCapacity) {
  Node node(db_, ledger_);
  node.CallJson("POST", "/v1/slices", R"({"name":"a","user":"u","gpus":["0"],"memory":"10GiB"})", 201);
  Ledger app;
  ASSERT_EQ(app.Open(ledger_.c_str()), LedgerError::kOk);
  SliceHandle big = RunWithoutDaemon(&app, "big", 0, static_cast<int64_t>(13 * kGiB));    // 6 GiB free
  SliceHandle small = RunWithoutDaemon(&app, "small", 0, static_cast<int64_t>(4 * kGiB));  // fits
  SliceHandle wild = RunWithoutDaemon(&app, "wild", 0, -1);                                 // no limit at all
  node.registry->Sample();

  json gpus = node.CallJson("GET", "/v1/gpus");
  EXPECT_EQ(gpus["gpus"][0]["guaranteed_memory_bytes"], 14 * kGiB);
  EXPECT_LE(gpus["gpus"][0]["guaranteed_memory_bytes"].get<uint64_t>(), 16 * kGiB);
  EXPECT_EQ(gpus["gpus"][0]["slices"], 4);
  json b = node.CallJson("GET", "/v1/slices/big");
  EXPECT_EQ(b["class"], "opportunistic");
  EXPECT_EQ(b["origin"], "adopted");
  EXPECT_NE(EventsOf(node, "big").find("6 GiB guaranteed memory free, asked 13 GiB"), std::string::npos)
      << EventsOf(node, "big");
  EXPECT_NE(EventsOf(node, "big").find("adopted as opportunistic"), std::string::npos);
  EXPECT_EQ(node.CallJson("GET", "/v1/slices/small")["class"], "guaranteed");
  EXPECT_NE(EventsOf(node, "small").find("admitted as guaranteed"), std::string::npos) << EventsOf(node, "small");
  json w = node.CallJson("GET", "/v1/slices/wild");
  EXPECT_EQ(w["class"], "opportunistic");
  EXPECT_NE(w["last_error"].get<std::string>().find("over-committed"), std::string::npos) << w;
  EXPECT_NE(EventsOf(node, "wild").find("over-committed"), std::string::npos) << EventsOf(node, "wild");
  // A GPU an adopted slice takes later passes admission too.
  node.CallJson("POST", "/v1/slices", R"({"name":"b","user":"u","gpus":["1"],"memory":"10GiB"})", 201);
  int added = -1;
  ASSERT_EQ(app.FindOrAddGpu(small.slice, Uuid(1), static_cast<int64_t>(8 * kGiB), &added), LedgerError::kOk);
  node.registry->Sample();
  json s = node.CallJson("GET", "/v1/slices/small");
  EXPECT_EQ(s["class"], "opportunistic");
  EXPECT_EQ(s["gpus"].size(), 2u);
  gpus = node.CallJson("GET", "/v1/gpus");
  EXPECT_EQ(gpus["gpus"][0]["guaranteed_memory_bytes"], 10 * kGiB);
  EXPECT_EQ(gpus["gpus"][1]["guaranteed_memory_bytes"], 10 * kGiB);
  EXPECT_NE(EventsOf(node, "small").find("now uses " + testing::TestGpus()[1].uuid), std::string::npos)
      << EventsOf(node, "small");
  // The ledger says so too, and a restart changes nothing.
  auto published = Published();
  ASSERT_NE(Find(published, "big"), nullptr);
  EXPECT_EQ(Find(published, "big")->slice_class, SliceClass::kOpportunistic);
  const std::string before = SortedState(node);
  node.registry.reset();
  Node again(db_, ledger_);
  EXPECT_EQ(SortedState(again), before);
  app.Detach(big);
  app.Detach(small);
  app.Detach(wild);
}

TEST_F(ConsistencyTest, ADeletedSliceStaysGoneAfterARestart) {
  Ledger app;
  ASSERT_EQ(app.Open(ledger_.c_str()), LedgerError::kOk);
  SliceHandle h;
  {
    Node node(db_, ledger_);
    node.CallJson("POST", "/v1/slices", R"({"name":"gone","user":"u","gpus":["0"],"memory":"4GiB"})", 201);
    const uint32_t pid = static_cast<uint32_t>(getpid());
    ASSERT_EQ(app.AttachByName("gone", SliceClass::kGuaranteed, 0, pid, ProcessStartTime(pid), &h), LedgerError::kOk);
    node.registry->Sample();
    node.CallJson("DELETE", "/v1/slices/gone", "", 200);
    EXPECT_NE(EventsOf(node, "gone").find("1 process(es) run on"), std::string::npos) << EventsOf(node, "gone");
  }
  // Its process runs on, under its limit.
  int gpu = app.FindGpu(h.slice, Uuid(0));
  ASSERT_GE(gpu, 0);
  EXPECT_EQ(app.Charge(h, gpu, static_cast<int64_t>(3 * kGiB)), ChargeResult::kOk);
  EXPECT_EQ(app.Charge(h, gpu, static_cast<int64_t>(2 * kGiB)), ChargeResult::kOverLimit);
  // gsliced restarts: the slice does not come back.
  Node node(db_, ledger_);
  node.CallJson("GET", "/v1/slices/gone", "", 404);
  node.registry->Sample();
  node.CallJson("GET", "/v1/slices/gone", "", 404);
  EXPECT_EQ(node.CallJson("GET", "/v1/gpus")["gpus"][0]["guaranteed_memory_bytes"], 0);
  app.Detach(h);
}

TEST_F(ConsistencyTest, AReusedNameStartsClean) {
  Node node(db_, ledger_);
  node.CallJson("POST", "/v1/slices", R"({"name":"reuse","user":"u","gpus":["0"],"memory":"4GiB"})", 201);
  Ledger app;
  ASSERT_EQ(app.Open(ledger_.c_str()), LedgerError::kOk);
  const uint32_t pid = static_cast<uint32_t>(getpid());
  SliceHandle old_process;
  ASSERT_EQ(app.AttachByName("reuse", SliceClass::kGuaranteed, 0, pid, ProcessStartTime(pid), &old_process),
            LedgerError::kOk);
  ASSERT_EQ(app.Charge(old_process, app.FindGpu(old_process.slice, Uuid(0)), static_cast<int64_t>(kGiB)),
            ChargeResult::kOk);
  node.CallJson("DELETE", "/v1/slices/reuse", "", 200);
  // The same name on the other GPU, with another limit, while the old process still runs.
  node.CallJson("POST", "/v1/slices", R"({"name":"reuse","user":"v","gpus":["1"],"memory":"2GiB"})", 201);
  int index = app.FindSlice("reuse");
  ASSERT_GE(index, 0);
  EXPECT_NE(index, old_process.slice);
  EXPECT_LT(app.FindGpu(index, Uuid(0)), 0) << "the old GPU's entry carried over";
  int gpu1 = app.FindGpu(index, Uuid(1));
  ASSERT_GE(gpu1, 0);
  EXPECT_EQ(app.Limit(index, gpu1), static_cast<int64_t>(2 * kGiB));
  EXPECT_EQ(app.AliveCount(index), 0);
  auto published = Published();
  ASSERT_NE(Find(published, "reuse"), nullptr);
  ASSERT_EQ(Find(published, "reuse")->gpus.size(), 1u);
  EXPECT_EQ(Find(published, "reuse")->gpus[0].uuid, testing::TestGpus()[1].uuid);
  node.registry->Sample();
  json slice = node.CallJson("GET", "/v1/slices/reuse");
  EXPECT_EQ(slice["user"], "v");
  EXPECT_EQ(slice["processes"].size(), 0u) << slice;
  EXPECT_EQ(slice["memory_used_bytes"], 0);
  app.Detach(old_process);

  // Reused again once nobody runs in it: still a clean entry.
  node.CallJson("DELETE", "/v1/slices/reuse", "", 200);
  node.CallJson("POST", "/v1/slices", R"({"name":"reuse","user":"w","gpus":["0"],"memory":"1GiB"})", 201);
  index = app.FindSlice("reuse");
  ASSERT_GE(index, 0);
  EXPECT_LT(app.FindGpu(index, Uuid(1)), 0);
  EXPECT_EQ(app.Limit(index, app.FindGpu(index, Uuid(0))), static_cast<int64_t>(kGiB));
}

TEST_F(ConsistencyTest, RunRegistrationsExpireWhenTheirProgramIsGone) {
  // gslice run registered a slice, and its program ended while gsliced was down (the
  // registration is older than the time a program has to reach the driver).
  {
    Node node(db_, ledger_);
    node.CallJson("POST", "/v1/slices", R"({"name":"run-1","user":"u","origin":"run","gpus":["0"],"memory":"8GiB"})",
                  201);
    node.CallJson("POST", "/v1/slices", R"({"name":"kept","user":"u","gpus":["0"],"memory":"1GiB"})", 201);
  }
  ASSERT_EQ(std::system(("sqlite3 " + db_ + " 'UPDATE slices SET created_at = created_at - 3600'").c_str()), 0);
  Node node(db_, ledger_);
  node.CallJson("GET", "/v1/slices/run-1", "", 404);
  node.CallJson("GET", "/v1/slices/kept", "", 200);  // made through the API: kept until deleted
  EXPECT_EQ(node.CallJson("GET", "/v1/gpus")["gpus"][0]["guaranteed_memory_bytes"], kGiB);
  EXPECT_NE(EventsOf(node, "run-1").find("expire: no process of it is left"), std::string::npos)
      << EventsOf(node, "run-1");
  EXPECT_EQ(Find(Published(), "run-1"), nullptr);

  // While gsliced runs: a registration expires when the gslice run holding it is gone
  // (killed before it could unregister), not while it lives.
  pid_t holder = fork();
  if (holder == 0) {
    pause();
    _exit(0);
  }
  const PidIdentity self{SelfPidNamespace(), static_cast<uint32_t>(getpid()), ProcessStartTime(static_cast<uint32_t>(getpid()))};
  auto body = [](const std::string& name, uint64_t ns, uint32_t pid, uint64_t start) {
    return json{{"name", name}, {"user", "u"}, {"origin", "run"}, {"gpus", json::array({"1"})}, {"memory", "1GiB"},
                {"holder", {{"pid", pid}, {"pid_ns", ns}, {"start_time", start}}}}.dump();
  };
  node.CallJson("POST", "/v1/slices", body("run-2", self.pid_ns, static_cast<uint32_t>(holder),
                                           ProcessStartTime(static_cast<uint32_t>(holder))), 201);
  node.CallJson("POST", "/v1/slices", body("run-3", self.pid_ns, self.pid, self.start_time), 201);
  node.registry->Sample();
  node.CallJson("GET", "/v1/slices/run-2", "", 200);
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  node.registry->Sample();
  node.CallJson("GET", "/v1/slices/run-2", "", 404);
  EXPECT_NE(EventsOf(node, "run-2").find("its program ended"), std::string::npos) << EventsOf(node, "run-2");
  node.CallJson("GET", "/v1/slices/run-3", "", 200);  // its holder (this test) lives
}

TEST_F(ConsistencyTest, AFailedDatabaseWriteChangesNothing) {
  Node node(db_, ledger_);
  node.CallJson("POST", "/v1/slices", R"({"name":"keep","user":"u","gpus":["0"],"memory":"4GiB"})", 201);
  const std::string before = node.State();
  FailDatabase("BEFORE DELETE ON slices");
  ApiResponse r = node.Call("DELETE", "/v1/slices/keep");
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_NE(r.body.find("injected fault"), std::string::npos) << r.body;
  EXPECT_EQ(node.State(), before);
  ASSERT_NE(Find(Published(), "keep"), nullptr) << "the ledger entry was withdrawn";
  HealDatabase();

  // A create whose event cannot be written publishes nothing.
  FailDatabase("BEFORE INSERT ON events");
  r = node.Call("POST", "/v1/slices", R"({"name":"half","user":"u","gpus":["0"],"memory":"1GiB"})");
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_EQ(Find(Published(), "half"), nullptr);
  Ledger app;
  ASSERT_EQ(app.Open(ledger_.c_str()), LedgerError::kOk);
  EXPECT_LT(app.FindSlice("half"), 0);
  // Nor does a delete whose event cannot be written withdraw anything.
  r = node.Call("DELETE", "/v1/slices/keep");
  EXPECT_EQ(r.status, 500) << r.body;
  HealDatabase();
  EXPECT_EQ(node.State(), before);
  ASSERT_NE(Find(Published(), "keep"), nullptr);
  // A commit that fails (a deferred constraint, checked only at COMMIT) after the ledger was
  // changed: the change is undone.
  Sql("CREATE TABLE gslice_test_refs (slice TEXT REFERENCES slices(name) DEFERRABLE INITIALLY DEFERRED); "
      "CREATE TRIGGER gslice_test_fault AFTER DELETE ON slices BEGIN "
      "INSERT INTO gslice_test_refs VALUES (OLD.name); END;");
  r = node.Call("DELETE", "/v1/slices/keep");
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_NE(r.body.find("commit"), std::string::npos) << r.body;
  EXPECT_EQ(node.State(), before);
  ASSERT_NE(Find(Published(), "keep"), nullptr) << "a failed commit left the entry withdrawn";
  Sql("DROP TRIGGER gslice_test_fault; CREATE TRIGGER gslice_test_fault AFTER INSERT ON slices BEGIN "
      "INSERT INTO gslice_test_refs VALUES ('nobody'); END;");
  r = node.Call("POST", "/v1/slices", R"({"name":"half","user":"u","gpus":["0"],"memory":"1GiB"})");
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_EQ(Find(Published(), "half"), nullptr) << "a failed commit left the entry published";
  Sql("DROP TRIGGER gslice_test_fault; DROP TABLE gslice_test_refs;");
  EXPECT_EQ(node.State(), before);
  // And a restart finds what the API showed.
  node.registry.reset();
  Node again(db_, ledger_);
  EXPECT_EQ(again.State(), before);
  again.CallJson("DELETE", "/v1/slices/keep", "", 200);
  EXPECT_EQ(Find(Published(), "keep"), nullptr);
}

}  // namespace
}  // namespace gslice
