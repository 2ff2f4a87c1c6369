// Timelines of remote programs on the simulated driver (docs/trace.md, "Remote programs"):
// `gslice run --remote ADDR --trace FILE` writes one file with the client's forwarded calls and
// NVTX ranges and its worker's timeline on the client's clock, each call linked to the worker's
// execution of it.
// Three servers: one as deployed, one whose workers record on a clock shifted by an hour and
// one whose workers' clock is behind and runs fast (GSLICE_TRACE_CLOCK_SHIFT), which the
// client's alignment must remove; and gsliced's `gslice trace` on a remote worker's slice. Every test uses its own
// simulated node, ledger, sockets and folders (pid-based names) and removes them.
#include <cuda.h>
#include <signal.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "calls.h"
#include "remote_test_support.h"
#include "socket_io.h"
#include "test_support.h"
#include "wire.h"

namespace gslice::remote {
namespace {

using gslice::test::Child;
using nlohmann::json;

const std::string kBin = GSLICE_TEST_BIN;
constexpr int64_t kShiftNs = 3600LL * 1000 * 1000 * 1000;  // the shifted server's workers: + 1 h
// The drifting server's workers: 5 s behind, and their clock running 500 ppm fast (0.5 ms a
// second: far more than the alignment's uncertainty over a run of a second).
constexpr const char* kDrift = "-5000000000,500";

std::string Prefix() { return "/dev/shm/gslice-test-" + std::to_string(getpid()) + "-rtrace"; }
std::string Socket(const std::string& which) {
  return "/tmp/gslice-test-" + std::to_string(getpid()) + "-rtrace-" + which + ".sock";
}
// The servers' TMPDIR: where their sessions make the workers' timeline folders.
std::string ServerTmp() { return "/tmp/gslice-test-" + std::to_string(getpid()) + "-rtrace-tmp"; }

struct TraceFile {
  std::string path = "/tmp/gslice-test-" + std::to_string(getpid()) + "-" +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".json";
  ~TraceFile() { unlink(path.c_str()); }
  json Read() const {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return json::parse(s.str(), nullptr, false);
  }
};

class RemoteTrace : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared::SetUpSimWorld(Prefix(), {"GSLICE_TRACE", "GSLICE_TRACE_CLOCK_SHIFT"});
    if (const std::string asan = GSLICE_TEST_ASAN_RUNTIME; !asan.empty()) setenv("LD_PRELOAD", asan.c_str(), 1);
    std::filesystem::create_directories(ServerTmp());
    for (const char* which : {"plain", "shifted", "drifting"}) unlink(Socket(which).c_str());
    plain_ = new Child({kBin + "/gslice-remoted", "--listen", "unix:" + Socket("plain"), "--sim", "--allow-root-tenant"},
                       {"TMPDIR=" + ServerTmp()});
    ASSERT_NE(plain_->ReadUntil("gslice-remoted: listening on", 20000), "");
    shifted_ = new Child({kBin + "/gslice-remoted", "--listen", "unix:" + Socket("shifted"), "--sim", "--allow-root-tenant"},
                         {"TMPDIR=" + ServerTmp(), "GSLICE_TRACE_CLOCK_SHIFT=" + std::to_string(kShiftNs)});
    ASSERT_NE(shifted_->ReadUntil("gslice-remoted: listening on", 20000), "");
    drifting_ = new Child({kBin + "/gslice-remoted", "--listen", "unix:" + Socket("drifting"), "--sim", "--allow-root-tenant"},
                          {"TMPDIR=" + ServerTmp(), std::string("GSLICE_TRACE_CLOCK_SHIFT=") + kDrift});
    ASSERT_NE(drifting_->ReadUntil("gslice-remoted: listening on", 20000), "");
  }

  static void TearDownTestSuite() {
    shared::StopServer(&plain_, Socket("plain"));
    shared::StopServer(&shifted_, Socket("shifted"));
    shared::StopServer(&drifting_, Socket("drifting"));
    std::error_code ec;
    std::filesystem::remove_all(ServerTmp(), ec);
    shared::RemoveSimWorld(Prefix());
  }

