// Timelines on the simulated driver (docs/trace.md): gslice run --trace records a program's
// driver calls, its NVTX ranges (through NVTX's injection, the program unchanged), its
// kernels' GPU times (the sim's CUPTI), gate waits under a compute cap and counters, in a
// bounded ring; without --trace nothing records.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "shim_env.h"

namespace gslice::test {
namespace {

using nlohmann::json;

constexpr int64_t kStreamTidBase = 1000000000;

struct CliEnv : ShimEnv {
  explicit CliEnv(const std::string& name) : ShimEnv(name) {
    vars.erase("LD_PRELOAD");
    vars.erase("GSLICE_REAL_DRIVER");
    vars.erase("GSLICE_REAL_NVML");
    vars.erase("GSLICE_MEMORY");
    vars.erase("GSLICE_SLICE");
    if (std::string(GSLICE_TEST_ASAN_RUNTIME).size() > 0) vars["LD_PRELOAD"] = GSLICE_TEST_ASAN_RUNTIME;
  }
};

// A trace file in /tmp, removed at the end.
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

ChildResult RunTraced(const ShimEnv& env, const std::string& file, std::vector<std::string> program,
                      std::vector<std::string> flags = {}) {
  std::vector<std::string> args = {GsliceBinary(), "run", "--sim", "--memory", "96MiB", "--trace", file};
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back("--");
  args.push_back(GSLICE_TEST_TRACE_WORKER);
  args.insert(args.end(), program.begin(), program.end());
  return env.Run(args, 60);
}

std::vector<json> Events(const json& trace, const std::string& cat, const std::string& name = "") {
  std::vector<json> out;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("cat", std::string()) == cat && (name.empty() || e.value("name", std::string()) == name)) {
      out.push_back(e);
    }
  }
  std::sort(out.begin(), out.end(), [](const json& a, const json& b) { return a["ts"].get<double>() < b["ts"].get<double>(); });
  return out;
}

double End(const json& e) { return e["ts"].get<double>() + e.value("dur", 0.0); }

// a lies within b on the timeline (1 us of rounding allowed).
bool Within(const json& a, const json& b) {
  return a["ts"].get<double>() >= b["ts"].get<double>() - 1 && End(a) <= End(b) + 1;
}

