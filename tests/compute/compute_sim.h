// The fixture of the launch gate's tests on the simulated driver (compute_sim_test.cc, time-sliced
// GPUs, and mps_sim_test.cc, GPUs shared through MPS): worker processes started at one moment,
// their kernel counts over the window, slices in a fresh ledger. Every assertion compares
// kernel counts of jobs measured side by side (never absolute times), with tolerances for a
// loaded 2-core machine.
#ifndef GSLICE_TESTS_COMPUTE_COMPUTE_SIM_H_
#define GSLICE_TESTS_COMPUTE_COMPUTE_SIM_H_

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "gslice/clock.h"
#include "gslice/ledger.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace gslice::compute_sim {

inline constexpr int kKernelUs = 1000;

// UnixNs in milliseconds: the start time the test hands its workers and they wait for.
inline double NowMs() { return static_cast<double>(gslice::UnixNs()) / 1e6; }

struct Result {
  long kernels = -1;
  std::vector<int> buckets;  // kernels completed per 50 ms
  std::string raw;
  // Kernels completed in [from_ms, to_ms) of the window, and per ms.
  double Rate(double from_ms, double to_ms) const {
    return static_cast<double>(Between(from_ms, to_ms)) / (to_ms - from_ms);
  }
  long Between(double from_ms, double to_ms) const {
    long n = 0;
    for (size_t i = 0; i < buckets.size(); ++i) {
      const double t = 50.0 * static_cast<double>(i);
      if (t >= from_ms && t + 50.0 <= to_ms) n += buckets[i];
    }
    return n;
  }
  // Rate(from_ms, to_ms) over ref's over the same window (the machine's load, or a peer's
  // share); ref must have run at least min_ref_rate kernels per ms there.
  double RateAgainst(const Result& ref, double from_ms, double to_ms, double min_ref_rate) const {
    const double ref_rate = ref.Rate(from_ms, to_ms);
    EXPECT_GT(ref_rate, min_ref_rate) << ref.raw;
    return ref_rate > 0 ? Rate(from_ms, to_ms) / ref_rate : 0.0;
  }
};

struct Worker {
  pid_t pid = -1;
  int out_fd = -1;
};

// Simulated GPUs (two unless said): a capped job alone on one and a free job alone on the
// other, at the same time, so that both see the same load on the machine.
inline std::map<std::string, std::string> OnGpu(int gpu, std::map<std::string, std::string> env = {}, int gpus = 2) {
  env["GSLICE_SIM_DEVICES"] = std::to_string(gpus);
  env["CUDA_VISIBLE_DEVICES"] = std::to_string(gpu);
  return env;
}

