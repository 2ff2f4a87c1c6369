// gslice run: errors a person can act on, and a program run in a slice on the simulated
// driver seeing the slice.
#include <gtest/gtest.h>

#include <string>

#include "shim_env.h"

namespace gslice::test {
namespace {

// gslice itself runs with the test's environment plus the simulated node settings; the
// shim variables are what gslice run must set, so they are removed here.
struct CliEnv : ShimEnv {
  explicit CliEnv(const std::string& name) : ShimEnv(name) {
    vars.erase("LD_PRELOAD");
    vars.erase("GSLICE_REAL_DRIVER");
    vars.erase("GSLICE_REAL_NVML");
    vars.erase("GSLICE_MEMORY");
    vars.erase("GSLICE_SLICE");
    if (std::string(GSLICE_TEST_ASAN_RUNTIME).size() > 0) vars["LD_PRELOAD"] = GSLICE_TEST_ASAN_RUNTIME;
    vars["GSLICE_SIM_DEVICES"] = "2";
  }
};

ChildResult Gslice(const ShimEnv& env, std::vector<std::string> args, double timeout_s = 30) {
  args.insert(args.begin(), GsliceBinary());
  return env.Run(args, timeout_s);
}

TEST(GsliceRun, RunsAProgramInASliceOnTheSimulator) {
  CliEnv env("cli-run");
  ChildResult r = Gslice(env, {"run", "--sim", "--memory", "96MiB", "--", ClientPath(), "info"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("total=" + std::to_string(96ull << 20)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("devtotal=" + std::to_string(96ull << 20)), std::string::npos) << r.out;
}

TEST(GsliceRun, PerGpuLimitsFollowTheGpuList) {
  CliEnv env("cli-gpus");
  // GPU 1 only, with its own limit: the program sees one device of 80 MiB.
  ChildResult r = Gslice(env, {"run", "--sim", "--gpus", "1", "--memory", "80MiB", "--", ClientPath(), "info"});
  ASSERT_EQ(r.exit_code, 0) << "signal " << r.signal << "\n" << r.out << r.err;
  EXPECT_NE(r.out.find("total=" + std::to_string(80ull << 20)), std::string::npos) << r.out;
  r = Gslice(env, {"run", "--sim", "--gpus", "0,1", "--memory", "70MiB,80MiB", "--", ClientPath(), "info"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("total=" + std::to_string(70ull << 20)), std::string::npos) << r.out;  // device 0
}

TEST(GsliceRun, RejectsBadSizes) {
  CliEnv env("cli-size");
  ChildResult r = Gslice(env, {"run", "--sim", "--memory", "20XB", "--", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--memory 20XB: unknown unit"), std::string::npos) << r.err;
  r = Gslice(env, {"run", "--sim", "--memory", "1MiB", "--", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("at least 64 MiB"), std::string::npos) << r.err;
  r = Gslice(env, {"run", "--sim", "--", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--memory is required"), std::string::npos) << r.err;
}

TEST(GsliceRun, RejectsUnknownGpusAndLimitsAboveTheGpu) {
  CliEnv env("cli-gpu");
  ChildResult r = Gslice(env, {"run", "--sim", "--gpus", "7", "--memory", "1GiB", "--", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--gpus 7: no such GPU; this machine shows 2"), std::string::npos) << r.err;
  r = Gslice(env, {"run", "--sim", "--memory", "2GiB", "--", "true"});  // the simulated GPUs have 1 GiB
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("has only 1 GiB"), std::string::npos) << r.err;
  r = Gslice(env, {"run", "--sim", "--gpus", "0,1", "--memory", "1GiB,1GiB,1GiB", "--", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("3 sizes for 2 GPUs"), std::string::npos) << r.err;
}

// --protect: a fraction of solo speed from 0.5 to 1, for guaranteed slices only.
TEST(GsliceRun, RefusesProtectionLevelsItCannotKeep) {
  CliEnv env("cli-protect");
  struct Case {
    std::vector<std::string> flags;
    const char* expect;
  } cases[] = {
      {{"--protect", "0.3"}, "--protect 0.3: must be from 0.5 to 1 (50% to 100%)"},
      {{"--protect", "90"}, "--protect 90: a fraction of solo speed is at most 1: write 0.9 or 90%"},
      {{"--protect", "110%"}, "--protect 110%: must be from 0.5 to 1"},
      {{"--protect", "fast"}, "--protect fast: not a protection level"},
      {{"--protect"}, "--protect needs a value"},
      {{"--class", "opportunistic", "--protect", "0.9"}, "--protect: only guaranteed slices have a protection level"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"run", "--sim", "--memory", "96MiB"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    if (c.flags.size() > 1) {
      for (const char* a : {"--", "true"}) args.push_back(a);
    }
    ChildResult r = Gslice(env, args);
    EXPECT_EQ(r.exit_code, 2) << c.expect << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
  }
  ChildResult help = Gslice(env, {"run", "--help"});
  EXPECT_NE(help.out.find("--protect F"), std::string::npos) << help.out;
}

TEST(GsliceRun, ReportsMissingCommandsAndOptions) {
  CliEnv env("cli-misc");
  ChildResult r = Gslice(env, {"run", "--sim", "--memory", "1GiB"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no command to run"), std::string::npos) << r.err;
  r = Gslice(env, {"run", "--frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown option '--frobnicate'"), std::string::npos) << r.err;
  r = Gslice(env, {"run", "--sim", "--memory", "1GiB", "--", "/nonexistent/program"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.err.find("cannot run '/nonexistent/program'"), std::string::npos) << r.err;
  r = Gslice(env, {"run", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("usage: gslice run"), std::string::npos);
  r = Gslice(env, {"nosuchcommand"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown command 'nosuchcommand'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gslice::test

namespace gslice::test {
namespace {

// The README's quick start: the example program in a slice on the simulator, linked
// against the driver stub (the loader's PLT path rather than dlopen).
TEST(GsliceRun, ExampleProgramPassesInASlice) {
  CliEnv env("cli-example");
  // The simulated kernels write every byte on the CPU: a small slice keeps this quick under
  // the sanitizers.
  ChildResult r = Gslice(env, {"run", "--sim", "--memory", "512MiB", "--", GSLICE_TEST_EXAMPLE}, 100);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("GPU 0: gslice simulated GPU, 0.50 GiB total"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("allocated 2 chunks of 256 MiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("all checks passed"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace gslice::test

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "gslice/ledger.h"

namespace gslice::test {
namespace {

// A node set up for gsliced whose gsliced does not answer: gslice run refuses, and the
// program never runs (admission is never skipped silently). --no-daemon runs it.
class GsliceRunWithoutAnswer : public ::testing::Test {
 protected:
  void TearDown() override {
    if (fd_ >= 0) close(fd_);
    unlink(socket_.c_str());
    unlink(marker_.c_str());
  }
  // A unix socket at socket_: listening (and never accepting) or, closed, a stale file.
  void MakeSocket(bool listening) {
    fd_ = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", socket_.c_str());
    ASSERT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    if (listening) {
      ASSERT_EQ(listen(fd_, 16), 0);
    } else {
      close(fd_);
      fd_ = -1;
    }
  }
  bool Ran() const {
    struct stat st;
    return stat(marker_.c_str(), &st) == 0;
  }
  ChildResult RunTouch(CliEnv& env, std::vector<std::string> flags = {}) {
    std::vector<std::string> args = {"run", "--sim", "--memory", "96MiB"};
    args.insert(args.end(), flags.begin(), flags.end());
    for (const char* a : {"--", "/bin/sh", "-c"}) args.push_back(a);
    args.push_back("touch " + marker_);
    return Gslice(env, args);
  }
  std::string base_ = "/tmp/gslice-test-" + std::to_string(getpid()) + "-" +
                      ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::string socket_ = base_ + ".sock";
  std::string marker_ = base_ + ".ran";
  int fd_ = -1;
};

TEST_F(GsliceRunWithoutAnswer, AStoppedDaemonStopsTheRun) {
  CliEnv env("cli-stopped");
  MakeSocket(false);  // what a crashed gsliced leaves: the socket file, nobody listening
  env.vars["GSLICE_SOCKET"] = socket_;
  ChildResult r = RunTouch(env);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_FALSE(Ran()) << "the program ran without admission";
  EXPECT_NE(r.err.find("gsliced is set up on this node (GSLICE_SOCKET is set) but does not answer"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("stopped or crashed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gslice run --no-daemon"), std::string::npos) << r.err;
  // No socket at all where GSLICE_SOCKET points: the same.
  unlink(socket_.c_str());
  r = RunTouch(env);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_FALSE(Ran());
  EXPECT_NE(r.err.find("gsliced is not running"), std::string::npos) << r.err;
}

TEST_F(GsliceRunWithoutAnswer, ADaemonThatNeverAnswersStopsTheRun) {
  CliEnv env("cli-busy");
  MakeSocket(true);  // accepts connections into its backlog, never answers
  env.vars["GSLICE_SOCKET"] = socket_;
  ChildResult r = RunTouch(env);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_FALSE(Ran()) << "the program ran without admission";
  EXPECT_NE(r.err.find("does not answer in time"), std::string::npos) << r.err;
}

// Without gsliced, gslice run writes the slice itself: its protection level goes into the
// ledger's slice entry, where the shims read it (the node ledger for root, else the user's own).
TEST_F(GsliceRunWithoutAnswer, NoDaemonWritesTheProtectionLevelIntoTheLedger) {
  CliEnv env("cli-protect-ledger");
  MakeSocket(false);
  env.vars["GSLICE_SOCKET"] = socket_;
  const std::string name = "protect-" + std::to_string(getpid());
  ChildResult r = RunTouch(env, {"--no-daemon", "--name", name, "--protect", "90%"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(Ran());
  char own[256];
  PerUserLedgerPath(env.vars["GSLICE_LEDGER"].c_str(), own, sizeof own);
  const std::string path = geteuid() == 0 ? env.vars["GSLICE_LEDGER"] : std::string(own);
  {
    Ledger ledger;
    ASSERT_EQ(ledger.Open(path.c_str(), 2000, /*create=*/false), LedgerError::kOk) << ledger.detail();
    const int slice = ledger.FindSlice(name.c_str());
    ASSERT_GE(slice, 0) << "no slice " << name << " in " << path;
    EXPECT_EQ(ledger.limits()->slices[slice].protect_permille, 900u);
    EXPECT_EQ(ledger.limits()->slices[slice].slice_class, static_cast<uint32_t>(SliceClass::kGuaranteed));
  }
  // Run again under the same name with another level: the writer sets it on the slice.
  unlink(marker_.c_str());
  r = RunTouch(env, {"--no-daemon", "--name", name, "--protect", "0.8", "-v"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("protect 0.8"), std::string::npos) << r.err;
  Ledger ledger;
  ASSERT_EQ(ledger.Open(path.c_str(), 2000, /*create=*/false), LedgerError::kOk) << ledger.detail();
  const int slice = ledger.FindSlice(name.c_str());
  ASSERT_GE(slice, 0);
  EXPECT_EQ(ledger.limits()->slices[slice].protect_permille, 800u);
}

TEST_F(GsliceRunWithoutAnswer, NoDaemonRunsWithoutIt) {
  CliEnv env("cli-nodaemon");
  MakeSocket(false);
  env.vars["GSLICE_SOCKET"] = socket_;
  ChildResult r = RunTouch(env, {"--no-daemon"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(Ran());
  // Where nothing says gsliced belongs here, gslice run needs no flag.
  struct stat st;
  if (stat("/run/gsliced/gsliced.sock", &st) == 0 || stat("/etc/gslice/gsliced.toml", &st) == 0) {
    GTEST_SKIP() << "this machine is set up for gsliced";
  }
  unlink(marker_.c_str());
  env.vars.erase("GSLICE_SOCKET");
  r = RunTouch(env);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(Ran());
}

}  // namespace
}  // namespace gslice::test