TEST(Trace, NvtxRangesNestAroundTheirKernelsAndCallsWithTheSimulatedKernelTimes) {
  CliEnv env("trace-step");
  TraceFile file;
  ChildResult r = RunTraced(env, file.path, {"step"}, {"--name", "trace-step-" + std::to_string(getpid())});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("trace written to " + file.path), std::string::npos) << r.err;
  const json t = file.Read();
  ASSERT_TRUE(t.is_object()) << "not JSON";
  EXPECT_EQ(t["displayTimeUnit"], "ns");
  const json& other = t["otherData"]["gslice"];
  EXPECT_EQ(other["version"], 1);
  EXPECT_EQ(other["slice"], "trace-step-" + std::to_string(getpid()));
  EXPECT_EQ(other["dropped_events"], 0);
  EXPECT_GT(other["started_unix_ns"].get<int64_t>(), 0);
  ASSERT_EQ(other["processes"].size(), 1u);
  EXPECT_EQ(other["processes"][0]["gpu_activity"].get<std::string>().rfind("cupti ", 0), 0u) << other.dump();

  // NVTX: step holds forward and copy, on one thread; the mark lies between them.
  auto step = Events(t, "nvtx", "step"), forward = Events(t, "nvtx", "forward"), copy = Events(t, "nvtx", "copy");
  auto mark = Events(t, "nvtx", "checkpoint");
  ASSERT_EQ(step.size(), 1u);
  ASSERT_EQ(forward.size(), 1u);
  ASSERT_EQ(copy.size(), 1u);
  ASSERT_EQ(mark.size(), 1u);
  EXPECT_EQ(step[0]["ph"], "X");
  EXPECT_EQ(mark[0]["ph"], "i");
  EXPECT_EQ(mark[0]["s"], "t");
  EXPECT_TRUE(Within(forward[0], step[0]));
  EXPECT_TRUE(Within(copy[0], step[0]));
  EXPECT_LE(End(forward[0]), mark[0]["ts"].get<double>() + 1);
  EXPECT_LE(mark[0]["ts"].get<double>(), copy[0]["ts"].get<double>() + 1);
  const int pid = step[0]["pid"];
  const int64_t tid = step[0]["tid"];
  EXPECT_EQ(forward[0]["tid"], tid);
  EXPECT_EQ(copy[0]["tid"], tid);

  // Driver calls: two launches of busy and the synchronisation inside forward, the copy's
  // bytes inside copy, all on the program's thread.
  auto launches = Events(t, "api", "cuLaunchKernel");
  ASSERT_EQ(launches.size(), 2u);
  for (const json& l : launches) {
    EXPECT_EQ(l["args"]["kernel"], "busy");
    EXPECT_EQ(l["tid"], tid);
    EXPECT_TRUE(Within(l, forward[0])) << l.dump() << forward[0].dump();
  }
  auto syncs = Events(t, "api", "cuStreamSynchronize");
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_TRUE(Within(syncs[0], forward[0]));
  auto copies = Events(t, "api", "cuMemcpyHtoD_v2");
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0]["args"]["bytes"], 1 << 20);
  EXPECT_TRUE(Within(copies[0], copy[0]));
  auto allocs = Events(t, "api", "cuMemAlloc_v2");
  ASSERT_EQ(allocs.size(), 1u);
  EXPECT_EQ(allocs[0]["args"]["bytes"], 1 << 20);

  // GPU: the kernels ran for their simulated 20 ms and 10 ms, in launch order, each after its
  // launch and before the synchronisation returned, on a named stream track of the process.
  auto kernels = Events(t, "kernel", "busy");
  ASSERT_EQ(kernels.size(), 2u);
  // (The sim sleeps for a kernel's time: on a loaded machine a sleep runs late, never early.)
  EXPECT_GE(kernels[0]["dur"].get<double>(), 20000);
  EXPECT_LT(kernels[0]["dur"].get<double>(), 20000 + 50000);
  EXPECT_GE(kernels[1]["dur"].get<double>(), 10000);
  EXPECT_LT(kernels[1]["dur"].get<double>(), 10000 + 50000);
  for (const json& l : launches) EXPECT_EQ(l["args"]["stream"], kernels[0]["args"]["stream"]) << l.dump();
  EXPECT_GE(kernels[0]["ts"].get<double>(), launches[0]["ts"].get<double>());
  EXPECT_GE(kernels[1]["ts"].get<double>(), End(kernels[0]) - 1);
  EXPECT_LE(End(kernels[1]), End(syncs[0]) + 1);
  const int64_t stream_tid = kernels[0]["tid"];
  EXPECT_GE(stream_tid, kStreamTidBase);
  EXPECT_EQ(kernels[0]["pid"], pid);
  bool stream_named = false, process_named = false;
  for (const json& e : t["traceEvents"]) {
    if (e["ph"] != "M") continue;
    if (e["name"] == "thread_name" && e["tid"] == stream_tid) {
      stream_named = e["args"]["name"] == "stream " + std::to_string(stream_tid - kStreamTidBase);
    }
    if (e["name"] == "process_name" && e["pid"] == pid) {
      process_named = e["args"]["name"].get<std::string>().find("(slice trace-step-") != std::string::npos;
    }
  }
  EXPECT_TRUE(stream_named);
  EXPECT_TRUE(process_named);

  // The slice's memory as a counter track.
  auto memory = Events(t, "counter", "slice memory");
  ASSERT_FALSE(memory.empty());
  EXPECT_EQ(memory[0]["ph"], "C");
  EXPECT_TRUE(memory[0]["args"].contains("bytes"));
}

