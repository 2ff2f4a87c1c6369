// The shims on the simulated driver: every allocation path counted and refused over the
// limit, virtualised queries, cuGetProcAddress, limits shared by processes, SIGKILL chaos,
// 64 processes starting at once, and bad environments.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "gslice/ledger.h"
#include "shim_env.h"

namespace gslice::test {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

std::string Describe(const ChildResult& r) {
  return "exit " + std::to_string(r.exit_code) + " signal " + std::to_string(r.signal) +
         (r.timed_out ? " (timed out)" : "") + "\nstdout: " + r.out + "\nstderr: " + r.err;
}

uint64_t Field(const std::string& out, const std::string& key) {
  size_t p = out.find(key + "=");
  if (p == std::string::npos) return ~0ull;
  return std::stoull(out.substr(p + key.size() + 1));
}

class AllocationPath : public ::testing::TestWithParam<const char*> {};

TEST_P(AllocationPath, CountedRefusedOverLimitAndReusableAfterFree) {
  ShimEnv env(std::string("path-") + GetParam());
  ChildResult r = env.Run({ClientPath(), "paths", GetParam()});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find(std::string(GetParam()) + " ok"), std::string::npos) << Describe(r);
}

INSTANTIATE_TEST_SUITE_P(Shim, AllocationPath,
                         ::testing::Values("linear", "pitch", "managed", "async", "pool", "vmm", "array", "array3d",
                                           "mipmapped", "graph"));

