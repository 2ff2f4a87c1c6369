// gsliced's slice_reads on the simulator, with callers the kernel names: user daemon (uid 1)
// owns a slice; user nobody (uid 65534) lists, reads and changes through the CLI and plain
// HTTP on the 0666 socket; root reads everything.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "sim_gsliced_fixture.h"

namespace gslice {
namespace {

using nlohmann::json;

constexpr const char* kDaemonUid = "1";
constexpr const char* kNobodyUid = "65534";
constexpr const char* kSlice = "daemons-run";

class SliceReadsProcess : public testing::SimGsliced {
 protected:
  SliceReadsProcess() : SimGsliced("reads") {}

  struct Answer {
    int status = 0;
    std::string body;
  };
  // GET `path` on the socket as uid `as` (its own group, no others), through curl: without the
  // sanitize build's preloaded runtime (curl is not built with it, and hangs under it).
  Answer GetAs(const std::string& as, const std::string& path) {
    static int n = 0;
    const std::string file = dir_ + "/get-" + std::to_string(n++);
    const std::string cmd = "unset LD_PRELOAD && setpriv --reuid=" + as + " --regid=" + as +
                            " --clear-groups curl -s --max-time 20 -w '\\n%{http_code}' --unix-socket " + socket_ +
                            " http://gsliced" + path + " > " + file;
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::string out = testing::ReadAll(file);
    const size_t nl = out.rfind('\n');
    if (nl == std::string::npos) return {};
    return {std::atoi(out.c_str() + nl + 1), out.substr(0, nl)};
  }
  void CreateDaemonsSlice() {
    std::string out, err;
    ASSERT_EQ(Cli(std::string("create ") + kSlice + " --gpus 0 --memory 1GiB", &out, &err, kDaemonUid), 0) << err;
  }
};

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  for (size_t at; (at = text.find(from)) != std::string::npos;) text.replace(at, from.size(), to);
  return text;
}

TEST_F(SliceReadsProcess, UnderOwnerAUserSeesAndChangesOnlyItsOwnSlices) {
  Start({"--sim", "--set", "slice_reads=owner"});
  CreateDaemonsSlice();
  std::string out, err;

  // nobody lists: the slice is not there, in the table or the JSON.
  ASSERT_EQ(Cli("ls", &out, &err, kNobodyUid), 0) << err;
  EXPECT_EQ(out.find(kSlice), std::string::npos) << out;
  ASSERT_EQ(Cli("ls --json", &out, &err, kNobodyUid), 0) << err;
  json node = json::parse(out, nullptr, false);
  EXPECT_TRUE(node["slices"].empty()) << out;
  EXPECT_TRUE(node["users"].empty()) << out;
  EXPECT_EQ(node["gpus"][0]["guaranteed_memory_bytes"], testing::kGiB) << out;

  // By name: as for a slice that does not exist, reading and changing.
  Answer hidden = GetAs(kNobodyUid, std::string("/v1/slices/") + kSlice);
  Answer missing = GetAs(kNobodyUid, "/v1/slices/nosuch");
  EXPECT_EQ(hidden.status, 404) << hidden.body;
  EXPECT_EQ(Replace(hidden.body, kSlice, "nosuch"), missing.body);
  EXPECT_EQ(GetAs(kNobodyUid, std::string("/v1/slices/") + kSlice + "/trace").status, 404);
  EXPECT_EQ(Cli(std::string("delete ") + kSlice, &out, &err, kNobodyUid), 1);
  EXPECT_NE(err.find(std::string("no slice named '") + kSlice + "'"), std::string::npos) << err;

  Answer events = GetAs(kNobodyUid, "/v1/events");
  EXPECT_EQ(events.status, 200);
  EXPECT_EQ(events.body.find(kSlice), std::string::npos) << events.body;
  Answer history = GetAs(kNobodyUid, "/v1/history");
  EXPECT_EQ(history.status, 200);
  EXPECT_EQ(history.body.find(kSlice), std::string::npos) << history.body;
  Answer metrics = GetAs(kNobodyUid, "/metrics");
  EXPECT_EQ(metrics.status, 403) << metrics.body;
  EXPECT_NE(metrics.body.find("slice_reads is owner"), std::string::npos) << metrics.body;
  EXPECT_NE(metrics.body.find("nobody (uid 65534)"), std::string::npos) << metrics.body;

  // Its owner sees it and its events; root sees everything.
  ASSERT_EQ(Cli("ls --json", &out, &err, kDaemonUid), 0) << err;
  EXPECT_EQ(json::parse(out)["slices"].size(), 1u) << out;
  EXPECT_NE(GetAs(kDaemonUid, "/v1/events").body.find(kSlice), std::string::npos);
  EXPECT_EQ(Get("/v1/slices")["slices"].size(), 1u);
  EXPECT_EQ(Get(std::string("/v1/slices/") + kSlice)["user"], "daemon");
  auto root_metrics = Api().Get("/metrics");
  ASSERT_TRUE(root_metrics);
  EXPECT_EQ(root_metrics->status, 200);
  EXPECT_NE(root_metrics->body.find(kSlice), std::string::npos);
}

TEST_F(SliceReadsProcess, ByDefaultEveryoneReadsEverySliceAsBefore) {
  Start();
  CreateDaemonsSlice();
  std::string out, err;
  ASSERT_EQ(Cli("ls", &out, &err, kNobodyUid), 0) << err;
  EXPECT_NE(out.find(kSlice), std::string::npos) << out;
  Answer slice = GetAs(kNobodyUid, std::string("/v1/slices/") + kSlice);
  EXPECT_EQ(slice.status, 200) << slice.body;
  EXPECT_EQ(json::parse(slice.body, nullptr, false)["user"], "daemon");
  EXPECT_NE(GetAs(kNobodyUid, "/v1/events").body.find(kSlice), std::string::npos);
  Answer metrics = GetAs(kNobodyUid, "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find(kSlice), std::string::npos);
  // Changing another's slice is refused as before, saying whose it is.
  EXPECT_EQ(Cli(std::string("delete ") + kSlice, &out, &err, kNobodyUid), 1);
  EXPECT_NE(err.find("belongs to daemon (uid 1)"), std::string::npos) << err;
}

}  // namespace
}  // namespace gslice