class ComputeSim : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    const std::string tag = std::to_string(getpid()) + "-" + name;
    sim_state_ = "/dev/shm/gslice-test-" + tag;
    ledger_ = "/dev/shm/gslice-test-ledger-" + tag;
  }
  void TearDown() override {
    unlink(sim_state_.c_str());
    std::filesystem::remove_all(ledger_);
  }

  // Under the sanitize preset the ASan runtime must be loaded before the shim.
  static std::string AsanFirst() {
    const std::string asan = GSLICE_TEST_ASAN_RUNTIME;
    return asan.empty() ? "" : asan + " ";
  }

  // env plus what a plain program needs to run under the shim on the simulated driver.
  static std::map<std::string, std::string> UnderShim(std::map<std::string, std::string> env) {
    env["LD_LIBRARY_PATH"] = GSLICE_TEST_SIM_DIR;
    env["LD_PRELOAD"] = AsanFirst() + std::string(GSLICE_TEST_SHIM_DIR) + "/libcuda.so.1";
    env["GSLICE_REAL_DRIVER"] = std::string(GSLICE_TEST_SIM_DIR) + "/libcuda.so.1";
    return env;
  }

  // Starts a worker (direct: the gate linked in; otherwise plain, under the shim).
  Worker Start(std::map<std::string, std::string> env, std::vector<std::string> args, bool direct = true) {
    std::string bin = std::string(GSLICE_TEST_BIN_DIR) + (direct ? "/compute_worker_direct" : "/compute_worker");
    if (direct) {
      env["LD_LIBRARY_PATH"] = GSLICE_TEST_SIM_DIR;
    } else {
      env = UnderShim(std::move(env));
    }
    return StartProgram(bin, env, args);
  }

  // Starts bin with args, the test's sim and ledger paths and env on top of a clean
  // environment (no inherited GSLICE_* or LD_PRELOAD); stdout (and stderr) to a pipe.
  Worker StartProgram(const std::string& bin, std::map<std::string, std::string> env, std::vector<std::string> args,
                      bool stderr_too = false) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    env["GSLICE_SIM_STATE"] = sim_state_;
    env["GSLICE_LEDGER"] = ledger_;
    env.try_emplace("GSLICE_SIM_DEVICES", "1");
    // GSLICE_TEST_LOG=debug: the workers' shims trace their decisions (to the test's stderr).
    if (const char* log = getenv("GSLICE_TEST_LOG"); log != nullptr) env.try_emplace("GSLICE_LOG", log);
    std::vector<std::string> envs;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string kv = *e;
      if (kv.rfind("GSLICE_", 0) == 0 || kv.rfind("LD_PRELOAD=", 0) == 0) continue;
      envs.push_back(kv);
    }
    for (auto& [k, v] : env) envs.push_back(k + "=" + v);
    args.insert(args.begin(), bin);
    pid_t pid = fork();
    if (pid == 0) {
      dup2(fds[1], 1);
      if (stderr_too) dup2(fds[1], 2);
      close(fds[0]);
      close(fds[1]);
      std::vector<char*> argv, envp;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      for (auto& e : envs) envp.push_back(e.data());
      envp.push_back(nullptr);
      execve(bin.c_str(), argv.data(), envp.data());
      _exit(127);
    }
    close(fds[1]);
    return Worker{pid, fds[0]};
  }

  Result Wait(const Worker& w) {
    Result r;
    char buf[4096];
    ssize_t n;
    while ((n = read(w.out_fd, buf, sizeof buf)) > 0) r.raw.append(buf, static_cast<size_t>(n));
    close(w.out_fd);
    int status = 0;
    waitpid(w.pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return r;
    std::istringstream in(r.raw);
    std::string field;
    while (in >> field) {
      if (field.rfind("kernels=", 0) == 0) r.kernels = std::stol(field.substr(8));
      if (field.rfind("buckets=", 0) == 0) {
        std::stringstream b(field.substr(8));
        std::string item;
        while (std::getline(b, item, ',')) r.buckets.push_back(std::stoi(item));
      }
    }
    return r;
  }

  static std::vector<std::string> Job(double start_at, double seconds, std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {"--seconds", std::to_string(seconds), "--kernel-us", std::to_string(kKernelUs),
                                  "--start-at", std::to_string(start_at)};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  // Runs jobs together over one window; returns their results in order.
  std::vector<Result> RunTogether(const std::vector<std::map<std::string, std::string>>& envs, double seconds,
                                  const std::vector<std::vector<std::string>>& extra = {}, bool direct = true) {
    const double start_at = NowMs() + 800;  // time for every process to initialise
    std::vector<Worker> ws;
    for (size_t i = 0; i < envs.size(); ++i) {
      ws.push_back(Start(envs[i], Job(start_at, seconds, i < extra.size() ? extra[i] : std::vector<std::string>{}), direct));
    }
    std::vector<Result> rs;
    for (auto& w : ws) rs.push_back(Wait(w));
    for (auto& r : rs) EXPECT_GE(r.kernels, 0) << "worker failed: " << r.raw;
    return rs;
  }

  // A guaranteed and an opportunistic job on the first simulated GPU, and a free witness job
  // on the second over the same window (the machine's load); guaranteed_args go to the first.
  std::vector<Result> ClassPairAndWitness(double seconds, std::vector<std::string> guaranteed_args, bool direct = true) {
    return RunTogether({OnGpu(0, {{"GSLICE_CLASS", "guaranteed"}}), OnGpu(0, {{"GSLICE_CLASS", "opportunistic"}}), OnGpu(1)},
                       seconds, {std::move(guaranteed_args), {}, {}}, direct);
  }

  // Creates slice name in the test's ledger with a class and a protection level (0: the
  // default), as gsliced would: the test owns the ledger's directory, so it is its writer.
  void MakeSlice(const char* name, gslice::SliceClass cls, uint32_t protect_permille) {
    gslice::Ledger l;
    ASSERT_EQ(l.Open(ledger_.c_str()), gslice::LedgerError::kOk) << l.detail();
    int slice = -1;
    ASSERT_EQ(l.FindOrCreateSlice(name, cls, 0, &slice), gslice::LedgerError::kOk);
    const int fd = open((ledger_ + "/limits").c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    void* p = mmap(nullptr, sizeof(gslice::LedgerLimits), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    ASSERT_NE(p, MAP_FAILED);
    static_cast<gslice::LedgerLimits*>(p)->slices[slice].protect_permille = protect_permille;
    munmap(p, sizeof(gslice::LedgerLimits));
  }

  // A guaranteed and an opportunistic job under the shim on a fresh simulated node shared
  // through MPS (GSLICE_SIM_MPS=interference), both tracing, together for 3 s; guaranteed_args:
  // the guaranteed job's further flags. Their results, stderr included.
  std::vector<Result> TracedPairOnMps(const char* interference, std::vector<std::string> guaranteed_args = {},
                                      double seconds = 3.0, std::vector<std::string> opportunistic_args = {}) {
    unlink(sim_state_.c_str());
    auto mps = [interference](const char* cls) {
      return UnderShim(OnGpu(0, {{"GSLICE_SIM_MPS", interference}, {"GSLICE_LOG", "debug"}, {"GSLICE_CLASS", cls}}));
    };
    const double start_at = NowMs() + 800;
    const std::string worker = std::string(GSLICE_TEST_BIN_DIR) + "/compute_worker";
    Worker gw = StartProgram(worker, mps("guaranteed"), Job(start_at, seconds, std::move(guaranteed_args)), /*stderr_too=*/true);
    Worker ow = StartProgram(worker, mps("opportunistic"), Job(start_at, seconds, std::move(opportunistic_args)), /*stderr_too=*/true);
    return {Wait(gw), Wait(ow)};
  }

  // A guaranteed job (direct) of slice (empty: none) and an opportunistic one under the shim
  // tracing its controller's decisions, together for seconds: the opportunistic job's result.
  Result GuaranteedBesideTracedOpportunistic(const char* slice, double seconds) {
    const double start_at = NowMs() + 800;
    std::map<std::string, std::string> g_env = {{"GSLICE_CLASS", "guaranteed"}};
    if (slice[0] != '\0') g_env["GSLICE_SLICE"] = slice;
    Worker g = Start(g_env, Job(start_at, seconds));
    Worker o = StartProgram(std::string(GSLICE_TEST_BIN_DIR) + "/compute_worker",
                            UnderShim({{"GSLICE_CLASS", "opportunistic"}, {"GSLICE_LOG", "debug"}}), Job(start_at, seconds),
                            /*stderr_too=*/true);
    const Result rg = Wait(g);
    const Result ro = Wait(o);
    EXPECT_GT(rg.kernels, 0) << rg.raw;
    EXPECT_GE(ro.kernels, 0) << ro.raw;
    return ro;
  }

  // An opportunistic job alone on a simulated MPS GPU for 1.5 s (the worker's flags in extra),
  // and how often its compute entry said it had work queued: looked at every every_us from
  // 200 ms after its start (launching by then) to until_ms.
  struct QueuedLooks {
    int entries = 0, queued = 0;
  };
  QueuedLooks WatchOpportunisticAloneOnMps(std::vector<std::string> extra, double until_ms, useconds_t every_us) {
    unlink(sim_state_.c_str());
    const double start_at = NowMs() + 300;
    Worker o = StartProgram(std::string(GSLICE_TEST_BIN_DIR) + "/compute_worker",
                            UnderShim(OnGpu(0, {{"GSLICE_SIM_MPS", "100"}, {"GSLICE_CLASS", "opportunistic"}})),
                            Job(start_at, 1.5, std::move(extra)));
    QueuedLooks q;
    gslice::Ledger l;
    gslice::ComputeWindow w;
    const bool open = l.Open(ledger_.c_str()) == gslice::LedgerError::kOk && w.Init(&l, -1);
    EXPECT_TRUE(open) << l.detail();
    while (open && NowMs() < start_at + until_ms) {
      usleep(every_us);
      if (NowMs() < start_at + 200) continue;
      w.Refresh();
      const int64_t now = gslice::MonotonicNs();
      for (int i = 0; i < gslice::kLedgerMaxComputeEntries; ++i) {
        if (!w.mapped(gslice::ComputeSliceOf(i)) || w.entry(i).state.load() == 0) continue;
        ++q.entries;
        q.queued += w.entry(i).inflight_until_ns.load() > now ? 1 : 0;
      }
    }
    const Result r = Wait(o);
    EXPECT_GT(r.kernels, 0) << r.raw;
    return q;
  }

  std::string sim_state_, ledger_;
};

}  // namespace gslice::compute_sim

#endif  // GSLICE_TESTS_COMPUTE_COMPUTE_SIM_H_
