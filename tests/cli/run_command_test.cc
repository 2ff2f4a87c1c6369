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
