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
#include "gslice/trace_format.h"

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

int64_t PeakRssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtoll(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

// The slice's processes write their parts themselves: a hostile one writes a part of a GiB
// (sparse: a header, one event, then zeros without a newline). gsliced streams it, reads no
// more than its bound of the parts, holds none of it whole, says so in its log and still
// answers with a trace that has the part's event.
TEST_F(TraceRequest, AHugePartIsStreamedWithinTheReadBoundNotHeld) {
  Start();
  std::string out, err;
  ASSERT_EQ(Cli("create huge --gpus 0 --memory 1GiB", &out, &err), 0) << err;
  const int64_t peak_before = PeakRssKiB(pid_);
  ASSERT_GT(peak_before, 0);
  const std::string file = dir_ + "/huge.json";
  std::string trace_out, trace_err;
  int rc = -1;
  std::thread cli([&] { rc = Cli("trace huge --seconds 1 -o " + file, &trace_out, &trace_err); });
  // The request's folder, from the slice's request word in the ledger.
  Ledger ledger;
  ASSERT_EQ(ledger.Open(ledger_.c_str(), 2000, /*create=*/false), LedgerError::kOk) << ledger.detail();
  const int slice = ledger.FindSlice("huge");
  ASSERT_GE(slice, 0);
  uint32_t request = 0;
  for (int i = 0; i < 400 && request == 0; ++i) {
    request = ledger.TraceRequestWord(slice)->load();
    if (request == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_NE(request, 0u);
  const std::string part = TraceRequestFolder(ledger_, slice, request) + "/666666.part";
  {
    const int fd = open(part.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << part << ": " << strerror(errno);
    const std::string head =
        TracePartHead({.pid = 666666, .started_mono_ns = 1, .started_unix_ns = 2, .dropped = 0,
                       .slice_json = "\"huge\"", .note_json = "\"hostile\""}) +
        "E 10 5 \"ph\":\"X\",\"cat\":\"api\",\"name\":\"before the zeros\",\"pid\":666666,\"tid\":1\n";
    ASSERT_EQ(write(fd, head.data(), head.size()), static_cast<ssize_t>(head.size()));
    ASSERT_EQ(ftruncate(fd, int64_t{1} << 30), 0);
    close(fd);
  }
  cli.join();
  ASSERT_EQ(rc, 0) << trace_err;
  const json t = json::parse(ReadAll(file), nullptr, false);
  ASSERT_TRUE(t.is_object()) << ReadAll(file).substr(0, 2000);
  bool seen = false;
  for (const json& e : t["traceEvents"]) seen = seen || e.value("name", "") == "before the zeros";
  EXPECT_TRUE(seen) << "the part's event before the zeros";
  EXPECT_NE(ReadAll(dir_ + "/gsliced.log").find("trace of slice huge: its processes' parts went past gsliced's "
                                                 "bounds: read only the first 256 MiB of the parts"),
            std::string::npos)
      << ReadAll(dir_ + "/gsliced.log");
  // Holding what it read would take 256 MiB at least; streaming takes a buffer of a line.
  const int64_t grew = PeakRssKiB(pid_) - peak_before;
  EXPECT_LT(grew, 64 * 1024) << "gsliced's peak memory grew by " << grew << " KiB";
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
