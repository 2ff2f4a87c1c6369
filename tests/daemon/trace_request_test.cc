// gslice trace on the simulated driver (docs/trace.md), with the real gsliced (--sim), the real
// CLI and a shimmed program running in a slice: gsliced asks the slice's processes to record
// through the node ledger, merges their parts, keeps the trace in its state folder and
// answers with it; only the slice's owner or an admin may record it.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "daemon_test_support.h"
#include "sim_gsliced_fixture.h"
#include "gslice/ledger.h"

namespace gslice {
namespace {

using nlohmann::json;
using testing::kGiB;
using testing::ReadAll;
using testing::AwaitGsliced;
using testing::Program;
using testing::SpawnGsliced;

class TraceRequest : public testing::SimGsliced {
 protected:
  TraceRequest() : SimGsliced("trace") {}
};

// A program in the slice that runs a "step" (NVTX ranges around kernels) for each line it reads.
std::unique_ptr<Program> Worker(const std::string& name) {
  auto p = std::make_unique<Program>(
      std::vector<std::string>{GSLICE_CLI, "run", "--sim", "--name", name, "--", GSLICE_TEST_TRACE_WORKER, "wait"});
  if (p->ReadLine() != "ready") return nullptr;
  return p;
}

TEST_F(TraceRequest, RecordsARunningSliceAndKeepsItsLatestTrace) {
  Start();
  std::string out, err;
  ASSERT_EQ(Cli("create tr --gpus 0 --memory 1GiB", &out, &err), 0) << err;
  auto program = Worker("tr");
  ASSERT_NE(program, nullptr);
  ASSERT_EQ(program->Ask("step"), "stepped");  // before the recording: not in it
  // The recording runs for 2 s while the program steps; gslice trace waits for it.
  const std::string file = dir_ + "/tr.json";
  std::string trace_out, trace_err;
  int rc = -1;
  std::thread cli([&] { rc = Cli("trace tr --seconds 2 -o " + file, &trace_out, &trace_err); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(program->Ask("step"), "stepped");
  cli.join();
  ASSERT_EQ(rc, 0) << trace_err;
  EXPECT_NE(trace_err.find("from 1 process(es) written to " + file), std::string::npos) << trace_err;
  const json t = json::parse(ReadAll(file), nullptr, false);
  ASSERT_TRUE(t.is_object()) << ReadAll(file);
  EXPECT_EQ(t["otherData"]["gslice"]["slice"], "tr");
  int steps = 0, kernels = 0;
  for (const json& e : t["traceEvents"]) {
    if (e.value("cat", "") == "nvtx" && e.value("name", "") == "step") ++steps;
    if (e.value("cat", "") == "kernel" && e.value("name", "") == "busy") ++kernels;
  }
  EXPECT_EQ(steps, 1) << "only the step made while recording";
  EXPECT_EQ(kernels, 2);
  // gsliced keeps it, whole and private to the owner's group, and cleans up after itself.
  const std::string kept = dir_ + "/state/traces/tr.json";
  struct stat st{};
  ASSERT_EQ(stat(kept.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_EQ(ReadAll(kept), ReadAll(file));
  int leftovers = 0;
  for (const auto& e : std::filesystem::directory_iterator(ledger_)) {
    leftovers += e.path().filename().string().rfind("trace-", 0) == 0 ? 1 : 0;
  }
  EXPECT_EQ(leftovers, 0);
  // After the recording the program records nothing more: a second step changes nothing.
  EXPECT_EQ(program->Ask("step"), "stepped");
  EXPECT_EQ(program->Stop(), 0);
}

// A call made while the slice is suspended waits for the resume: the timeline shows the wait.
TEST_F(TraceRequest, ACallWaitingWhileSuspendedShowsInTheTimeline) {
  Start();
  std::string out, err;
  ASSERT_EQ(Cli("create sus --gpus 0 --memory 1GiB", &out, &err), 0) << err;
  const std::string file = dir_ + "/sus.json";
  auto program = std::make_unique<Program>(std::vector<std::string>{
      GSLICE_CLI, "run", "--sim", "--name", "sus", "--trace", file, "--", GSLICE_TEST_TRACE_WORKER, "wait"});
  ASSERT_EQ(program->ReadLine(), "ready");
  ASSERT_EQ(program->Ask("step"), "stepped");
  for (int i = 0; i < 100 && Get("/v1/slices/sus")["processes"].empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(Cli("suspend sus", &out, &err), 0) << err;
  std::string stepped;
  std::thread step([&] { stepped = program->Ask("step"); });  // its first launch waits
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  ASSERT_EQ(Cli("resume sus", &out, &err), 0) << err;
  step.join();
  EXPECT_EQ(stepped, "stepped");
  EXPECT_EQ(program->Stop(), 0);
  const json t = json::parse(ReadAll(file), nullptr, false);
  ASSERT_TRUE(t.is_object()) << ReadAll(file);
  double waited = 0;
  std::string call;
  for (const json& e : t["traceEvents"]) {
    if (e.value("cat", "") != "suspend") continue;
    EXPECT_EQ(e["name"], "suspended");
    waited += e["dur"].get<double>();
    call = e["args"]["call"];
  }
  EXPECT_GE(waited, 400000) << "the call waited about 600 ms for the resume";
  EXPECT_EQ(call.rfind("cu", 0), 0u) << call;
}

TEST_F(TraceRequest, OnlyTheOwnerOrAnAdminMayRecordAndBadRequestsSayWhy) {
  Start();
  std::string out, err;
  ASSERT_EQ(Cli("create mine --gpus 0 --memory 1GiB", &out, &err), 0) << err;
  // nobody may not record root's slice; nothing is asked of its processes.
  EXPECT_EQ(Cli("trace mine --seconds 1 -o " + dir_ + "/x.json", &out, &err, "65534"), 1);
  EXPECT_NE(err.find("for its owner or an admin"), std::string::npos) << err;
  EXPECT_NE(access((dir_ + "/state/traces/mine.json").c_str(), F_OK), 0);
  EXPECT_EQ(Cli("trace nosuch --seconds 1", &out, &err), 1);
  EXPECT_NE(err.find("no slice named 'nosuch'"), std::string::npos) << err;
  EXPECT_EQ(Cli("trace mine --seconds 0", &out, &err), 2);
  EXPECT_NE(err.find("--seconds 0: a whole number of seconds from 1 to 300"), std::string::npos) << err;
  // The API refuses what the CLI would not send.
  auto r = Api().Post("/v1/slices/mine/trace", R"({"seconds":"ten"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  r = Api().Post("/v1/slices/mine/trace", R"({"seconds":301})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
}

}  // namespace
}  // namespace gslice