  // Runs trace_worker PROGRAM through the client, recording into file.
  static int RunTraced(const std::string& server, const std::string& file, const std::vector<std::string>& program,
                       std::string* out) {
    std::vector<std::string> argv = {kBin + "/gslice", "run", "--remote", "unix:" + Socket(server),
                                     "--memory", "512MiB", "--trace", file, "--", GSLICE_TEST_TRACE_WORKER};
    argv.insert(argv.end(), program.begin(), program.end());
    Child c(argv, {"GSLICE_LOG=info"});
    return c.Wait(out, 60000);
  }

  // Whether the servers' sessions removed every worker's timeline folder (within 5 s of the
  // client's exit: the worker ends when the client's connection closes).
  static bool ServerFoldersGone() {
    for (int i = 0; i < 100; ++i) {
      std::error_code ec;
      if (std::filesystem::is_empty(ServerTmp(), ec)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  static Child* plain_;
  static Child* shifted_;
  static Child* drifting_;
};

Child* RemoteTrace::plain_ = nullptr;
Child* RemoteTrace::shifted_ = nullptr;
Child* RemoteTrace::drifting_ = nullptr;

// What a merged remote trace holds, by the roles of its events.
struct Merged {
  int64_t client = -1, worker = -1;  // pids
  double uncertainty_us = -1;
  int64_t offset_ns = 0;
  std::map<int64_t, json> calls;     // client spans by seq
  std::map<int64_t, json> served;    // the worker's executions by seq
  std::vector<json> flow_starts, flow_ends, network, kernels, worker_api;
};

Merged Parse(const json& trace) {
  Merged m;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "M" || e.value("name", "") != "process_name") continue;
    const std::string name = e["args"].value("name", "");
    if (name.find("(remote client") != std::string::npos) m.client = e["pid"].get<int64_t>();
    if (name.find("(slice remote-") != std::string::npos) m.worker = e["pid"].get<int64_t>();
  }
  const json& gslice = trace["otherData"]["gslice"];
  m.uncertainty_us = gslice.value("clock_uncertainty_ns", -1000.0) / 1000.0;
  for (const json& p : gslice["processes"]) {
    if (p.contains("clock")) m.offset_ns = p["clock"]["offset_ns"].get<int64_t>();
  }
  for (const json& e : trace["traceEvents"]) {
    const std::string cat = e.value("cat", ""), ph = e.value("ph", "");
    const int64_t pid = e.value("pid", int64_t{-1});
    if (cat == "remote" && ph == "X" && pid == m.client && e["args"].contains("seq")) {
      m.calls[e["args"]["seq"].get<int64_t>()] = e;
    } else if (cat == "remote" && ph == "X" && pid == m.worker) {
      m.served[e["args"]["seq"].get<int64_t>()] = e;
    } else if (cat == "remote" && ph == "s") {
      m.flow_starts.push_back(e);
    } else if (cat == "remote" && ph == "f") {
      m.flow_ends.push_back(e);
    } else if (cat == "network") {
      m.network.push_back(e);
    } else if (cat == "kernel" && pid == m.worker) {
      m.kernels.push_back(e);
    } else if (cat == "api" && pid == m.worker) {
      m.worker_api.push_back(e);
    }
  }
  return m;
}

double End(const json& e) { return e["ts"].get<double>() + e.value("dur", 0.0); }

// inner lies within outer, up to slack microseconds at each end.
bool Within(const json& inner, const json& outer, double slack) {
  return inner["ts"].get<double>() >= outer["ts"].get<double>() - slack && End(inner) <= End(outer) + slack;
}

// The checks both servers' traces pass: both processes, every round trip's execution inside its
// call (within the stated uncertainty, plus 1 us of rounding), flows that pair up, the time
// outside the worker shown, and the worker's driver calls and kernels on the same clock.
void ExpectAlignedAndLinked(const json& trace) {
  ASSERT_TRUE(trace.is_object());
  const Merged m = Parse(trace);
  ASSERT_GT(m.client, 0) << trace.dump();
  ASSERT_GT(m.worker, 0) << trace.dump();
  ASSERT_GE(m.uncertainty_us, 0) << "no clock_uncertainty_ns in otherData";
  const double slack = m.uncertainty_us + 1;
  int round_trips = 0;
  for (const auto& [seq, call] : m.calls) {
    auto served = m.served.find(seq);
    ASSERT_NE(served, m.served.end()) << "the worker did not record seq " << seq << ": " << call.dump();
    if (call["args"]["mode"] == "round trip") {
      ++round_trips;
      EXPECT_TRUE(Within(served->second, call, slack))
          << "the worker's execution " << served->second.dump() << " lies outside its call " << call.dump()
          << " (uncertainty " << m.uncertainty_us << " us)";
      EXPECT_TRUE(call["args"].contains("network_queue_us")) << call.dump();
      EXPECT_GE(call["args"]["network_queue_us"].get<double>(), 0) << call.dump();
    } else {
      EXPECT_EQ(call["args"]["mode"], "sent without waiting") << call.dump();
      // Not waited for: it ran after the client sent it.
      EXPECT_GE(served->second["ts"].get<double>(), call["ts"].get<double>() - slack) << call.dump();
    }
    EXPECT_EQ(served->second["name"], "serve " + call["name"].get<std::string>());
  }
  EXPECT_GE(round_trips, 5);
  // Every flow starts on the client and ends on the worker, one end per start, by id.
  EXPECT_EQ(m.flow_starts.size(), m.calls.size());
  EXPECT_EQ(m.flow_ends.size(), m.flow_starts.size());
  std::map<std::string, int> ends;
  for (const json& f : m.flow_ends) {
    EXPECT_EQ(f["pid"].get<int64_t>(), m.worker);
    ++ends[f["id"].dump()];
  }
  for (const json& s : m.flow_starts) {
    EXPECT_EQ(s["pid"].get<int64_t>(), m.client);
    EXPECT_EQ(ends[s["id"].dump()], 1) << "flow " << s.dump() << " has no single end";
  }
  // Two network slices per round trip, on the calling thread.
  EXPECT_EQ(static_cast<int>(m.network.size()), 2 * round_trips);
  // The worker's shim recorded its driver calls, each inside the execution that made it, and
  // the kernels ran after the client made their launches.
  ASSERT_GE(m.kernels.size(), 2u) << "no kernels from the worker's CUPTI";
  ASSERT_FALSE(m.worker_api.empty());
  for (const json& api : m.worker_api) {
    bool inside = false;
    for (const auto& [seq, s] : m.served) inside = inside || (s["tid"] == api["tid"] && Within(api, s, 1));
    EXPECT_TRUE(inside) << "the worker's " << api.dump() << " is inside none of its served requests";
  }
  double first_launch = 1e300;
  for (const auto& [seq, call] : m.calls) {
    if (call["name"] == "cuLaunchKernel") first_launch = std::min(first_launch, call["ts"].get<double>());
  }
  for (const json& k : m.kernels) EXPECT_GE(k["ts"].get<double>(), first_launch - slack) << k.dump();
}

TEST_F(RemoteTrace, ATracedRemoteRunHasBothSidesOnOneTimelineLinkedCallByCall) {
  TraceFile file;
  std::string out;
  ASSERT_EQ(RunTraced("plain", file.path, {"step"}, &out), 0) << out;
  EXPECT_NE(out.find("step ok"), std::string::npos) << out;
  EXPECT_NE(out.find("trace written to " + file.path), std::string::npos) << out;
  const json trace = file.Read();
  ExpectAlignedAndLinked(trace);
  // One host, one CLOCK_MONOTONIC: the measured offset is within its uncertainty of 0.
  const Merged m = Parse(trace);
  EXPECT_LE(std::llabs(m.offset_ns), static_cast<int64_t>(m.uncertainty_us * 1000) + 1) << m.offset_ns;
  // The serving threads are named by lane.
  bool named = false;
  for (const json& e : trace["traceEvents"]) {
    named = named || (e.value("name", "") == "thread_name" && e["pid"] == m.worker &&
                      e["args"].value("name", "").rfind("serving lane ", 0) == 0);
  }
  EXPECT_TRUE(named);
  // The program's NVTX ranges are the client's, around the calls they made (and through the
  // flows, around the worker's execution of them).
  std::map<std::string, json> ranges;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("cat", "") == "nvtx" && e.value("ph", "") == "X") {
      EXPECT_EQ(e["pid"].get<int64_t>(), m.client) << e.dump();
      ranges[e["name"].get<std::string>()] = e;
    }
  }
  ASSERT_TRUE(ranges.count("forward") && ranges.count("copy") && ranges.count("step")) << trace.dump();
  EXPECT_TRUE(Within(ranges["forward"], ranges["step"], 1));
  for (const auto& [seq, call] : m.calls) {
    const std::string name = call["name"];
    if (name == "cuLaunchKernel" || name == "cuStreamSynchronize") {
      EXPECT_TRUE(Within(call, ranges["forward"], 1)) << call.dump();
    }
    if (name == "cuMemcpyHtoD_v2") {
      EXPECT_TRUE(Within(call, ranges["copy"], 1)) << call.dump();
    }
  }
  EXPECT_TRUE(ServerFoldersGone()) << "a worker's timeline folder was left in " << ServerTmp();
}

