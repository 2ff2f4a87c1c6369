// What callers read of each other's slices (gsliced's slice_reads), through the API router
// with callers as the transport names them: every route of the table walked as a user who
// owns nothing, against another user's slice.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "api_router.h"
#include "daemon_test_support.h"
#include "ledger_binding.h"
#include "registry.h"
#include "store.h"

namespace gslice {
namespace {

using nlohmann::json;

const Caller kAlice{.user = "alice", .uid = 1001};
const Caller kBob{.user = "bob", .uid = 1002};

// A slice name and an owner that appear nowhere else, so that finding them in an answer
// means the answer shows the slice.
constexpr const char* kSecret = "alices-secret-run";
constexpr const char* kMissing = "no-such-slice-xyz";

class SliceReadsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    router_.reset();
    registry_.reset();
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db_ + suffix);
    std::filesystem::remove_all(ledger_);
  }
  void Start(SliceReads reads) {
    auto store = Store::Open(db_);
    ASSERT_TRUE(store.ok()) << store.status().message();
    auto ledger = OpenNodeLedger(ledger_);
    ASSERT_TRUE(ledger.ok()) << ledger.status().message();
    registry_ = std::make_unique<Registry>(Registry::Options{}, std::move(store.value()),
                                           std::make_unique<testing::FixedInventory>(testing::TestGpus()),
                                           std::move(ledger.value()), MakeUnavailableSuspender());
    ASSERT_TRUE(registry_->Start().ok());
    router_ = std::make_unique<ApiRouter>(registry_.get(), "", 0, "", reads);
    ASSERT_EQ(Call(kAlice, "POST", "/v1/slices",
                   std::string(R"({"name":")") + kSecret + R"(","gpus":["0"],"memory":"1GiB"})")
                  .status,
              201);
    ASSERT_EQ(Call(kBob, "POST", "/v1/slices", R"({"name":"bobs","gpus":["1"],"memory":"1GiB"})").status, 201);
    registry_->Sample();  // the history holds both slices
  }
  ApiResponse Call(const Caller& caller, const std::string& method, const std::string& path,
                   const std::string& body = "") {
    ApiRequest r;
    r.method = method;
    r.path = path;
    r.body = body;
    r.caller = caller;
    return router_->Handle(r);
  }
  // What an admin sees of the node, to tell that a refused request changed nothing.
  std::string State() {
    json node = json::parse(Call(Caller::Daemon(), "GET", "/v1/node").body);
    node.erase("time_ms");
    return node.dump();
  }

  std::string db_ = testing::UniquePath("slice-reads.db", "/tmp");
  std::string ledger_ = testing::UniquePath("ledger");
  std::unique_ptr<Registry> registry_;
  std::unique_ptr<ApiRouter> router_;
};

std::string Fill(std::string_view pattern, const std::string& slice) {
  std::string path(pattern);
  for (auto [capture, value] : {std::pair<std::string, std::string>{"{slice}", slice}, {"{project}", "default"}}) {
    if (auto at = path.find(capture); at != std::string::npos) path.replace(at, capture.size(), value);
  }
  return path;
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  for (size_t at; (at = text.find(from)) != std::string::npos;) text.replace(at, from.size(), to);
  return text;
}

TEST_F(SliceReadsTest, EveryRouteDeclaresWhatItReads) {
  ASSERT_FALSE(ApiRoutes().empty());
  for (const RouteDeclaration& r : ApiRoutes()) {
    EXPECT_NE(r.reads, ReadScope::kUndeclared) << r.method << " " << r.pattern;
    const bool names_slice = r.pattern.find("{slice}") != std::string_view::npos;
    EXPECT_EQ(names_slice, r.reads == ReadScope::kOneSlice) << r.method << " " << r.pattern;
  }
}

