// The launch gate on the simulated driver's device engine (one context's kernels at a time,
// time-sliced between processes): caps, shares, the opportunistic class, reaction to load
// changes and dead participants. Every assertion compares kernel counts of jobs measured
// side by side (never absolute times), with tolerances for a loaded 2-core machine.
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

#include <filesystem>
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <regex>
#include <string>
#include <vector>

namespace {

constexpr int kKernelUs = 1000;

// UnixNs in milliseconds: the start time the test hands its workers and they wait for.
double NowMs() { return static_cast<double>(gslice::UnixNs()) / 1e6; }

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
std::map<std::string, std::string> OnGpu(int gpu, std::map<std::string, std::string> env = {}, int gpus = 2) {
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

TEST_F(ComputeSim, CapHoldsWhenAlone) {
  const auto rs = RunTogether({OnGpu(0), OnGpu(1, {{"GSLICE_COMPUTE", "30%"}})}, 2.5);
  const Result& free = rs[0];
  const Result& capped = rs[1];
  ASSERT_GT(free.kernels, 200) << free.raw;
  const double share = static_cast<double>(capped.kernels) / static_cast<double>(free.kernels);
  // Never above the cap; below it only by what a starved CPU costs the capped job's
  // measurement (the simulated kernels' times stretch when the machine is overloaded).
  EXPECT_LE(share, 0.30 + 0.06) << "capped " << capped.kernels << " vs free " << free.kernels;
  EXPECT_GE(share, 0.30 * 0.5) << "capped " << capped.kernels << " vs free " << free.kernels;
  // The cap holds in each half of the window, not only on average.
  const double first = static_cast<double>(capped.Between(0, 1250)) / static_cast<double>(free.Between(0, 1250));
  const double second = static_cast<double>(capped.Between(1250, 2500)) / static_cast<double>(free.Between(1250, 2500));
  EXPECT_LT(first, 0.40);
  EXPECT_LT(second, 0.40);
}

TEST_F(ComputeSim, SharesSplitTheDevice) {
  const auto rs = RunTogether({{{"GSLICE_SHARE", "25%"}}, {{"GSLICE_SHARE", "75%"}}}, 3.0);
  const double a = static_cast<double>(rs[0].kernels), b = static_cast<double>(rs[1].kernels);
  ASSERT_GT(a + b, 200);
  // Shares unseen between the slices would split about evenly (0.5). Under the sanitizers, in a
  // full run on two cores, the turns gave 0.335 once (656 vs 1304).
  EXPECT_NEAR(a / (a + b), 0.25, 0.12) << a << " vs " << b;
}

TEST_F(ComputeSim, SharesAreWorkConserving) {
  // The 25% job stops half-way: the 75% job then gets the whole device. Each window's count
  // is taken relative to a free witness job's on the second simulated GPU, which sees the
  // same load on the machine.
  const auto rs = RunTogether({OnGpu(0, {{"GSLICE_SHARE", "25%"}}), OnGpu(0, {{"GSLICE_SHARE", "75%"}}), OnGpu(1)},
                              3.0, {{"--off-after", "1500"}, {}, {}});
  const double w_before = rs[2].Rate(200, 1500), w_after = rs[2].Rate(1700, 3000);
  ASSERT_GT(w_before, 0.1) << rs[2].raw;
  ASSERT_GT(w_after, 0.1) << rs[2].raw;
  const double b_before = rs[1].Rate(200, 1500) / w_before;
  const double b_after = rs[1].Rate(1700, 3000) / w_after;
  EXPECT_GT(b_after, b_before * 1.10) << rs[1].raw << "\nwitness " << rs[2].raw;
}

TEST_F(ComputeSim, OpportunisticYieldsToGuaranteed) {
  // The guaranteed job's solo speed is measured at the same time, alone on the second GPU.
  const auto all = RunTogether({OnGpu(1), OnGpu(0, {{"GSLICE_CLASS", "guaranteed"}}),
                                OnGpu(0, {{"GSLICE_CLASS", "opportunistic"}})}, 2.0);
  const Result& solo = all[0];
  const std::vector<Result> rs = {all[1], all[2]};
  const double g = static_cast<double>(rs[0].kernels), o = static_cast<double>(rs[1].kernels);
  EXPECT_GE(g, 0.85 * static_cast<double>(solo.kernels)) << "guaranteed " << g << " solo " << solo.kernels;
  EXPECT_LE(o, 0.10 * g) << "opportunistic " << o << " guaranteed " << g;
}

// On a GPU shared through MPS (GSLICE_SIM_MPS: kernels of different processes run at once,
// each one running slowing the others' kernels by a set percentage), opportunistic work runs
// beside busy guaranteed work, where on a time-sliced GPU it gets next to nothing
// (OpportunisticYieldsToGuaranteed), and the controller holds it back as far as the
// guaranteed job's progress needs.
// Processes of different slices keep their compute entries in their own slices' usage files;
// each gate maps the others' read-only (docs/ledger.md), so classes and shares still hold
// between slices.
TEST_F(ComputeSim, GatesOfDifferentSlicesSeeEachOther) {
  const auto all = RunTogether({OnGpu(1), OnGpu(0, {{"GSLICE_CLASS", "guaranteed"}, {"GSLICE_SLICE", "team-a"}}),
                                OnGpu(0, {{"GSLICE_CLASS", "opportunistic"}, {"GSLICE_SLICE", "team-b"}})}, 2.0);
  const Result& solo = all[0];
  const double g = static_cast<double>(all[1].kernels), o = static_cast<double>(all[2].kernels);
  EXPECT_GE(g, 0.85 * static_cast<double>(solo.kernels)) << "guaranteed " << g << " solo " << solo.kernels;
  EXPECT_LE(o, 0.10 * g) << "opportunistic " << o << " guaranteed " << g;
  const auto rs = RunTogether({{{"GSLICE_SHARE", "25%"}, {"GSLICE_SLICE", "team-a"}},
                               {{"GSLICE_SHARE", "75%"}, {"GSLICE_SLICE", "team-b"}}}, 3.0);
  const double a = static_cast<double>(rs[0].kernels), b = static_cast<double>(rs[1].kernels);
  ASSERT_GT(a + b, 200);
  // Shares unseen between the slices would split about evenly (0.5). Under the sanitizers, in a
  // full run on two cores, the turns gave 0.335 once (656 vs 1304).
  EXPECT_NEAR(a / (a + b), 0.25, 0.12) << a << " vs " << b;
}

TEST_F(ComputeSim, OnMpsOpportunisticRunsBesideGuaranteed) {
  // The guaranteed job's slice protected at 0.80 (gslice::kProtectDefaultPermille when 0).
  auto run = [this](const char* interference, uint32_t protect_permille) {
    unlink(sim_state_.c_str());  // a fresh simulated node with this setting
    MakeSlice("mps-guaranteed", gslice::SliceClass::kGuaranteed, protect_permille);
    auto mps = [interference](int gpu, std::map<std::string, std::string> env) {
      env["GSLICE_SIM_MPS"] = interference;
      return OnGpu(gpu, std::move(env));
    };
    // 2 ms kernels: the simulated kernels' timing jitter on a loaded machine is absolute,
    // so longer ones keep the guaranteed job's progress, which the controller reads, steady.
    const std::vector<std::string> longer = {"--kernel-us", "2000"};
    return RunTogether({mps(1, {}), mps(0, {{"GSLICE_CLASS", "guaranteed"}, {"GSLICE_SLICE", "mps-guaranteed"}}),
                        mps(0, {{"GSLICE_CLASS", "opportunistic"}})}, 6.0, {longer, longer, longer});
  };
  // From 2.5 s on: the controller has measured its baseline and settled.
  auto late = [](const Result& r) { return static_cast<double>(r.Between(2500, 6000)); };
  // No interference (kernels of both fit side by side): the guaranteed job's kernels run as
  // fast beside opportunistic work as alone, so after the one short pause that gives them a
  // time alone, the controller never holds opportunistic work back, and it runs at about its
  // solo speed beside the busy guaranteed job, which a time-sliced GPU would not allow at all.
  // At a floor of 0.60: on a loaded 2-core machine (the sanitizers' build above all) another
  // busy process's simulated kernels take CPU from the guaranteed job's, which then read
  // slower beside it, a real reading the controller rightly acts on. Under a 0.97 floor that
  // failed this in 1 to 5 runs of 10 there; under 0.80, beside a process spinning on one of
  // the two cores, in 1 of 15 (the opportunistic job at 0.81 of solo, held back where the
  // spinner slowed both).
  auto rs = run("0", 600);
  ASSERT_GT(late(rs[0]), 300) << rs[0].raw;
  EXPECT_GE(late(rs[1]), 0.92 * late(rs[0])) << "guaranteed " << rs[1].raw << "\nsolo " << rs[0].raw;
  EXPECT_GE(late(rs[2]), 0.85 * late(rs[0])) << "opportunistic " << rs[2].raw << "\nsolo " << rs[0].raw;
  // Heavy interference (running both at once doubles the guaranteed job's kernel times): its
  // kernels read slow, and the controller backs off until they are near their time alone.
  rs = run("100", 0);
  ASSERT_GT(late(rs[0]), 300) << rs[0].raw;
  // (At the full rate it would run at about half its speed. The margin allows for a 2-core
  // machine running other tests at once: 0.74 was seen there once.)
  EXPECT_GE(late(rs[1]), 0.70 * late(rs[0])) << "guaranteed " << rs[1].raw << "\nsolo " << rs[0].raw
                                              << "\nopportunistic " << rs[2].raw;
}

// A guaranteed job bound by its host: a 1 ms kernel, then 3 ms of host work, then a
// synchronisation that finds the kernel done. Beside opportunistic work its kernels take 1.5x
// as long and it loses nothing. Its kernels alone would read about 0.86 of its speed (the GPU
// a third busy, each kernel 1.5x as long), under its 0.97 floor; its host's waits on the GPU,
// next to nothing, say it lost nothing, so the controller leaves opportunistic work
// unthrottled (kernel_clock.h, "the critical path").
TEST_F(ComputeSim, OnMpsAJobThatDoesNotWaitForItsKernelsIsNotProtectedFromTheirSlowdown) {
  MakeSlice("mps-guaranteed", gslice::SliceClass::kGuaranteed, 970);
  auto mps = [](int gpu, std::map<std::string, std::string> env) {
    env["GSLICE_SIM_MPS"] = "50";
    return OnGpu(gpu, std::move(env), 3);
  };
  const std::vector<std::string> host_bound = {"--batch", "1", "--kernel-us", "1000", "--host-us", "3000"};
  const std::vector<std::string> busy = {"--kernel-us", "2000"};
  const auto rs = RunTogether({mps(1, {}), mps(2, {}), mps(0, {{"GSLICE_CLASS", "guaranteed"}, {"GSLICE_SLICE", "mps-guaranteed"}}),
                               mps(0, {{"GSLICE_CLASS", "opportunistic"}})},
                              6.0, {host_bound, busy, host_bound, busy});
  auto late = [](const Result& r) { return static_cast<double>(r.Between(2500, 6000)); };
  ASSERT_GT(late(rs[0]), 300) << rs[0].raw;
  ASSERT_GT(late(rs[1]), 300) << rs[1].raw;
  EXPECT_GE(late(rs[2]), 0.92 * late(rs[0])) << "guaranteed " << rs[2].raw << "\nsolo " << rs[0].raw;
  // Beside the guaranteed kernels about 40% of the time, slowed by half then: about 0.8 of
  // solo unthrottled. Judged by its kernels (0.86 of its speed, 0.89 of its floor) the rate
  // would halve every 2 s, to about 0.3 of solo from 2.5 s on. Under the sanitizers on two
  // cores kept busy, its host slowed beside the other processes' and some periods read it by
  // its kernels at 0.94-0.96 of the floor: two proportional cuts (1000 -> 694 -> 558) left
  // it under 0.65 of solo in 2 runs of 6.
  EXPECT_GE(late(rs[3]), 0.50 * late(rs[1])) << "opportunistic " << rs[3].raw << "\nsolo " << rs[1].raw;
}

// A guaranteed job that waits for its GPU-bound work by polling its stream makes no waiting
// call the hooks see: its host's waits bound nothing, its kernels' reading holds, and heavy
// interference is cut back as for a job that synchronises.
TEST_F(ComputeSim, OnMpsAJobThatWaitsByPollingKeepsItsKernelsReading) {
  MakeSlice("mps-guaranteed", gslice::SliceClass::kGuaranteed, 800);
  auto mps = [](int gpu, std::map<std::string, std::string> env) {
    env["GSLICE_SIM_MPS"] = "100";
    return OnGpu(gpu, std::move(env));
  };
  const std::vector<std::string> polling = {"--kernel-us", "2000", "--poll", "1"};
  const std::vector<std::string> busy = {"--kernel-us", "2000"};
  const auto rs = RunTogether({mps(1, {}), mps(0, {{"GSLICE_CLASS", "guaranteed"}, {"GSLICE_SLICE", "mps-guaranteed"}}),
                               mps(0, {{"GSLICE_CLASS", "opportunistic"}})},
                              6.0, {polling, polling, busy});
  auto late = [](const Result& r) { return static_cast<double>(r.Between(2500, 6000)); };
  ASSERT_GT(late(rs[0]), 300) << rs[0].raw;
  // Unthrottled it would run at about half its speed (OnMpsOpportunisticRunsBesideGuaranteed).
  EXPECT_GE(late(rs[1]), 0.70 * late(rs[0])) << "guaranteed " << rs[1].raw << "\nsolo " << rs[0].raw
                                              << "\nopportunistic " << rs[2].raw;
}

// On MPS a cap is applied as the process's share of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
// which gslice run, the device plugin and the DRA driver set): its kernels take longer, and
// it holds no more of the GPU than that share however busy it keeps them. The gate charges
// its busy time at that share, so the cap is held once: a job capped at 50% on half the SMs
// runs at about half its free speed, not a quarter.
TEST_F(ComputeSim, OnMpsACapHeldByTheSmsIsNotHeldAgainByTheGate) {
  // Half the SMs read about 0.5 of a free process's kernels, all of them about 1.0. Load on the
  // host raises the ratio (a starved witness launches less, while a capped process mostly waits
  // anyway), so the bounds sit halfway to all the SMs.
  constexpr double kHalfwayToAllSms = 0.75;
  unlink(sim_state_.c_str());  // a fresh simulated node, on MPS
  auto mps = [](int gpu, std::map<std::string, std::string> env) {
    env["GSLICE_SIM_MPS"] = "0";
    return OnGpu(gpu, std::move(env));
  };
  const auto rs = RunTogether(
      {mps(1, {}), mps(0, {{"GSLICE_COMPUTE", "50%"}, {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50"}})}, 2.5);
  const double free = static_cast<double>(rs[0].kernels), capped = static_cast<double>(rs[1].kernels);
  ASSERT_GT(free, 200) << rs[0].raw;
  const std::string counts = "capped " + std::to_string(rs[1].kernels) + " vs free " + std::to_string(rs[0].kernels);
  EXPECT_GE(capped / free, 0.40) << counts;  // held twice, it would be about 0.25
  EXPECT_LE(capped / free, kHalfwayToAllSms) << counts;  // not on all the SMs
  // Where the SMs are not enough, the gate still holds the cap: two processes of one slice
  // capped at 50%, each on half the SMs, would use all of them between them.
  auto pair_member = [&mps]() {
    return mps(0, {{"GSLICE_COMPUTE", "50%"}, {"GSLICE_SLICE", "half-sms"}, {"GSLICE_MEMORY", "2GiB"},
                   {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50"}});
  };
  const auto two = RunTogether({mps(1, {}), pair_member(), pair_member()}, 2.5, {}, /*direct=*/false);
  const double witness = static_cast<double>(two[0].kernels);
  const double both = static_cast<double>(two[1].kernels + two[2].kernels);
  ASSERT_GT(witness, 200) << two[0].raw;
  EXPECT_LE(both / witness, kHalfwayToAllSms) << "two processes " << two[1].kernels << " + " << two[2].kernels << " vs free "
                                         << two[0].kernels;
}

// A guaranteed process on MPS beside opportunistic work takes no gate: its launches are only
// counted, and now and then one is timed. From the count the gate thread says it wants the
// GPU (so that the opportunistic controller pauses for its kernels' times alone), and the
// timed launches give the controller its reading.
TEST_F(ComputeSim, OnMpsGuaranteedLaunchesAreCountedNotGated) {
  const std::vector<Result> rs = TracedPairOnMps("100");  // heavy interference
  const std::string& g = rs[0].raw;
  ASSERT_GT(rs[0].kernels, 0) << g;
  EXPECT_NE(g.find("compute: launches are counted and some timed"), std::string::npos) << g;
  EXPECT_EQ(g.find("compute: launches pass the gate"), std::string::npos) << g;
  // A reading (n.nnn, not 0.000) of its kernels beside opportunistic work against alone.
  const std::regex reading(R"(beside opportunistic work at least 0\.([0-9]{3}) of its speed alone, by its (kernels' times|launches|host's waits) \()");
  bool read = false;
  for (auto it = std::sregex_iterator(g.begin(), g.end(), reading); it != std::sregex_iterator(); ++it) {
    read |= (*it)[1].str() != "000";
  }
  EXPECT_TRUE(read) << g;
  // The opportunistic controller acted on it: heavy interference reads slow, and it cuts.
  EXPECT_TRUE(std::regex_search(rs[1].raw, std::regex(R"(of their floor \([0-9.]+ over [0-9]+ periods, at most [0-9.]+\): rate 1000 ->)")))
      << rs[1].raw;
}

// A job of many kernels (64 here; ResNet-50 training runs some 150) needs each one's time alone.
// While its clock wants baselines and no opportunistic work is queued (the pause it asks for),
// it times one launch in kKernelSampleDenseEvery, not one in kKernelSampleEvery, at random gaps
// (the job repeats its 64 kernels in turn, which a fixed stride would alias with): the first
// pause gives most of its kernels a baseline, so it need not ask again for each of them.
TEST_F(ComputeSim, OnMpsOnePauseTimesMostOfAJobsKernelsAlone) {
  const std::vector<Result> rs = TracedPairOnMps("10", {"--kernel-us", "100", "--batch", "16", "--shapes", "64"});
  const std::string& g = rs[0].raw;
  ASSERT_GT(rs[0].kernels, 0) << g;
  ASSERT_NE(g.find("wants a baseline"), std::string::npos) << g;
  int most = 0;
  const std::regex timed(R"(\(([0-9]+) kernels timed alone,)");
  for (auto it = std::sregex_iterator(g.begin(), g.end(), timed); it != std::sregex_iterator(); ++it) {
    most = std::max(most, std::stoi((*it)[1].str()));
  }
  // About 6,000 launches a second here, some 150 ms alone in the pause (the opportunistic
  // job's word from its last unmetered launch stands for the first 50 ms of it): 32-53 of the
  // 64 kernels in runs; at a fixed one in kKernelSampleEvery, which 64 divides, 4-6 of them
  // ever had a baseline. A loaded host launches less in the pause and times fewer: the bound
  // is well clear of the fixed stride's.
  EXPECT_GE(most, 16) << g;
}

// A guaranteed job that launches without pause (a short kernel, then host work) is a loop, and
// the opportunistic process judges it by looks from its first periods: its launches beside
// against its launches in a pause, which it reads from the job's compute entry (its gate thread
// publishes the count there, the launch path does not). Beside 2 ms opportunistic kernels its
// own kernels run half as fast again, done by its next synchronisation: it loses little, and
// the look says so.
TEST_F(ComputeSim, OnMpsAJobReadByItsLaunchesIsJudgedByLooks) {
  const std::vector<Result> rs = TracedPairOnMps("50", {"--kernel-us", "20", "--batch", "1", "--host-us", "150"}, 6.0,
                                                 {"--kernel-us", "2000"});
  const std::string& g = rs[0].raw;
  const std::string& o = rs[1].raw;
  ASSERT_GT(rs[0].kernels, 0) << g;
  ASSERT_GE(rs[1].kernels, 0) << o;
  std::smatch look;
  ASSERT_TRUE(std::regex_search(o, look, std::regex(R"(a look: guaranteed job launched ([0-9]+) a period beside work at [0-9]+ permille, ([0-9]+) alone)")))
      << o;
  const double beside = std::stod(look[1].str()), alone = std::stod(look[2].str());
  EXPECT_GT(alone, 100) << o;
  // Its kernels 1.5x as long beside: about 0.94 of its speed alone. A look also reads the
  // host's contention, which the pause relieves: with four spinners on two cores it read 0.72
  // and 0.78 in 2 runs of 10.
  EXPECT_GE(beside, 0.65 * alone) << o;
}

// A job that synchronises after each kernel launches every kernel on a dry stream, where the pair
// of events around it may time the launch too: a sample shorter than 1 ms is then left out
// (kernel_clock.h, MeasuresTheKernel), a kernel of 1 ms or more is timed. (The simulator's
// stream picks up a start event and its kernel together unless it was awake, so that a short
// kernel's sample is seen dry only now and then: the rule itself is pinned in
// ComputeKernels.ALaunchTimedOnADryStreamMeasuresOnlyALongKernel.)
TEST_F(ComputeSim, OnMpsLongKernelsTimedOnADryStreamAreKept) {
  const std::vector<Result> rs = TracedPairOnMps("10", {"--kernel-us", "2000", "--batch", "1"});
  const std::string& g = rs[0].raw;
  ASSERT_GT(rs[0].kernels, 0) << g;
  EXPECT_NE(g.find(" 0 samples on a dry stream left out"), std::string::npos) << g;
  EXPECT_EQ(std::regex_search(g, std::regex(R"([1-9][0-9]* samples on a dry stream left out)")), false) << g;
  EXPECT_NE(g.find("by its kernels' times ("), std::string::npos) << g;
}

// An opportunistic process with no guaranteed process on its GPU has nothing to yield to: its
// launches go straight through, unmeasured (the gate's measured time stays 0). Beside a
// guaranteed process, even an idle one, they are measured and bounded again.
// Each process learns of its peers at its own peer scan, so a guaranteed process that starts
// beside opportunistic work on MPS may learn of it first. Its kernels timed before the other
// learns of it are times alone only if the opportunistic entry says no work is queued: an
// opportunistic process says it has work queued even while it knows of nothing to yield to.
TEST_F(ComputeSim, OnMpsOpportunisticWorkAloneSaysItHasWorkQueued) {
  const QueuedLooks q = WatchOpportunisticAloneOnMps({}, 1200, 20'000);
  ASSERT_GT(q.entries, 0) << "the opportunistic process's compute entry";
  EXPECT_GT(q.queued, q.entries / 2) << "its work queued, said in " << q.queued << " of " << q.entries << " looks";
}

// A job that queues a step's kernels and then waits for them (a training step ending in
// loss.item()) stops launching while they run: its launches' word (kUngatedHoldNs, 50 ms)
// lapses, and a guaranteed peer timing its kernels meanwhile would take them for alone. While a
// thread of it waits on the GPU, it has work queued, and says so.
TEST_F(ComputeSim, OnMpsOpportunisticWorkSaysItIsQueuedWhileItWaitsForIt) {
  // Two 100 ms kernels, then a synchronisation: some 150 ms of each 200 ms with no launch.
  const QueuedLooks q = WatchOpportunisticAloneOnMps({"--kernel-us", "100000", "--batch", "2"}, 1300, 10'000);
  ASSERT_GT(q.entries, 0) << "the opportunistic process's compute entry";
  EXPECT_GE(q.queued, q.entries * 9 / 10) << "its work queued, said in " << q.queued << " of " << q.entries << " looks";
}

TEST_F(ComputeSim, OpportunisticAloneLaunchesStraightThrough) {
  const auto busy_ns = [](const Result& r) {
    const size_t at = r.raw.find("busy_ns=");
    return at == std::string::npos ? -1LL : std::stoll(r.raw.substr(at + 8));
  };
  const auto alone = RunTogether({{{"GSLICE_CLASS", "opportunistic"}}}, 1.0);
  ASSERT_GT(alone[0].kernels, 0) << alone[0].raw;
  EXPECT_EQ(busy_ns(alone[0]), 0) << alone[0].raw;
  // The guaranteed job launches only in its last 100 ms: for the first 0.9 s it is there and idle.
  const auto beside = RunTogether({{{"GSLICE_CLASS", "guaranteed"}}, {{"GSLICE_CLASS", "opportunistic"}}}, 1.0,
                                  {{"--on-after", "900"}, {}});
  ASSERT_GT(beside[1].kernels, 0) << beside[1].raw;
  EXPECT_GT(busy_ns(beside[1]), 0) << beside[1].raw;
}

// The next three tests judge a job's speed after a change against a witness: a free job
// alone on the second simulated GPU over the same window, so that both see the same load on
// the machine (a 2-core machine's load can halve every job's speed from one second to the
// next, which a comparison with an earlier window would read as the change's effect).
TEST_F(ComputeSim, OpportunisticRegainsTheIdleDevice) {
  // Guaranteed work stops at 1.5 s; the opportunistic job must take the device over at once.
  const auto rs = ClassPairAndWitness(3.0, {"--off-after", "1500"});
  const double g_rate = rs[0].Rate(200, 1500);
  const double o_during = rs[1].Rate(200, 1500);
  // From 100 ms after the stop (the reaction bound) to the end.
  const double o_after = rs[1].Rate(1600, 3000);
  const double witness_after = rs[2].Rate(1600, 3000);
  ASSERT_GT(witness_after, 0.1) << rs[2].raw;
  // While guaranteed work runs, the rate controller may let a little opportunistic work in
  // (OpportunisticYieldsToGuaranteed pins the guaranteed job's speed); here only that it
  // is held well below the guaranteed rate, and regains the device after.
  EXPECT_LE(o_during, 0.25 * g_rate) << rs[1].raw;
  EXPECT_GE(o_after, 0.70 * witness_after) << "opportunistic " << rs[1].raw << "\nwitness " << rs[2].raw;
}

TEST_F(ComputeSim, GuaranteedTakesTheDeviceBackWhenItStarts) {
  const auto rs = ClassPairAndWitness(3.0, {"--on-after", "1500"});
  const double g_after = rs[0].Rate(1600, 3000);
  const double o_after = rs[1].Rate(1600, 3000);
  const double witness_after = rs[2].Rate(1600, 3000);
  ASSERT_GT(witness_after, 0.1) << rs[2].raw;
  EXPECT_GE(g_after, 0.70 * witness_after) << "guaranteed " << rs[0].raw << "\nwitness " << rs[2].raw;
  EXPECT_LE(o_after, 0.10 * g_after) << rs[1].raw;
}

// The same when the guaranteed process itself starts late: until then the opportunistic job
// has nothing to yield to and launches straight through; once the guaranteed process's
// context is up it is seen, and the opportunistic job yields as before.
TEST_F(ComputeSim, GuaranteedProcessStartingLateTakesTheDevice) {
  const double start_at = NowMs() + 800;
  Worker o = Start(OnGpu(0, {{"GSLICE_CLASS", "opportunistic"}}), Job(start_at, 3.0));
  Worker witness = Start(OnGpu(1), Job(start_at, 3.0));
  while (NowMs() < start_at + 700) usleep(10000);
  // Started 0.7 s into the opportunistic job's window; it launches from 1.5 s on.
  Worker g = Start(OnGpu(0, {{"GSLICE_CLASS", "guaranteed"}}), Job(start_at + 1500, 1.5));
  const Result ro = Wait(o);
  const Result rw = Wait(witness);
  const Result rg = Wait(g);
  ASSERT_GT(ro.kernels, 0) << ro.raw;
  ASSERT_GT(rg.kernels, 0) << rg.raw;
  const double g_after = rg.Rate(100, 1500);  // rg's window starts at 1.5 s
  const double o_after = ro.Rate(1600, 3000);
  const double witness_after = rw.Rate(1600, 3000);
  ASSERT_GT(witness_after, 0.1) << rw.raw;
  EXPECT_GE(g_after, 0.70 * witness_after) << "guaranteed " << rg.raw << "\nwitness " << rw.raw;
  EXPECT_LE(o_after, 0.10 * g_after) << "guaranteed " << rg.raw << "\nopportunistic " << ro.raw;
}

// On a time-sliced GPU the controller judges by the overlap: the time in which guaranteed
// work was queued while the opportunistic process had work queued too. Here guaranteed work
// starts after the opportunistic job has had the device to itself, then works in pulses
// (30 ms on, 20 ms off): the opportunistic job runs in the idle stretches, and guaranteed
// work coming back finds its work queued. The judged periods see that overlap, and no period
// can overlap for longer than the guaranteed work was busy. (The overlap at the start alone
// falls into the period in which the controller starts, which it does not judge, or into
// the next one, by the phase of its 250 ms periods: not something to test on.)
// GSLICE_LOG=debug prints every decision.
TEST_F(ComputeSim, TimeSlicedControllerMeasuresTheOverlap) {
  const double start_at = NowMs() + 800;
  Worker g = Start({{"GSLICE_CLASS", "guaranteed"}},
                   Job(start_at, 3.0, {"--on-after", "1000", "--pulse-on", "30", "--pulse-off", "20"}), /*direct=*/false);
  Worker o = StartProgram(std::string(GSLICE_TEST_BIN_DIR) + "/compute_worker",
                          UnderShim({{"GSLICE_CLASS", "opportunistic"}, {"GSLICE_LOG", "debug"}}), Job(start_at, 3.0),
                          /*stderr_too=*/true);
  const Result rg = Wait(g);
  const Result ro = Wait(o);
  ASSERT_GT(rg.kernels, 0) << rg.raw;
  ASSERT_GT(ro.kernels, 0) << ro.raw;
  EXPECT_NE(ro.raw.find("controller: guaranteed work busy"), std::string::npos) << ro.raw;
  // Its queue goes short when guaranteed work comes, and the trace names the peer's times.
  EXPECT_NE(ro.raw.find("compute: opportunistic queue short (guaranteed work near); entry "), std::string::npos) << ro.raw;
  int judged = 0;
  int64_t overlap_total = 0;
  std::istringstream lines(ro.raw);
  for (std::string line; std::getline(lines, line);) {
    long long busy_ms = 0, overlap_us = 0;
    const size_t at = line.find("guaranteed speed");
    if (at == std::string::npos) continue;
    double speed = 0;
    ASSERT_EQ(sscanf(line.c_str() + at, "guaranteed speed %lf (busy %lld ms, overlap %lld us)", &speed, &busy_ms, &overlap_us), 3)
        << line;
    ++judged;
    overlap_total += overlap_us;
    EXPECT_LE(overlap_us, busy_ms * 1000 + 1000) << line;
    EXPECT_NEAR(speed, busy_ms > 0 ? 1.0 - static_cast<double>(overlap_us) / (1000.0 * static_cast<double>(busy_ms)) : 1.0, 0.02)
        << line;
  }
  EXPECT_GE(judged, 3) << ro.raw;
  EXPECT_GT(overlap_total, 0) << "guaranteed work came back to queued opportunistic work\n" << ro.raw;
}

// A guaranteed slice's protection level, written into the ledger's limits file, is the floor
// that the opportunistic gate's controller keeps that slice's process at: its first decision
// of a busy stretch names it.
TEST_F(ComputeSim, TheProtectionLevelInTheLedgerReachesTheOpportunisticGate) {
  MakeSlice("protected", gslice::SliceClass::kGuaranteed, 800);
  const Result ro = GuaranteedBesideTracedOpportunistic("protected", 2.0);
  EXPECT_NE(ro.raw.find("controller: guaranteed work busy; rate 0 permille, gap 4000 us, floor 0.800"), std::string::npos)
      << ro.raw;
  EXPECT_EQ(ro.raw.find("floor 0.970"), std::string::npos) << ro.raw;
}

// A process's class counts only as far as its slice's in the limits file: a process of an
// opportunistic slice that calls itself guaranteed is not yielded to.
TEST_F(ComputeSim, AProcessCannotClaimAClassAboveItsSlices) {
  MakeSlice("batch", gslice::SliceClass::kOpportunistic, 0);
  const Result ro = GuaranteedBesideTracedOpportunistic("batch", 2.0);
  EXPECT_EQ(ro.raw.find("controller: guaranteed work busy"), std::string::npos) << ro.raw;
  EXPECT_GT(ro.kernels, 0) << ro.raw;
}

// `gslice set NAME --compute 30%` on a running program: gsliced writes the slice's cap word
// for the GPU into the ledger's limits file (Ledger::SetComputePolicy), and the program's gate,
// which started with no compute policy at all, follows it within a second; lifting the cap
// (a cap of 0: none) gives the GPU back. Each window's kernel rate is taken relative to a free
// witness job's on the other simulated GPU over the same window (the machine's load).
TEST_F(ComputeSim, ACapSetInTheLedgerReachesARunningProcess) {
  const std::string uuids = "GPU-00000000-0000-0000-0000-00000000aa00,GPU-00000000-0000-0000-0000-00000000aa01";
  const uint8_t uuid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xaa, 0x01};  // the second
  gslice::Ledger l;
  ASSERT_EQ(l.Open(ledger_.c_str()), gslice::LedgerError::kOk) << l.detail();
  int slice = -1, gpu = -1;
  ASSERT_EQ(l.FindOrCreateSlice("live", gslice::SliceClass::kGuaranteed, 0, &slice), gslice::LedgerError::kOk);
  ASSERT_EQ(l.FindOrAddGpu(slice, uuid, -1, &gpu), gslice::LedgerError::kOk);
  const double start_at = NowMs() + 800;
  Worker witness = Start(OnGpu(0, {{"GSLICE_SIM_UUIDS", uuids}}), Job(start_at, 6.0));
  Worker live = Start(OnGpu(1, {{"GSLICE_SIM_UUIDS", uuids}, {"GSLICE_SLICE", "live"}}), Job(start_at, 6.0));
  while (NowMs() < start_at + 1500) usleep(5000);
  l.SetComputePolicy(slice, gpu, gslice::kGpuPolicySet | 300, 0);
  while (NowMs() < start_at + 3500) usleep(5000);
  l.SetComputePolicy(slice, gpu, gslice::kGpuPolicySet | 0, 0);
  const Result w = Wait(witness);
  const Result r = Wait(live);
  ASSERT_GE(r.kernels, 0) << r.raw;
  ASSERT_GE(w.kernels, 0) << w.raw;
  const auto relative = [&](double from, double to) { return r.RateAgainst(w, from, to, 0.1); };
  const double before = relative(200, 1500);
  const double capped = relative(2500, 3500);  // from a second after the cap was set
  const double lifted = relative(4500, 6000);  // from a second after it was lifted
  const std::string counts = "live " + r.raw + "\nwitness " + w.raw;
  EXPECT_GT(before, 0.5) << counts;
  EXPECT_LT(capped, 0.6 * before) << counts;
  EXPECT_GT(capped, 0.05 * before) << counts;
  EXPECT_GT(lifted, 0.75 * before) << counts;
}

// `gslice set NAME --class opportunistic` on a running program: gsliced changes the slice's
// class in the ledger (Ledger::UpdateSlice); the program, which started guaranteed, yields to
// a guaranteed job on the same GPU within a second, and takes its turn again once the slice is
// guaranteed again.
TEST_F(ComputeSim, AClassChangeInTheLedgerReachesARunningProcess) {
  gslice::Ledger l;
  ASSERT_EQ(l.Open(ledger_.c_str()), gslice::LedgerError::kOk) << l.detail();
  int slice = -1;
  ASSERT_EQ(l.FindOrCreateSlice("live", gslice::SliceClass::kGuaranteed, 0, &slice), gslice::LedgerError::kOk);
  const gslice::LedgerSlice& entry = l.limits()->slices[slice];
  const auto set_class = [&](gslice::SliceClass cls) {
    ASSERT_EQ(l.UpdateSlice(slice, cls, entry.flags, entry.owner_uid, entry.protect_permille), gslice::LedgerError::kOk);
  };
  const double start_at = NowMs() + 800;
  Worker other = Start({{"GSLICE_CLASS", "guaranteed"}}, Job(start_at, 6.0));
  Worker live = Start({{"GSLICE_SLICE", "live"}}, Job(start_at, 6.0));
  while (NowMs() < start_at + 1500) usleep(5000);
  set_class(gslice::SliceClass::kOpportunistic);
  while (NowMs() < start_at + 3500) usleep(5000);
  set_class(gslice::SliceClass::kGuaranteed);
  const Result o = Wait(other);
  const Result r = Wait(live);
  ASSERT_GE(r.kernels, 0) << r.raw;
  ASSERT_GE(o.kernels, 0) << o.raw;
  const auto relative = [&](double from, double to) { return r.RateAgainst(o, from, to, 0.05); };
  const double before = relative(200, 1500);
  const double yielding = relative(2500, 3500);  // from a second after the change
  const double back = relative(4500, 6000);      // from a second after the change back
  const std::string counts = "live " + r.raw + "\nguaranteed " + o.raw;
  EXPECT_GT(before, 0.3) << counts;
  EXPECT_LT(yielding, 0.3 * before) << counts;
  EXPECT_GT(back, 0.6 * before) << counts;
}

// `gslice set NAME --share 25%` on a running program: its slice's share word for the GPU in the
// ledger changes its weight against a peer taking turns with it (50%) within a second: from
// the default weight (1000:500, the program ahead) to 250:500 (the peer ahead).
TEST_F(ComputeSim, AShareSetInTheLedgerReachesARunningProcess) {
  const std::string uuids = "GPU-00000000-0000-0000-0000-00000000bb00";
  const uint8_t uuid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xbb, 0x00};
  gslice::Ledger l;
  ASSERT_EQ(l.Open(ledger_.c_str()), gslice::LedgerError::kOk) << l.detail();
  int slice = -1, gpu = -1;
  ASSERT_EQ(l.FindOrCreateSlice("live", gslice::SliceClass::kGuaranteed, 0, &slice), gslice::LedgerError::kOk);
  ASSERT_EQ(l.FindOrAddGpu(slice, uuid, -1, &gpu), gslice::LedgerError::kOk);
  const double start_at = NowMs() + 800;
  Worker other = Start({{"GSLICE_SIM_UUIDS", uuids}, {"GSLICE_SHARE", "50%"}}, Job(start_at, 4.0));
  Worker live = Start({{"GSLICE_SIM_UUIDS", uuids}, {"GSLICE_SLICE", "live"}}, Job(start_at, 4.0));
  while (NowMs() < start_at + 1500) usleep(5000);
  l.SetComputePolicy(slice, gpu, 0, gslice::kGpuPolicySet | 250);
  const Result o = Wait(other);
  const Result r = Wait(live);
  ASSERT_GE(r.kernels, 0) << r.raw;
  ASSERT_GE(o.kernels, 0) << o.raw;
  const auto relative = [&](double from, double to) { return r.RateAgainst(o, from, to, 0.05); };
  const double before = relative(200, 1500);
  const double after = relative(2500, 4000);  // from a second after the change
  const std::string counts = "live " + r.raw + "\nshare 50% " + o.raw;
  EXPECT_GT(before, 1.2) << counts;
  // The weights ask for a quarter of before's ratio (2.0 to 0.5); a share that never reached the
  // process leaves it where it was. On a loaded 2-core machine under the sanitizers the turns
  // gave 0.62 of before once, so the bound is 0.7 of it.
  EXPECT_LT(after, 0.7 * before) << counts;
}

TEST_F(ComputeSim, DeadGuaranteedNeverStallsOpportunistic) {
  const double start_at = NowMs() + 800;
  Worker g = Start({{"GSLICE_CLASS", "guaranteed"}}, Job(start_at, 3.0));
  Worker o = Start({{"GSLICE_CLASS", "opportunistic"}}, Job(start_at, 3.0));
  while (NowMs() < start_at + 1000) usleep(10000);
  kill(g.pid, SIGKILL);  // mid-run, with kernels queued
  Wait(g);
  const Result r = Wait(o);
  ASSERT_GE(r.kernels, 0) << r.raw;
  const double during = static_cast<double>(r.Between(200, 1000));
  const double after = r.Rate(1500, 3000) * 800.0;  // per 800 ms
  EXPECT_GT(after, 4.0 * (during + 10)) << r.raw;
}

TEST_F(ComputeSim, DeadSharePeerNeverStallsTheOther) {
  const double start_at = NowMs() + 800;
  Worker a = Start(OnGpu(0, {{"GSLICE_SHARE", "50%"}}), Job(start_at, 3.0));
  Worker b = Start(OnGpu(0, {{"GSLICE_SHARE", "50%"}}), Job(start_at, 3.0));
  Worker witness = Start(OnGpu(1), Job(start_at, 3.0));  // the machine's load, as in the tests above
  while (NowMs() < start_at + 1000) usleep(10000);
  kill(a.pid, SIGKILL);
  Wait(a);
  const Result r = Wait(b);
  const Result w = Wait(witness);
  ASSERT_GE(r.kernels, 0) << r.raw;
  const double w_before = w.Rate(200, 1000), w_after = w.Rate(1500, 3000);
  ASSERT_GT(w_before, 0.1) << w.raw;
  ASSERT_GT(w_after, 0.1) << w.raw;
  const double before = r.Rate(200, 1000) / w_before;
  const double after = r.Rate(1500, 3000) / w_after;
  EXPECT_GT(after, 1.4 * before) << r.raw << "\nwitness " << w.raw;
}

}  // namespace

namespace {

// The same rules end to end: unmodified programs under the libcuda.so.1 shim.
// A cap is the slice's, not each process's: two processes of one slice capped at 30% get at
// most 30% of the GPU between them (they charge one shared GCRA word in the ledger), and the
// pair is not starved by the shared charge. How close the pair comes to a single process of
// such a slice depends on the machine's load (the simulated GPU time-slices processes, and a
// busy 2-core machine stretches each one's measured time), so only starvation is pinned
// here: at least half of what one process gets.
TEST_F(ComputeSim, CapHoldsForTheSliceAcrossItsProcesses) {
  auto slice = [](const char* name) {
    return std::map<std::string, std::string>{
        // Room for both processes' contexts (GSLICE_CONTEXT_OVERHEAD, 600 MiB each by default).
        {"GSLICE_COMPUTE", "30%"}, {"GSLICE_SLICE", name}, {"GSLICE_MEMORY", "2GiB"}};
  };
  const auto rs = RunTogether({OnGpu(0, {}, 3), OnGpu(1, slice("capped-one"), 3), OnGpu(2, slice("capped-pair"), 3),
                               OnGpu(2, slice("capped-pair"), 3)},
                              2.5, {}, /*direct=*/false);
  const double free = static_cast<double>(rs[0].kernels);
  const double one = static_cast<double>(rs[1].kernels);
  const double both = static_cast<double>(rs[2].kernels + rs[3].kernels);
  ASSERT_GT(free, 200) << rs[0].raw;
  const std::string counts = "free " + std::to_string(rs[0].kernels) + ", one process " + std::to_string(rs[1].kernels) +
                             ", two processes " + std::to_string(rs[2].kernels) + " + " + std::to_string(rs[3].kernels);
  EXPECT_LE(both / free, 0.30 + 0.08) << counts;
  EXPECT_LE(one / free, 0.30 + 0.08) << counts;
  EXPECT_GE(both / one, 0.5) << counts;
  EXPECT_GT(rs[2].kernels, 0) << rs[2].raw;
  EXPECT_GT(rs[3].kernels, 0) << rs[3].raw;
}

TEST_F(ComputeSim, ThroughTheShimCapAndClassesHold) {
  const auto pair = RunTogether({OnGpu(0), OnGpu(1, {{"GSLICE_COMPUTE", "50%"}})}, 2.0, {}, /*direct=*/false);
  const Result& free = pair[0];
  const Result& capped = pair[1];
  ASSERT_GT(free.kernels, 150) << free.raw;
  const double share = static_cast<double>(capped.kernels) / static_cast<double>(free.kernels);
  EXPECT_LE(share, 0.50 + 0.08) << capped.kernels << " vs " << free.kernels;
  EXPECT_GE(share, 0.50 * 0.5) << capped.kernels << " vs " << free.kernels;
  const auto rs = ClassPairAndWitness(2.0, {"--off-after", "1000"}, /*direct=*/false);
  // That the classes reach the gate through the shim: the opportunistic job mostly yields,
  // then takes the device over. The precise yield and regain figures are the direct tests'
  // (OpportunisticYieldsToGuaranteed, OpportunisticRegainsTheIdleDevice); the margins here
  // allow for a 2-core machine running other tests at once, where rates move (a fresh-clone
  // CI run saw the opportunistic job take the device back at once and then run at 0.65 of
  // the guaranteed job's earlier rate, its 50 ms counts moving between 12 and 32 with the
  // other tests' load). The regain is judged against a free witness job on the second
  // simulated GPU over the same window.
  const double g_rate = rs[0].Rate(200, 1000);
  const double witness_after = rs[2].Rate(1100, 2000);
  ASSERT_GT(witness_after, 0.1) << rs[2].raw;
  EXPECT_LE(rs[1].Rate(200, 1000), 0.15 * g_rate) << rs[1].raw;
  EXPECT_GE(rs[1].Rate(1100, 2000), 0.50 * witness_after)
      << "opportunistic " << rs[1].raw << "\nwitness " << rs[2].raw;
}

// Work on the default streams runs at the class's stream priority: a guaranteed process's
// legacy-stream and per-thread-stream kernels run at the device's greatest priority, on the
// streams the application put them on (so in order with the copies, memsets, event records,
// blocking streams and per-thread streams around them). Without a class, and for
// opportunistic work (whose least priority the default streams already have), nothing
// changes, nor with GSLICE_STREAM_PRIORITY=program. The simulated driver traces each launch's
// stream and priority.
TEST_F(ComputeSim, DefaultStreamWorkRunsAtTheClassPriority) {
  const std::string check = std::string(GSLICE_TEST_BIN_DIR) + "/gslice_default_stream_check";
  auto run = [&](const char* cls, const char* cap = "", const char* stream_priority = nullptr) {
    std::map<std::string, std::string> env = UnderShim({{"GSLICE_SIM_TRACE_LAUNCHES", "1"}});
    if (cls[0] != '\0') env["GSLICE_CLASS"] = cls;
    if (cap[0] != '\0') env["GSLICE_COMPUTE"] = cap;
    if (stream_priority != nullptr) env["GSLICE_STREAM_PRIORITY"] = stream_priority;
    Worker w = StartProgram(check, env, {"order"}, /*stderr_too=*/true);
    const std::string out = Wait(w).raw;
    // The gate's markers of a destroyed or reset context are never used again.
    EXPECT_EQ(out.find("after its context was destroyed"), std::string::npos) << cls << " " << cap << "\n" << out;
    return out;
  };
  auto count = [](const std::string& out, const std::string& what) {
    size_t n = 0;
    for (size_t p = out.find(what); p != std::string::npos; p = out.find(what, p + 1)) ++n;
    return n;
  };
  const std::string guaranteed = run("guaranteed");
  ASSERT_NE(guaranteed.find("order ok"), std::string::npos) << guaranteed;
  // 42 fills and 61 busy kernels on the legacy stream, the blocking stream's two, the
  // per-thread stream's two, one on each of two later contexts' legacy streams, one before
  // and one after the primary context's reset: all at the greatest priority, none moved.
  EXPECT_EQ(count(guaranteed, "stream=legacy priority=-5"), 107u) << guaranteed;
  EXPECT_EQ(count(guaranteed, "stream=user priority=-5"), 2u) << guaranteed;
  EXPECT_EQ(count(guaranteed, "stream=per-thread priority=-5"), 2u) << guaranteed;
  EXPECT_EQ(count(guaranteed, "priority=0"), 0u) << guaranteed;
  // A value other than class or program: the class's priorities, and a warning.
  const std::string unknown = run("guaranteed", "", "highest");
  EXPECT_EQ(count(unknown, "stream=legacy priority=-5"), 107u) << unknown;
  EXPECT_NE(unknown.find("GSLICE_STREAM_PRIORITY=highest: not class or program"), std::string::npos) << unknown;
  // GSLICE_STREAM_PRIORITY=program: guaranteed work keeps the priorities the program asks for,
  // its default streams at 0.
  const std::string program = run("guaranteed", "", "program");
  ASSERT_NE(program.find("order ok"), std::string::npos) << program;
  EXPECT_EQ(count(program, "stream=legacy priority=0"), 107u) << program;
  EXPECT_EQ(count(program, "stream=user priority=0"), 2u) << program;
  EXPECT_EQ(count(program, "stream=per-thread priority=0"), 2u) << program;
  EXPECT_EQ(count(program, "priority=-5"), 0u) << program;
  const std::string capped = run("", "50%");
  ASSERT_NE(capped.find("order ok"), std::string::npos) << capped;
  for (const char* cls : {"", "opportunistic"}) {
    const std::string out = run(cls);
    ASSERT_NE(out.find("order ok"), std::string::npos) << out;
    EXPECT_EQ(count(out, "stream=legacy priority=0"), 107u) << out;
    EXPECT_EQ(count(out, "stream=user priority=0"), 2u) << out;
    EXPECT_EQ(count(out, "stream=per-thread priority=0"), 2u) << out;
    EXPECT_EQ(count(out, "priority=-5"), 0u) << out;
  }
}

// `gslice set NAME --class opportunistic` on a running program reaches all the class decides,
// not only the gate: streams it creates afterwards get the opportunistic priority (the
// device's least), and its legacy default stream goes back to it, where both were at the
// greatest while the slice was guaranteed. The simulated driver traces each launch's priority.
TEST_F(ComputeSim, AClassChangeReachesNewStreamsAndTheDefaultStream) {
  gslice::Ledger l;
  ASSERT_EQ(l.Open(ledger_.c_str()), gslice::LedgerError::kOk) << l.detail();
  int slice = -1;
  ASSERT_EQ(l.FindOrCreateSlice("live", gslice::SliceClass::kGuaranteed, 0, &slice), gslice::LedgerError::kOk);
  const gslice::LedgerSlice& entry = l.limits()->slices[slice];
  const std::string ready = ledger_ + "-ready", go = ledger_ + "-go";
  Worker w = StartProgram(std::string(GSLICE_TEST_BIN_DIR) + "/gslice_default_stream_check",
                          UnderShim({{"GSLICE_SLICE", "live"},
                                     {"GSLICE_CLASS", "guaranteed"},
                                     {"GSLICE_SIM_TRACE_LAUNCHES", "1"}}),
                          {"follow", ready, go}, /*stderr_too=*/true);
  for (int i = 0; i < 2000 && access(ready.c_str(), F_OK) != 0; ++i) usleep(10'000);
  ASSERT_EQ(l.UpdateSlice(slice, gslice::SliceClass::kOpportunistic, entry.flags, entry.owner_uid,
                          entry.protect_permille),
            gslice::LedgerError::kOk);
  std::ofstream(go).put('\n');
  const std::string out = Wait(w).raw;
  unlink(ready.c_str());
  unlink(go.c_str());
  EXPECT_NE(out.find("first=-5 then=0 "), std::string::npos) << out;
  const size_t last = out.rfind("stream=legacy priority=");
  ASSERT_NE(last, std::string::npos) << out;
  EXPECT_EQ(out.compare(last, 25, "stream=legacy priority=0\n"), 0) << out;
  EXPECT_NE(out.find("stream=legacy priority=-5"), std::string::npos) << out;
}

// The shim asks MPS for below-normal priority for opportunistic processes (the variable is
// read when the driver connects to an MPS server); a value the user set is kept.
TEST_F(ComputeSim, ShimAsksMpsForLowPriorityForOpportunisticWork) {
  const auto rs = RunTogether({{{"GSLICE_CLASS", "opportunistic"}},
                               {{"GSLICE_CLASS", "guaranteed"}},
                               {{"GSLICE_CLASS", "opportunistic"}, {"CUDA_MPS_CLIENT_PRIORITY", "0"}}},
                              0.3, {}, /*direct=*/false);
  EXPECT_NE(rs[0].raw.find("mps_client_priority=1 "), std::string::npos) << rs[0].raw;
  EXPECT_NE(rs[1].raw.find("mps_client_priority=- "), std::string::npos) << rs[1].raw;
  EXPECT_NE(rs[2].raw.find("mps_client_priority=0 "), std::string::npos) << rs[2].raw;
}

}  // namespace

namespace {

// `gslice run --cap/--share/--class` sets the policy the shim's gate enforces.
TEST_F(ComputeSim, GsliceRunFlagsReachTheGate) {
  const std::string gslice = std::string(GSLICE_TEST_BIN_DIR) + "/gslice";
  const std::string worker = std::string(GSLICE_TEST_BIN_DIR) + "/compute_worker";
  std::map<std::string, std::string> env = {{"GSLICE_SIM_DEVICES", "2"}};
  if (!AsanFirst().empty()) env["LD_PRELOAD"] = GSLICE_TEST_ASAN_RUNTIME;
  const double start_at = NowMs() + 800;
  auto start = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = {"run", "--sim", "--memory", "1GiB"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.push_back("--");
    args.push_back(worker);
    for (auto& a : Job(start_at, 2.0)) args.push_back(a);
    return StartProgram(gslice, env, args);
  };
  // Side by side on the two simulated GPUs.
  const Worker free_worker = start({"--gpus", "0"});
  const Worker capped_worker = start({"--gpus", "1", "--cap", "40%"});
  const Result free = Wait(free_worker);
  const Result capped = Wait(capped_worker);
  ASSERT_GT(free.kernels, 150) << free.raw;
  const double share = static_cast<double>(capped.kernels) / static_cast<double>(free.kernels);
  EXPECT_LE(share, 0.40 + 0.07) << capped.kernels << " vs " << free.kernels;
  EXPECT_GE(share, 0.40 * 0.5) << capped.kernels << " vs " << free.kernels;
}

TEST_F(ComputeSim, GsliceRunRejectsBadComputeFlags) {
  const std::string gslice = std::string(GSLICE_TEST_BIN_DIR) + "/gslice";
  for (std::vector<std::string> flags : {std::vector<std::string>{"--cap", "150%"},
                                         std::vector<std::string>{"--share", "lots"},
                                         std::vector<std::string>{"--class", "best-effort"}}) {
    std::vector<std::string> args = {"run", "--sim", "--memory", "1GiB"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", "true"});
    const Result r = Wait(StartProgram(gslice, {}, args, /*stderr_too=*/true));
    EXPECT_EQ(r.kernels, -1);
    EXPECT_NE(r.raw.find(flags[0]), std::string::npos) << r.raw;
    EXPECT_NE(r.raw.find(flags[1]), std::string::npos) << r.raw;
  }
  // --compute, the old name of --cap, is read as the cap for one release, with a warning.
  const Result old = Wait(StartProgram(gslice, {}, {"run", "--sim", "--memory", "1GiB", "--compute", "150%", "--", "true"},
                                       /*stderr_too=*/true));
  EXPECT_NE(old.raw.find("--compute is now --cap"), std::string::npos) << old.raw;
  EXPECT_NE(old.raw.find("--cap 150%"), std::string::npos) << old.raw;
}

}  // namespace