TEST(Shim, VirtualisedQueriesReportTheSlice) {
  ShimEnv env("queries");
  ChildResult r = env.Run({ClientPath(), "info"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(Field(r.out, "total"), 64 * kMiB) << r.out;
  EXPECT_EQ(Field(r.out, "devtotal"), 64 * kMiB) << r.out;
  EXPECT_EQ(Field(r.out, "free"), 64 * kMiB) << r.out;

  // Another process of the slice holds 16 MiB: both CUDA and NVML see it.
  int in = -1, out = -1;
  int pid = env.Start({ClientPath(), "hold", std::to_string(16 * kMiB)}, &in, &out);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(ReadLine(out), "ok");
  r = env.Run({ClientPath(), "info"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(Field(r.out, "total"), 64 * kMiB);
  EXPECT_EQ(Field(r.out, "free"), 48 * kMiB);
  r = env.Run({ClientPath(), "nvml"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(Field(r.out, "total"), 64 * kMiB) << r.out;
  EXPECT_EQ(Field(r.out, "used"), 16 * kMiB) << r.out;
  EXPECT_EQ(Field(r.out, "free"), 48 * kMiB) << r.out;
  close(in);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  close(out);
  // Gone: its memory is back.
  r = env.Run({ClientPath(), "info"});
  EXPECT_EQ(Field(r.out, "free"), 64 * kMiB) << Describe(r);
}

TEST(Shim, NvmlWithoutCudaProcessesUsesTheEnvironment) {
  ShimEnv env("nvml-env");
  env.vars["GSLICE_MEMORY"] = "100MiB";
  ChildResult r = env.Run({ClientPath(), "nvml"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(Field(r.out, "total"), 100 * kMiB) << r.out;
  EXPECT_EQ(Field(r.out, "used"), 0u) << r.out;
}

TEST(Shim, GetProcAddressReturnsHooksForEveryVersionAndFlag) {
  ShimEnv env("procaddress");
  ChildResult r = env.Run({ClientPath(), "procaddress"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("procaddress ok"), std::string::npos) << Describe(r);
}

// Every function the shim exports, and every one cuGetProcAddress hands out, passes the resume
// gate - except exactly those interpose/ungated.def names - so a new export cannot skip it.
// The check reads the built shim's machine code (the gate's prologue, interpose/gen_exports.py).
// (InitializeInjectionNvtx2, NVTX's entry into the shim as its injection library, and
// gslice_trace_*, the recorder's entry points for gslice-remoted's worker, are no driver
// functions: trace_nvtx.cc, trace_recorder.cc.)
TEST(Shim, EveryExportPassesTheResumeGateButTheListedOnes) {
  ShimEnv env("gatecheck");
  const std::string names = "/tmp/gslice-test-" + std::to_string(getpid()) + "-exports";
  const std::string cmd = std::string(GSLICE_TEST_NM) + " -D --defined-only " + GSLICE_TEST_SHIM_DIR +
                          "/libcuda.so.1 | awk '$2 == \"T\" {print $3}' | sed 's/@.*//' | grep -vx -e InitializeInjectionNvtx2 -e 'gslice_trace_.*' > " + names;
  ASSERT_EQ(system(cmd.c_str()), 0) << cmd;
  ChildResult r = env.Run({ClientPath(), "gatecheck", names, GSLICE_TEST_UNGATED_DEF});
  unlink(names.c_str());
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("gatecheck ok"), std::string::npos) << Describe(r);
}

TEST(Shim, ForkedChildNeverReleasesTheParentsUsage) {
  ShimEnv env("forkexit");
  ChildResult r = env.Run({ClientPath(), "forkexit"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("forkexit ok"), std::string::npos) << Describe(r);
}

TEST(Shim, ProcessesOfASliceShareOneLimit) {
  ShimEnv env("shared");
  int in1, out1, in2, out2;
  int p1 = env.Start({ClientPath(), "hold", std::to_string(40 * kMiB)}, &in1, &out1);
  ASSERT_EQ(ReadLine(out1), "ok");
  int p2 = env.Start({ClientPath(), "hold", std::to_string(40 * kMiB)}, &in2, &out2);
  EXPECT_EQ(ReadLine(out2), "oom");  // 40 + 40 > 64 MiB
  close(in2);
  waitpid(p2, nullptr, 0);
  // Another slice on the same GPU has its own limit.
  env.vars["GSLICE_SLICE"] = "shared-other";
  int p3 = env.Start({ClientPath(), "hold", std::to_string(40 * kMiB)}, &in2, &out2);
  EXPECT_EQ(ReadLine(out2), "ok");
  close(in2);
  waitpid(p3, nullptr, 0);
  close(in1);
  waitpid(p1, nullptr, 0);
  close(out1);
  close(out2);
}

// 4 processes x 16 threads create contexts at once (plus each process's primary context) in a
// slice that holds 16 of them. Each context is charged before the driver creates it, so the
// slice never holds more than its limit: the contexts past it are refused with
// CUDA_ERROR_OUT_OF_MEMORY and the programs carry on.
TEST(Shim, ContextsPastTheLimitAreRefusedAcrossProcessesAndThreads) {
  ShimEnv env("contexts");
  env.vars["GSLICE_CONTEXT_OVERHEAD"] = "4MiB";  // the 64 MiB slice holds 16 contexts
  constexpr int kProcesses = 4, kThreads = 16;
  struct Kid {
    int pid, in, out;
  };
  std::vector<Kid> kids;
  for (int i = 0; i < kProcesses; ++i) {
    Kid k{};
    k.pid = env.Start({ClientPath(), "contexts", std::to_string(kThreads)}, &k.in, &k.out);
    ASSERT_GT(k.pid, 0);
    kids.push_back(k);
  }
  int created = 0, refused = 0;
  for (const Kid& k : kids) {
    const std::string line = ReadLine(k.out, 60);
    ASSERT_EQ(line.rfind("contexts ", 0), 0u) << "client " << k.pid << ": '" << line << "'";
    created += (line.find("primary=ok") != std::string::npos ? 1 : 0) + static_cast<int>(Field(line, "ok"));
    refused += (line.find("primary=oom") != std::string::npos ? 1 : 0) + static_cast<int>(Field(line, "oom"));
  }
  EXPECT_EQ(created + refused, kProcesses * (kThreads + 1));
  EXPECT_LE(created, 16);
  EXPECT_GT(refused, 0);
  // What the ledger holds for the slice while every process holds its contexts.
  Ledger ledger;
  ASSERT_EQ(ledger.Open(env.ledger_path().c_str()), LedgerError::kOk);
  const int slice = ledger.FindSlice("contexts");
  ASSERT_GE(slice, 0);
  ASSERT_EQ(ledger.MapUsage(slice), LedgerError::kOk);
  EXPECT_LE(ledger.SliceUsage(slice, 0), static_cast<int64_t>(64 * kMiB));
  EXPECT_EQ(ledger.SliceUsage(slice, 0), static_cast<int64_t>(created) * static_cast<int64_t>(4 * kMiB));
  for (const Kid& k : kids) {
    close(k.in);
    EXPECT_EQ(ReadLine(k.out, 60), "contexts done");
    int status = 0;
    waitpid(k.pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "client " << k.pid << " status " << status;
    close(k.out);
  }
  EXPECT_EQ(ledger.SliceUsage(slice, 0), 0);
}

// Clients allocating and freeing on several paths are SIGKILLed at random moments
// (mid-allocation included). Nothing hangs, and once they are gone no byte stays charged.
TEST(Shim, ChaosKillsLeaveNothingBehind) {
  ShimEnv env("chaos");
  std::mt19937 rng(static_cast<unsigned>(getpid()));
  constexpr int kRounds = 12;
  constexpr int kClients = 4;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::pair<int, std::pair<int, int>>> kids;
    for (int c = 0; c < kClients; ++c) {
      int in, out;
      int pid = env.Start({ClientPath(), "churn", std::to_string(rng())}, &in, &out);
      ASSERT_GT(pid, 0);
      kids.push_back({pid, {in, out}});
    }
    for (auto& k : kids) ASSERT_EQ(ReadLine(k.second.second), "ready") << "client hung before starting";
    for (auto& k : kids) {
      timespec ts{0, static_cast<long>(rng() % 20'000'000)};
      nanosleep(&ts, nullptr);
      kill(k.first, SIGKILL);
    }
    for (auto& k : kids) {
      int status = 0;
      ASSERT_EQ(waitpid(k.first, &status, 0), k.first);
      // Killed by us, not crashed and not exited early with an error.
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
      close(k.second.first);
      close(k.second.second);
    }
  }
  Ledger ledger;
  ASSERT_EQ(ledger.Open(env.ledger_path().c_str()), LedgerError::kOk);
  int slice = ledger.FindSlice("chaos");
  ASSERT_GE(slice, 0);
  ASSERT_EQ(ledger.MapUsage(slice), LedgerError::kOk);
  int64_t used = 0;
  for (int i = 0; i < 100; ++i) {  // within 1 s
    ledger.MaybeReap(slice);
    used = 0;
    for (int g = 0; g < kLedgerMaxGpus; ++g) used += ledger.SliceUsage(slice, g);
    if (used == 0) break;
    usleep(10'000);
  }
  EXPECT_EQ(used, 0);
  EXPECT_EQ(ledger.AliveCount(slice), 0);
  // And the whole limit is usable again.
  ChildResult r = env.Run({ClientPath(), "paths", "linear"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
}

TEST(Shim, SixtyFourProcessesInitialiseAtOnce) {
  ShimEnv env("init64");
  env.vars["GSLICE_MEMORY"] = "1GiB";
  constexpr int kProcs = 64;
  std::vector<std::pair<int, std::pair<int, int>>> kids;
  for (int i = 0; i < kProcs; ++i) {
    int in, out;
    int pid = env.Start({ClientPath(), "init"}, &in, &out);
    ASSERT_GT(pid, 0);
    kids.push_back({pid, {in, out}});
  }
  int ok = 0;
  for (auto& k : kids) {
    std::string line = ReadLine(k.second.second, 50);
    int status = 0;
    waitpid(k.first, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && !line.empty()) ++ok;
    close(k.second.first);
    close(k.second.second);
  }
  EXPECT_EQ(ok, kProcs);
  Ledger ledger;
  ASSERT_EQ(ledger.Open(env.ledger_path().c_str()), LedgerError::kOk);
  int slice = ledger.FindSlice("init64");
  ASSERT_GE(slice, 0);
  ASSERT_EQ(ledger.MapUsage(slice), LedgerError::kOk);
  EXPECT_EQ(ledger.AliveCount(slice), 0);  // every process detached on exit
}

// A slice the shim makes from its environment alone (no gsliced, no gslice run) takes
// GSLICE_PROTECT as its protection level; a malformed one, or one given to opportunistic work,
// is logged and leaves the default (0 in the ledger), and the program runs as ever.
TEST(Shim, EnvironmentSetsTheProtectionLevelOfASliceItMakes) {
  struct Case {
    const char* name;
    const char* protect;
    const char* cls;
    uint32_t stored;
    const char* logged;
  } cases[] = {
      {"protect-env", "0.9", "guaranteed", 900, nullptr},
      {"protect-pct", "75%", "guaranteed", 750, nullptr},
      {"protect-bad", "fast", "guaranteed", 0, "GSLICE_PROTECT=fast: not a protection level"},
      {"protect-low", "0.2", "guaranteed", 0, "GSLICE_PROTECT=0.2: must be from 0.5 to 1"},
      {"protect-opp", "0.9", "opportunistic", 0, "only guaranteed work has a protection level"},
  };
  for (const Case& c : cases) {
    ShimEnv env(c.name);
    env.vars["GSLICE_PROTECT"] = c.protect;
    env.vars["GSLICE_CLASS"] = c.cls;
    ChildResult r = env.Run({ClientPath(), "info"});
    EXPECT_EQ(r.exit_code, 0) << c.name << ": " << Describe(r);
    if (c.logged != nullptr) {
      EXPECT_NE(r.err.find(c.logged), std::string::npos) << c.name << ": " << r.err;
    }
    char own[256];
    PerUserLedgerPath(env.ledger_path().c_str(), own, sizeof own);
    const std::string path = geteuid() == 0 ? env.ledger_path() : std::string(own);
    Ledger ledger;
    ASSERT_EQ(ledger.Open(path.c_str(), 2000, /*create=*/false), LedgerError::kOk) << c.name << ": " << ledger.detail();
    const int slice = ledger.FindSlice(c.name);
    ASSERT_GE(slice, 0) << c.name;
    EXPECT_EQ(ledger.limits()->slices[slice].protect_permille, c.stored) << c.name;
  }
}

TEST(Shim, BadEnvironmentNeverCrashes) {
  {
    ShimEnv env("bad-memory");
    env.vars["GSLICE_MEMORY"] = "lots";
    ChildResult r = env.Run({ClientPath(), "info"});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(Field(r.out, "total"), 1024 * kMiB) << r.out;  // no limit: the GPU's own
    EXPECT_NE(r.err.find("GSLICE_MEMORY=lots"), std::string::npos) << r.err;
  }
  {
    ShimEnv env("bad-ledger");
    env.vars["GSLICE_LEDGER"] = "/nonexistent-dir/ledger";
    ChildResult r = env.Run({ClientPath(), "paths", "linear"});  // limits still hold in-process
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
  }
  {
    ShimEnv env("bad-misc");
    env.vars["GSLICE_LOG"] = "loud";
    env.vars["GSLICE_CONTEXT_OVERHEAD"] = "much";  // the default then: 600 MiB, which must fit
    env.vars["GSLICE_MEMORY"] = "1GiB";
    env.vars["GSLICE_SLICE"] = std::string(200, 'x');
    ChildResult r = env.Run({ClientPath(), "info"});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
  }
  {
    ShimEnv env("bad-driver");
    env.vars["GSLICE_REAL_DRIVER"] = "/nonexistent/libcuda.so.1";
    env.vars["LD_LIBRARY_PATH"] = "/nonexistent";
    ChildResult r = env.Run({ClientPath(), "info"});
    // No driver anywhere: the program gets an error code from cuInit, not a crash.
    EXPECT_EQ(r.signal, 0) << Describe(r);
    EXPECT_FALSE(r.timed_out);
    EXPECT_NE(r.exit_code, 0) << Describe(r);
    EXPECT_NE(r.err.find("GSLICE_REAL_DRIVER"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace gslice::test