// Each GET route, as bob, shows nothing of alice's slice: not its name, owner or uid.
TEST_F(SliceReadsTest, UnderOwnerNoReadRouteShowsAnotherUsersSlice) {
  Start(SliceReads::kOwner);
  int reads = 0;
  for (const RouteDeclaration& r : ApiRoutes()) {
    if (r.method != "GET") continue;
    ++reads;
    const std::string path = Fill(r.pattern, kSecret);
    ApiResponse answer = Call(kBob, "GET", path);
    SCOPED_TRACE("GET " + path + ": " + std::to_string(answer.status) + " " + answer.body);
    EXPECT_TRUE(answer.status == 200 || answer.status == 403 || answer.status == 404);
    // A route that names the slice repeats the name asked, as for any name (the next test).
    if (r.reads == ReadScope::kOneSlice) answer.body = Replace(answer.body, kSecret, kMissing);
    EXPECT_EQ(answer.body.find(kSecret), std::string::npos);
    EXPECT_EQ(answer.body.find("alice"), std::string::npos);
    for (const char* uid : {"uid 1001", "\"owner_uid\":1001", "\"mps_uid\":1001"}) {
      EXPECT_EQ(answer.body.find(uid), std::string::npos) << uid;
    }
    // Root reads every route as before.
    ApiResponse admin = Call(Caller::Daemon(), "GET", path);
    EXPECT_NE(admin.status, 403) << admin.body;
  }
  EXPECT_GE(reads, 10);
}

// Every route that names a slice answers bob for alice's slice exactly as for a slice that
// does not exist, and changes nothing.
TEST_F(SliceReadsTest, UnderOwnerAnotherUsersSliceIsAnsweredAsOneThatDoesNotExist) {
  Start(SliceReads::kOwner);
  const std::string before = State();
  for (const RouteDeclaration& r : ApiRoutes()) {
    if (r.reads != ReadScope::kOneSlice) continue;
    const std::string body = r.method == "GET" || r.method == "DELETE" ? "" : R"({"seconds":1,"memory":"2GiB"})";
    ApiResponse hidden = Call(kBob, std::string(r.method), Fill(r.pattern, kSecret), body);
    ApiResponse missing = Call(kBob, std::string(r.method), Fill(r.pattern, kMissing), body);
    SCOPED_TRACE(std::string(r.method) + " " + std::string(r.pattern));
    EXPECT_EQ(hidden.status, 404) << hidden.body;
    EXPECT_EQ(hidden.status, missing.status);
    EXPECT_EQ(Replace(hidden.body, kSecret, kMissing), missing.body);
  }
  EXPECT_EQ(State(), before);
  // Its owner still reads it.
  ApiResponse own = Call(kAlice, "GET", std::string("/v1/slices/") + kSecret);
  EXPECT_EQ(own.status, 200) << own.body;
}

TEST_F(SliceReadsTest, UnderOwnerEachUserListsItsOwnSlicesEventsAndHistory) {
  Start(SliceReads::kOwner);
  json slices = json::parse(Call(kAlice, "GET", "/v1/slices").body)["slices"];
  ASSERT_EQ(slices.size(), 1u) << slices;
  EXPECT_EQ(slices[0]["name"], kSecret);
  json node = json::parse(Call(kBob, "GET", "/v1/node").body);
  ASSERT_EQ(node["slices"].size(), 1u) << node;
  EXPECT_EQ(node["slices"][0]["name"], "bobs");
  ASSERT_EQ(node["users"].size(), 1u) << node;
  EXPECT_EQ(node["users"][0]["name"], "bob");
  // The GPUs' totals count every slice: what is free is every tenant's business.
  EXPECT_EQ(node["gpus"][0]["guaranteed_memory_bytes"], testing::kGiB) << node;
  EXPECT_EQ(node["gpus"][0]["slices"], 1) << node;

  json events = json::parse(Call(kAlice, "GET", "/v1/events").body)["events"];
  ASSERT_FALSE(events.empty());
  for (const json& e : events) EXPECT_EQ(e["slice"], kSecret) << events;
  json samples = json::parse(Call(kAlice, "GET", "/v1/history").body)["samples"];
  ASSERT_FALSE(samples.empty());
  for (const json& s : samples) {
    EXPECT_TRUE(s["slices"].contains(kSecret)) << s;
    EXPECT_FALSE(s["slices"].contains("bobs")) << s;
  }

  ApiResponse metrics = Call(kBob, "GET", "/metrics");
  EXPECT_EQ(metrics.status, 403);
  const std::string error = json::parse(metrics.body)["error"];
  EXPECT_NE(error.find("slice_reads is owner"), std::string::npos) << error;
  EXPECT_NE(error.find("root, members of gsliced's admin_group, the token's holder"), std::string::npos) << error;
  EXPECT_NE(error.find("bob (uid 1002)"), std::string::npos) << error;

  // Root sees everything.
  EXPECT_EQ(json::parse(Call(Caller::Daemon(), "GET", "/v1/slices").body)["slices"].size(), 2u);
  EXPECT_EQ(json::parse(Call(Caller::Daemon(), "GET", "/v1/users").body)["users"].size(), 2u);
  ApiResponse all = Call(Caller::Daemon(), "GET", "/metrics");
  EXPECT_EQ(all.status, 200);
  EXPECT_NE(all.body.find(kSecret), std::string::npos);
}