TEST(Trace, LaunchesWaitingAtTheComputeGateShowTheWait) {
  CliEnv env("trace-gate");
  TraceFile file;
  ChildResult r = RunTraced(env, file.path, {"capped", "12", "20"}, {"--cap", "25%"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json t = file.Read();
  ASSERT_TRUE(t.is_object());
  auto waits = Events(t, "gate", "compute gate wait");
  ASSERT_FALSE(waits.empty()) << "no gate waits under a 25% cap";
  double waited = 0;
  for (const json& w : waits) {
    EXPECT_EQ(w["ph"], "X");
    waited += w["dur"].get<double>();
  }
  // 12 x 20 ms at 25% of the GPU: most of the run is spent waiting at the gate.
  EXPECT_GT(waited, 100000) << waits.size() << " waits";
  auto util = Events(t, "counter", "GPU utilisation");
  ASSERT_FALSE(util.empty());
  for (const json& u : util) EXPECT_LE(u["args"]["percent"].get<double>(), 100.0);
}

TEST(Trace, TheRingBoundsWhatAProcessKeeps) {
  CliEnv env("trace-ring");
  env.vars["GSLICE_TRACE_EVENTS"] = "1024";
  TraceFile file;
  ChildResult r = RunTraced(env, file.path, {"many", "3000"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json t = file.Read();
  ASSERT_TRUE(t.is_object());
  size_t events = 0;
  for (const json& e : t["traceEvents"]) events += e["ph"] != "M" ? 1 : 0;
  EXPECT_LE(events, 1024u);
  // 3000 launches and 3000 kernels went through a ring of 1024: the rest is counted.
  EXPECT_GE(t["otherData"]["gslice"]["dropped_events"].get<int64_t>(), 6000 - 1024);
  EXPECT_NE(r.err.find("dropped"), std::string::npos) << r.err;
}

// A forked child (a data-loading worker) inherits the parent's ring: it must not write the
// parent's events again as its own.
TEST(Trace, AForkedChildDoesNotRepeatItsParentsEvents) {
  CliEnv env("trace-fork");
  TraceFile file;
  ChildResult r = RunTraced(env, file.path, {"fork"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json t = file.Read();
  ASSERT_TRUE(t.is_object());
  EXPECT_EQ(Events(t, "nvtx", "step").size(), 1u);
  EXPECT_EQ(Events(t, "kernel", "busy").size(), 2u);
  EXPECT_EQ(t["otherData"]["gslice"]["processes"].size(), 1u) << t["otherData"].dump();
}

// Ranges a program opens before its first CUDA call (a PyTorch script's `main` range, a range
// around `import torch`) are in the timeline with their true start: "outer" holds "prologue",
// which ended before CUDA started, the mark made then, and "inner" with its kernel; the file's
// zero is at or before them.
TEST(Trace, RangesOpenedBeforeTheFirstCudaCallKeepTheirStart) {
  CliEnv env("trace-early");
  TraceFile file;
  ChildResult r = RunTraced(env, file.path, {"early"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json t = file.Read();
  ASSERT_TRUE(t.is_object());
  auto outer = Events(t, "nvtx", "outer"), prologue = Events(t, "nvtx", "prologue"), inner = Events(t, "nvtx", "inner");
  auto mark = Events(t, "nvtx", "before-cuda");
  ASSERT_EQ(outer.size(), 1u) << t.dump();
  ASSERT_EQ(prologue.size(), 1u) << t.dump();
  ASSERT_EQ(inner.size(), 1u) << t.dump();
  ASSERT_EQ(mark.size(), 1u) << t.dump();
  EXPECT_GE(outer[0]["ts"].get<double>(), 0.0);
  EXPECT_TRUE(Within(prologue[0], outer[0]));
  EXPECT_TRUE(Within(inner[0], outer[0]));
  EXPECT_GE(prologue[0]["dur"].get<double>(), 20000.0);  // the 20 ms asleep, in us
  EXPECT_LE(End(prologue[0]), mark[0]["ts"].get<double>() + 1);
  EXPECT_LE(mark[0]["ts"].get<double>(), inner[0]["ts"].get<double>() + 1);
  EXPECT_EQ(outer[0]["tid"], inner[0]["tid"]);
  // Everything CUDA did comes after the prologue, and the kernel's launch lies in inner.
  auto launches = Events(t, "api", "cuLaunchKernel");
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_TRUE(Within(launches[0], inner[0]));
  for (const json& e : Events(t, "api")) EXPECT_GE(e["ts"].get<double>(), End(prologue[0]) - 1) << e.dump();
}

TEST(Trace, OffByDefaultNothingRecordsAndNoFileAppears) {
  CliEnv env("trace-off");
  env.vars["GSLICE_LOG"] = "info";
  env.vars["TMPDIR"] = "/tmp/gslice-test-" + std::to_string(getpid()) + "-off";
  ASSERT_EQ(system(("mkdir -p " + env.vars["TMPDIR"]).c_str()), 0);
  ChildResult r = env.Run({GsliceBinary(), "run", "--sim", "--memory", "96MiB", "--", GSLICE_TEST_TRACE_WORKER, "step"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  // The recorder never started (its first line says so), and no parts folder was made.
  EXPECT_EQ(r.err.find("trace: recording"), std::string::npos) << r.err;
  EXPECT_EQ(system(("rmdir " + env.vars["TMPDIR"] + " 2>/dev/null").c_str()), 0) << "something was left in TMPDIR";
}

TEST(Trace, BadTraceFileIsRefusedBeforeTheProgramRuns) {
  CliEnv env("trace-bad");
  ChildResult r = RunTraced(env, "/nonexistent-dir/x.json", {"step"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--trace /nonexistent-dir/x.json: cannot write in /nonexistent-dir"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("step ok"), std::string::npos);
}

}  // namespace
}  // namespace gslice::test