TEST_F(RemoteTrace, TheAlignmentRemovesAnOffsetBetweenTheClientsAndTheWorkersClocks) {
  TraceFile file;
  std::string out;
  ASSERT_EQ(RunTraced("shifted", file.path, {"step"}, &out), 0) << out;
  const json trace = file.Read();
  ExpectAlignedAndLinked(trace);
  // The worker's clock runs an hour ahead: the offset found takes it back, within the
  // uncertainty the trace states.
  const Merged m = Parse(trace);
  EXPECT_LE(std::llabs(m.offset_ns + kShiftNs), static_cast<int64_t>(m.uncertainty_us * 1000) + 1)
      << "offset " << m.offset_ns << " ns for a shift of " << kShiftNs << " ns";
  EXPECT_TRUE(ServerFoldersGone());
}

// A raw connection to the plain server, for requests no client sends this way.
class Raw {
 public:
  Raw() {
    std::string error;
    Address a;
    ParseAddress("unix:" + Socket("plain"), &a, &error);
    fd_ = Connect(a, &error);
    timeval t = {.tv_sec = 20, .tv_usec = 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
  }
  ~Raw() {
    if (fd_ >= 0) close(fd_);
  }
  bool Hello(bool trace) {
    Writer w;
    EncodeHello(gslice::remote::Hello{.calls_hash = kCallsHash, .memory = "256MiB", .compute = "", .share = "",
                                      .slice_class = "", .idle_timeout = "", .host = "", .trace = trace},
                &w);
    if (!WriteFrame(fd_, FrameHeader{.seq = 0, .op = kOpHello}, w.buffer().data(), w.size())) return false;
    FrameHeader h;
    std::vector<uint8_t> p;
    if (ReadFrame(fd_, kMaxFrame, &h, &p) != FrameRead::kOk) return false;
    Reader r(p.data(), p.size());
    HelloReply reply;
    std::string error;
    return DecodeHelloReply(&r, &reply, &error) && reply.status == 0;
  }
  static Writer Prefix() {
    Writer w;
    EncodeRequestPrefix(RequestPrefix{}, &w);
    return w;
  }
  // Sends a request; returns its answer's result (-1: the connection closed), the answer in *reply.
  int Call(uint32_t op, const Writer& payload, std::vector<uint8_t>* reply = nullptr) {
    std::vector<uint8_t> ignored;
    std::vector<uint8_t>& p = reply != nullptr ? *reply : ignored;
    FrameHeader h;
    if (!WriteFrame(fd_, FrameHeader{.seq = ++seq_, .op = op}, payload.buffer().data(), payload.size()) ||
        ReadFrame(fd_, kMaxFrame, &h, &p) != FrameRead::kOk || h.seq != seq_ || h.op != (op | kReplyBit)) {
      return -1;
    }
    int32_t r = -2;
    Reader reader(p.data(), p.size());
    reader.Get(&r);
    return r;
  }

 private:
  int fd_ = -1;
  uint32_t seq_ = 0;
};

TEST_F(RemoteTrace, TheAlignmentFollowsAWorkerClockThatRunsFast) {
  // Measured at attach and at exit, the line through both takes out the offset and the drift:
  // every execution still lies inside its call within the uncertainty.
  TraceFile file;
  std::string out;
  ASSERT_EQ(RunTraced("drifting", file.path, {"step"}, &out), 0) << out;
  const json trace = file.Read();
  ExpectAlignedAndLinked(trace);
  double drift = 0;
  for (const json& p : trace["otherData"]["gslice"]["processes"]) {
    if (p.contains("clock")) drift = p["clock"]["drift_ppb"].get<double>();
  }
  // A worker clock running fast: the offset shrinks (negative drift). Each measurement is
  // within its uncertainty, so over the run (about a second) the 500 ppm show clearly unless
  // the machine is so loaded that the uncertainty comes near them.
  if (Parse(trace).uncertainty_us < 50) {
    EXPECT_LT(drift, 0);
  }
  EXPECT_TRUE(ServerFoldersGone());
}

TEST_F(RemoteTrace, TheTimelinesRequestsAreRefusedWhenGarbledOrNotAskedFor) {
  {
    // A worker whose client did not ask for a trace records nothing and says so.
    Raw raw;
    ASSERT_TRUE(raw.Hello(false));
    EXPECT_EQ(raw.Call(kOpTraceClock, Raw::Prefix()), CUDA_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(raw.Call(kOpTraceFetch, Raw::Prefix()), CUDA_ERROR_NOT_SUPPORTED);
  }
  Raw raw;
  ASSERT_TRUE(raw.Hello(true));
  // Garbled: a short prefix, trailing bytes, a lane out of range. Refused, the connection kept.
  for (uint32_t op : {kOpTraceClock, kOpTraceFetch}) {
    Writer shorter;
    shorter.Put<uint32_t>(0);
    EXPECT_EQ(raw.Call(op, shorter), CUDA_ERROR_INVALID_VALUE) << op;
    Writer longer = Raw::Prefix();
    longer.Put<uint8_t>(7);
    EXPECT_EQ(raw.Call(op, longer), CUDA_ERROR_INVALID_VALUE) << op;
    Writer lane;
    EncodeRequestPrefix(RequestPrefix{.context = 0, .lane = kMaxLanes + 3}, &lane);
    EXPECT_EQ(raw.Call(op, lane), CUDA_ERROR_INVALID_VALUE) << op;
  }
  Writer init = Raw::Prefix();
  init.Put<uint32_t>(0);
  ASSERT_EQ(raw.Call(kOp_cuInit, init), CUDA_SUCCESS);
  std::vector<uint8_t> reply;
  ASSERT_EQ(raw.Call(kOpTraceClock, Raw::Prefix(), &reply), CUDA_SUCCESS);
  EXPECT_EQ(reply.size(), sizeof(int32_t) + sizeof(int64_t));
  ASSERT_EQ(raw.Call(kOpTraceFetch, Raw::Prefix(), &reply), CUDA_SUCCESS);
  Reader r(reply.data() + sizeof(int32_t), reply.size() - sizeof(int32_t));
  uint64_t dropped = 0;
  std::vector<ServeRecord> served;
  std::string part;
  ASSERT_TRUE(DecodeTraceFetchReply(&r, &dropped, &served, &part));
  // The call was served and recorded (the timeline's own requests are not); the part has a
  // header.
  ASSERT_EQ(served.size(), 1u);
  EXPECT_EQ(served[0].op, kOp_cuInit);
  EXPECT_LE(served[0].start, served[0].end);
  EXPECT_EQ(part.rfind("gslice-trace-part 1\nP ", 0), 0u) << part;
}

TEST_F(RemoteTrace, WithGslicedTheWorkersSideIsRecordedByGsliceTraceAndFetchedWhenSuspended) {
  // gsliced and a server whose workers it admits; a client stepping on request.
  const std::string dir = ServerTmp() + "-gsliced";
  std::filesystem::create_directories(dir + "/state");
  const std::string api = dir + "/api.sock", socket = Socket("gsliced");
  std::ofstream(dir + "/gsliced.toml") << "socket = \"" << api << "\"\n"
                                       << "database = \"" << dir << "/state/gsliced.db\"\n"
                                       << "ledger = \"" << Prefix() << "-ledger\"\n"
                                       << "sample_interval_ms = 200\n";
  auto ls = [&] {
    Child c({kBin + "/gslice", "ls", "--socket", api, "--json"});
    std::string out;
    return c.Wait(&out, 10000) == 0 ? json::parse(out, nullptr, false) : json();
  };
  Child daemon({kBin + "/gsliced", "--sim", "--config", dir + "/gsliced.toml"});
  bool up = false;
  for (int i = 0; i < 200 && !up; ++i) {
    up = ls().is_object();
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(up);
  unlink(socket.c_str());
  Child server({kBin + "/gslice-remoted", "--listen", "unix:" + socket, "--sim", "--allow-root-tenant"}, {"GSLICE_SOCKET=" + api});
  ASSERT_NE(server.ReadUntil("gslice-remoted: listening on", 20000), "");
  {
    Child client({kBin + "/gslice", "run", "--remote", "unix:" + socket, "--memory", "256MiB", "--",
                  GSLICE_TEST_TRACE_WORKER, "wait"});
    client.WriteLine("go");
    ASSERT_EQ(client.ReadUntil("stepped", 30000), "stepped");
    std::string slice;
    const json node = ls();
    for (const json& s : node["slices"]) {
      if (s["remote"].is_object()) slice = s["name"];
    }
    ASSERT_FALSE(slice.empty()) << node.dump();
    const std::string file = dir + "/worker.json";
    Child trace({kBin + "/gslice", "trace", slice, "--seconds", "2", "--socket", api, "-o", file});
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    client.WriteLine("go");
    ASSERT_EQ(client.ReadUntil("stepped", 30000), "stepped");
    std::string said;
    ASSERT_EQ(trace.Wait(&said, 30000), 0) << said;
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    const json t = json::parse(text.str(), nullptr, false);
    ASSERT_TRUE(t.is_object()) << text.str();
    EXPECT_EQ(t["otherData"]["gslice"]["slice"], slice);
    int api_calls = 0, kernels = 0;
    for (const json& e : t["traceEvents"]) {
      api_calls += e.value("cat", "") == "api" ? 1 : 0;
      kernels += e.value("cat", "") == "kernel" ? 1 : 0;
      EXPECT_NE(e.value("cat", ""), "remote") << "the client's calls are only in gslice run --remote --trace";
    }
    EXPECT_GT(api_calls, 0) << text.str();
    EXPECT_GE(kernels, 2) << text.str();
    client.Kill(SIGTERM);
    client.Wait(nullptr, 10000);
  }
  {
    // A traced client whose worker gsliced suspended while idle (3 s): at its exit the fetch
    // resumes the worker and the file has both sides.
    const std::string file = dir + "/idle.json";
    Child client({kBin + "/gslice", "run", "--remote", "unix:" + socket, "--memory", "256MiB", "--idle-timeout", "3s",
                  "--trace", file, "--", "/bin/sh", "-c",
                  std::string("(echo go; sleep 8) | exec ") + GSLICE_TEST_TRACE_WORKER + " wait"});
    ASSERT_EQ(client.ReadUntil("stepped", 30000), "stepped");
    bool suspended = false;
    for (int i = 0; i < 70 && !suspended; ++i) {
      const json node = ls();
      for (const json& s : node["slices"]) {
        suspended = suspended || (s["remote"].is_object() && s["remote"]["state"] == "suspended");
      }
      if (!suspended) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(suspended) << ls().dump();
    std::string said;
    ASSERT_EQ(client.Wait(&said, 60000), 0) << said;
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    const json t = json::parse(text.str(), nullptr, false);
    ASSERT_TRUE(t.is_object()) << said;
    const Merged m = Parse(t);
    EXPECT_GT(m.worker, 0) << said;
    EXPECT_GE(m.kernels.size(), 2u) << said;
    EXPECT_FALSE(m.served.empty()) << said;
  }
  server.Kill(SIGTERM);
  server.Wait(nullptr, 10000);
  daemon.Kill(SIGTERM);
  daemon.Wait(nullptr, 10000);
  unlink(socket.c_str());
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_F(RemoteTrace, AFileThatCannotBeWrittenIsRefusedBeforeTheProgramRuns) {
  std::string out;
  const int code = RunTraced("plain", "/nonexistent-" + std::to_string(getpid()) + "/t.json", {"step"}, &out);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("cannot write in"), std::string::npos) << out;
  EXPECT_EQ(out.find("step ok"), std::string::npos) << out;
}

TEST_F(RemoteTrace, WithoutTraceNeitherSideRecords) {
  std::vector<std::string> argv = {kBin + "/gslice", "run", "--remote", "unix:" + Socket("plain"),
                                   "--memory", "512MiB", "--", GSLICE_TEST_TRACE_WORKER, "step"};
  Child c(argv, {"GSLICE_LOG=info"});
  std::string out;
  ASSERT_EQ(c.Wait(&out, 60000), 0) << out;
  EXPECT_EQ(out.find("trace:"), std::string::npos) << out;
  EXPECT_TRUE(ServerFoldersGone());
}

}  // namespace
}  // namespace gslice::remote