// A name another user had before: its events and history are not the new owner's.
TEST_F(SliceReadsTest, UnderOwnerANameReusedShowsOnlyWhatFollowsItsNewOwner) {
  Start(SliceReads::kOwner);
  ASSERT_EQ(Call(kAlice, "DELETE", std::string("/v1/slices/") + kSecret).status, 200);
  // Bob's slice of the same name is made at least a second later (creation times are seconds).
  json before = json::parse(Call(Caller::Daemon(), "GET", "/v1/events").body)["events"];
  ASSERT_FALSE(before.empty());
  const int64_t deleted_at = before[0]["time"];
  while (std::time(nullptr) <= deleted_at) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(Call(kBob, "POST", "/v1/slices", std::string(R"({"name":")") + kSecret + R"(","gpus":["0"],"memory":"1GiB"})")
                .status,
            201);
  json events = json::parse(Call(kBob, "GET", "/v1/events").body)["events"];
  for (const json& e : events) {
    if (e["slice"] != kSecret) continue;
    EXPECT_GT(e["time"].get<int64_t>(), deleted_at) << events;
    EXPECT_NE(e["kind"], "delete") << events;
  }
  // Alice's slice was gone before the second after deleted_at began; a sample from then on that
  // holds the name is Bob's own slice (the sampler may run between his POST and this GET).
  json samples = json::parse(Call(kBob, "GET", "/v1/history").body)["samples"];
  for (const json& s : samples) {
    if (s["slices"].contains(kSecret)) {
      EXPECT_GE(s["time_ms"].get<int64_t>(), (deleted_at + 1) * 1000) << s;
    }
  }
}

TEST_F(SliceReadsTest, OpenReadsShowEveryoneEverySliceAsBefore) {
  Start(SliceReads::kOpen);
  EXPECT_EQ(json::parse(Call(kBob, "GET", "/v1/slices").body)["slices"].size(), 2u);
  EXPECT_EQ(json::parse(Call(kBob, "GET", "/v1/node").body)["users"].size(), 2u);
  ApiResponse slice = Call(kBob, "GET", std::string("/v1/slices/") + kSecret);
  EXPECT_EQ(slice.status, 200);
  EXPECT_EQ(json::parse(slice.body)["user"], "alice");
  EXPECT_EQ(Call(kBob, "GET", "/metrics").status, 200);
  // Changing it is still refused, saying whose it is.
  ApiResponse change = Call(kBob, "DELETE", std::string("/v1/slices/") + kSecret);
  EXPECT_EQ(change.status, 403);
  EXPECT_NE(change.body.find("belongs to alice (uid 1001)"), std::string::npos) << change.body;
  json events = json::parse(Call(kBob, "GET", "/v1/events").body)["events"];
  bool saw = false;
  for (const json& e : events) saw = saw || e["slice"] == kSecret;
  EXPECT_TRUE(saw) << events;
}

}  // namespace
}  // namespace gslice
