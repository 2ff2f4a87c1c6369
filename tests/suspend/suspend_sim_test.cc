// Suspend, resume and move end to end on the simulated driver: real processes under the
// shim (resume gate), the suspend service in this process driving the sim's checkpoint API,
// the node ledger and the suspend board in unique /dev/shm files. Covers idle reclaim with
// transparent resume, memory preemption (and a clean out-of-memory when it cannot help),
// move between GPUs, and the failures: checkpoint and restore failing, a process exiting
// while suspended, the service restarting mid-suspend.
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "gslice/ledger.h"
#include "gslice/nvml_subset.h"
#include "gslice/suspend/service.h"
#include "scoped_path.h"
#include "shim_env.h"

namespace gslice::suspend {
namespace {

using test::ReadLine;
using test::ShimEnv;
constexpr uint64_t MiB = 1ULL << 20;

std::string ProcessBase() { return "/dev/shm/gslice-test-" + std::to_string(getpid()) + "-suspend"; }

// The simulated node's file, removed when the test program ends (also after a failure).
class SimStateFile : public ::testing::Environment {
 public:
  void TearDown() override { unlink((ProcessBase() + "-sim").c_str()); }
};
[[maybe_unused]] const ::testing::Environment* const kSimStateFile =
    ::testing::AddGlobalTestEnvironment(new SimStateFile);

// One simulated node per test process, shared by this process (the service's driver and
// NVML) and every child.
void UseProcessSimState() {
  setenv("GSLICE_SIM_STATE", (ProcessBase() + "-sim").c_str(), 1);
  setenv("GSLICE_SIM_DEVICES", "2", 1);
  setenv("GSLICE_SIM_MEMORY", "1GiB", 1);
}

// The sim's NVML, dlopened in this process.
struct Nvml {
  void* h = nullptr;
  Nvml() {
    h = dlopen(GSLICE_TEST_SIM_DIR "/libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h) reinterpret_cast<nvmlReturn_t (*)()>(dlsym(h, "nvmlInit_v2"))();
  }
  nvmlDevice_t Dev(unsigned i) {
    nvmlDevice_t d{};
    reinterpret_cast<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(dlsym(h, "nvmlDeviceGetHandleByIndex_v2"))(i, &d);
    return d;
  }
  GpuInfo Info(unsigned i) {
    GpuInfo g;
    char buf[96] = {};
    nvmlDevice_t d = Dev(i);
    reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>(dlsym(h, "nvmlDeviceGetUUID"))(d, buf, sizeof buf);
    g.uuid = buf;
    reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>(dlsym(h, "nvmlDeviceGetName"))(d, buf, sizeof buf);
    g.name = buf;
    nvmlMemory_t m{};
    reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(dlsym(h, "nvmlDeviceGetMemoryInfo"))(d, &m);
    g.free_bytes = m.free;
    return g;
  }
};

// A suspend_client under the shim.
class Client {
 public:
  Client(const ShimEnv& env, uint64_t bytes, unsigned pattern) {
    pid_ = env.Start({GSLICE_TEST_SUSPEND_CLIENT, std::to_string(bytes), std::to_string(pattern)}, &in_, &out_);
    ready_ = ReadLine(out_, 30);
  }
  ~Client() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(in_);
    close(out_);
  }
  int pid() const { return pid_; }
  bool ready() const { return ready_ == "ready " + std::to_string(pid_); }
  void Send(const std::string& cmd) {
    std::string l = cmd + "\n";
    ssize_t n = write(in_, l.data(), l.size());
    (void)n;
  }
  std::string Read(double timeout_s = 30) { return ReadLine(out_, timeout_s); }
  std::string Ask(const std::string& cmd, double timeout_s = 30) {
    Send(cmd);
    return Read(timeout_s);
  }
  int Exit() {
    Send("exit");
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  void Kill() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  int pid_ = -1, in_ = -1, out_ = -1;
  std::string ready_;
};

class SuspendSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    UseProcessSimState();
    tag_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ledger_path_ = ProcessBase() + "-" + tag_ + "-ledger";
    // The board as gsliced (or the device plugin) makes it at boot, before any process runs.
    board_ = std::make_unique<test::ScopedPath>("suspend-" + tag_ + "-board");
    board_path_ = board_->path();
    std::filesystem::remove_all(ledger_path_);
    std::string error;
    ASSERT_TRUE(CreateSuspendBoard(board_path_.c_str(), &error)) << error;
    ASSERT_EQ(ledger_.Open(ledger_path_.c_str()), LedgerError::kOk);
    nvml_ = std::make_unique<Nvml>();  // after the sim state is chosen
  }
  void TearDown() override {
    services_.clear();
    clients_.clear();
    for (auto& e : envs_) {
      // The sim state and ledger are shared: keep ShimEnv from removing them.
      e->vars["GSLICE_SIM_STATE"] = ProcessBase() + "-none";
      e->vars["GSLICE_LEDGER"] = ProcessBase() + "-none";
    }
    envs_.clear();
    std::filesystem::remove_all(ledger_path_);
    board_.reset();
  }

  const ShimEnv& Env(const std::string& slice, const std::string& memory, bool opportunistic) {
    if (opportunistic) {
      int index = -1;
      EXPECT_EQ(ledger_.FindOrCreateSlice(slice.c_str(), SliceClass::kOpportunistic, 0, &index), LedgerError::kOk);
    }
    envs_.push_back(std::make_unique<ShimEnv>(tag_ + "-" + slice));
    ShimEnv& e = *envs_.back();
    e.vars["GSLICE_SIM_STATE"] = ProcessBase() + "-sim";
    e.vars["GSLICE_SIM_DEVICES"] = "2";
    e.vars["GSLICE_SIM_MEMORY"] = "1GiB";
    e.vars["GSLICE_LEDGER"] = ledger_path_;
    e.vars["GSLICE_SUSPEND_BOARD"] = board_path_;
    e.vars["GSLICE_SLICE"] = slice;
    e.vars["GSLICE_MEMORY"] = memory;
    e.vars["GSLICE_CLASS"] = opportunistic ? "opportunistic" : "guaranteed";
    return e;
  }

  Client& Start(const ShimEnv& env, uint64_t bytes, unsigned pattern) {
    clients_.push_back(std::make_unique<Client>(env, bytes, pattern));
    return *clients_.back();
  }

  SuspendService& Service(std::map<std::string, int64_t> idle = {}) {
    ServiceOptions o;
    o.ledger_path = ledger_path_;
    o.board_path = board_path_;
    o.driver_library = GSLICE_TEST_SIM_DIR "/libcuda.so.1";
    o.nvml_library = GSLICE_TEST_SIM_DIR "/libnvidia-ml.so.1";
    o.tick_ms = 50;
    o.host.reserve_bytes = 0;
    o.controller.resume_margin_bytes = 0;
    o.controller.preemption_quiet_ns = 300'000'000;
    o.idle_timeout_s = [idle](const std::string& slice) -> int64_t {
      auto it = idle.find(slice);
      return it == idle.end() ? 0 : it->second;
    };
    std::string error;
    auto s = SuspendService::Create(o, &error);
    EXPECT_NE(s, nullptr) << error;
    services_.push_back(std::move(s));
    return *services_.back();
  }

  // Waits until the process reaches `want` in `service` (at most timeout_s).
  bool WaitState(SuspendService& service, int pid, State want, double timeout_s = 20) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < end) {
      auto st = service.manager().Get(pid);
      if (st && st->state == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  std::string tag_, ledger_path_, board_path_;
  std::unique_ptr<test::ScopedPath> board_;
  Ledger ledger_;
  std::unique_ptr<Nvml> nvml_;
  std::vector<std::unique_ptr<ShimEnv>> envs_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<std::unique_ptr<SuspendService>> services_;
};

TEST_F(SuspendSimTest, IdleProcessIsReclaimedAndResumedByItsNextCall) {
  const ShimEnv& env = Env("notebook", "512MiB", false);
  SuspendService& service = Service({{"notebook", 1}});
  Client& c = Start(env, 200 * MiB, 0x5eed);
  ASSERT_TRUE(c.ready());
  const uint64_t free_holding = nvml_->Info(0).free_bytes;
  service.Start();
  // No calls for a second: the service suspends it and its memory leaves the GPU.
  ASSERT_TRUE(WaitState(service, c.pid(), State::kSuspended));
  EXPECT_EQ(service.manager().Get(c.pid())->cause, Cause::kIdle);
  EXPECT_GE(nvml_->Info(0).free_bytes, free_holding + 200 * MiB);
  EXPECT_GE(service.manager().budget().held_bytes(), 200 * MiB);
  // Its next call waits in the shim, the service resumes it, and the call succeeds.
  const std::string reply = c.Ask("call");
  ASSERT_EQ(reply.rfind("called ", 0), 0u) << reply;
  EXPECT_NE(reply.find("CUDA_SUCCESS"), std::string::npos) << reply;
  auto st = service.manager().Get(c.pid());
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->state, State::kRunning);
  EXPECT_GE(st->resumes, 1u);
  EXPECT_EQ(service.manager().budget().held_bytes(), 0u);
  EXPECT_EQ(c.Ask("verify"), "verified ok");
  // Idle again: reclaimed again, and this time a synchronisation is the call that wakes it.
  ASSERT_TRUE(WaitState(service, c.pid(), State::kSuspended));
  const uint64_t resumes_before = service.manager().Get(c.pid())->resumes;
  const std::string synced = c.Ask("sync");
  EXPECT_EQ(synced.rfind("synced ", 0), 0u) << synced;
  EXPECT_NE(synced.find("CUDA_SUCCESS"), std::string::npos) << synced;
  EXPECT_EQ(service.manager().Get(c.pid())->resumes, resumes_before + 1);
  EXPECT_EQ(c.Exit(), 0);
}

// A suspended process's next call resumes it whatever the entry point: a hooked call that
// does no GPU work (cuMemFree), functions the shim only forwards (cuMemHostAlloc, a generated
// trampoline), and both as cuGetProcAddress handed them out. Without the gate such a call
// blocks in the driver's checkpoint lock until something else resumes the process: each
// reply is bounded by a timeout.
TEST_F(SuspendSimTest, EveryEntryPointOfAnIdleSuspendedProcessResumesIt) {
  const ShimEnv& env = Env("notebook", "512MiB", false);
  SuspendService& service = Service({{"notebook", 1}});
  Client& c = Start(env, 16 * MiB, 0x5eed);
  ASSERT_TRUE(c.ready());
  ASSERT_EQ(c.Ask("alloc 4096"), "alloc CUDA_SUCCESS");
  ASSERT_EQ(c.Ask("alloc 4096"), "alloc CUDA_SUCCESS");
  service.Start();
  const std::pair<const char*, const char*> calls[] = {
      {"freeone", "freedone "}, {"hostalloc", "hostalloc "}, {"pa-freeone", "freedone "}, {"pa-hostalloc", "hostalloc "}};
  for (const auto& [cmd, reply_word] : calls) {
    ASSERT_TRUE(WaitState(service, c.pid(), State::kSuspended)) << cmd;
    const uint64_t resumes_before = service.manager().Get(c.pid())->resumes;
    const std::string reply = c.Ask(cmd, 15);
    ASSERT_EQ(reply.rfind(reply_word, 0), 0u) << cmd << " did not return: '" << reply << "'";
    EXPECT_NE(reply.find("CUDA_SUCCESS"), std::string::npos) << cmd << ": " << reply;
    auto st = service.manager().Get(c.pid());
    ASSERT_TRUE(st.has_value());
    EXPECT_EQ(st->state, State::kRunning) << cmd;
    EXPECT_EQ(st->resumes, resumes_before + 1) << cmd;
  }
  EXPECT_EQ(c.Ask("verify"), "verified ok");
  EXPECT_EQ(c.Exit(), 0);
}

TEST_F(SuspendSimTest, PreemptionSuspendsOpportunisticWorkAndResumesItLater) {
  const ShimEnv& opp_env = Env("batch", "1GiB", true);
  const ShimEnv& gua_env = Env("serving", "1GiB", false);
  SuspendService& service = Service();
  Client& opp = Start(opp_env, 600 * MiB, 0xba7c);
  ASSERT_TRUE(opp.ready());
  Client& gua = Start(gua_env, 16 * MiB, 0x5e7e);
  ASSERT_TRUE(gua.ready());
  service.Start();
  // 600 + 16 + 700 MiB do not fit a 1 GiB GPU: the driver refuses, the shim asks the
  // service, the opportunistic process is suspended and the allocation goes through.
  EXPECT_EQ(gua.Ask("alloc " + std::to_string(700 * MiB)), "alloc CUDA_SUCCESS");
  auto st = service.manager().Get(opp.pid());
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->state, State::kSuspended);
  EXPECT_EQ(st->cause, Cause::kPreemption);
  // The guaranteed work frees its memory: the opportunistic process comes back, intact.
  EXPECT_EQ(gua.Ask("free"), "freed");
  ASSERT_TRUE(WaitState(service, opp.pid(), State::kRunning));
  EXPECT_EQ(opp.Ask("verify"), "verified ok");
  EXPECT_EQ(gua.Exit(), 0);
  EXPECT_EQ(opp.Exit(), 0);
}

TEST_F(SuspendSimTest, GuaranteedAllocationThatCannotBeSatisfiedGetsACleanOutOfMemory) {
  const ShimEnv& other_env = Env("other", "1GiB", false);
  const ShimEnv& gua_env = Env("serving", "1GiB", false);
  SuspendService& service = Service();
  Client& other = Start(other_env, 600 * MiB, 0x1);
  ASSERT_TRUE(other.ready());
  Client& gua = Start(gua_env, 16 * MiB, 0x2);
  ASSERT_TRUE(gua.ready());
  service.Start();
  // Only guaranteed work holds the GPU: nothing may be preempted.
  EXPECT_EQ(gua.Ask("alloc " + std::to_string(700 * MiB)), "alloc CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(service.manager().Get(other.pid())->state, State::kRunning);
  // The program carries on after its out-of-memory.
  EXPECT_EQ(gua.Ask("alloc " + std::to_string(100 * MiB)), "alloc CUDA_SUCCESS");
  EXPECT_EQ(gua.Ask("verify"), "verified ok");
}

TEST_F(SuspendSimTest, FailedCheckpointLeavesTheProcessRunning) {
  const ShimEnv& env = Env("job", "512MiB", false);
  SuspendService& service = Service();
  Client& c = Start(env, 100 * MiB, 0xf00d);
  ASSERT_TRUE(c.ready());
  service.Tick();
  setenv("GSLICE_SIM_FAIL_CHECKPOINT", "1", 1);
  Outcome o = service.Suspend(c.pid());
  unsetenv("GSLICE_SIM_FAIL_CHECKPOINT");
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.state, State::kRunning);
  EXPECT_NE(o.reason.find("keeps running"), std::string::npos) << o.reason;
  // Its calls pass at once (the gate is open, the driver unlocked).
  const std::string reply = c.Ask("call", 10);
  EXPECT_NE(reply.find("CUDA_SUCCESS"), std::string::npos) << reply;
  EXPECT_EQ(service.manager().budget().in_flight_bytes(), 0u);
  // And it can be suspended once the driver cooperates.
  EXPECT_TRUE(service.Suspend(c.pid()).ok);
  EXPECT_TRUE(service.Resume(c.pid()).ok);
  EXPECT_EQ(c.Ask("verify"), "verified ok");
}

TEST_F(SuspendSimTest, FailedRestoreStaysSuspendedAndResumable) {
  const ShimEnv& env = Env("job", "512MiB", false);
  SuspendService& service = Service();
  Client& c = Start(env, 100 * MiB, 0xabcd);
  ASSERT_TRUE(c.ready());
  ASSERT_TRUE(service.Suspend(c.pid()).ok);
  setenv("GSLICE_SIM_FAIL_RESTORE", "1", 1);
  Outcome o = service.Resume(c.pid());
  unsetenv("GSLICE_SIM_FAIL_RESTORE");
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.state, State::kSuspended);
  EXPECT_NE(o.reason.find("can be resumed"), std::string::npos) << o.reason;
  // A call waits at the gate meanwhile (no answer yet)...
  c.Send("call");
  EXPECT_EQ(c.Read(0.5), "");
  // ...and completes once a resume succeeds.
  ASSERT_TRUE(service.Resume(c.pid()).ok);
  const std::string reply = c.Read();
  EXPECT_NE(reply.find("CUDA_SUCCESS"), std::string::npos) << reply;
  EXPECT_EQ(c.Ask("verify"), "verified ok");
}

TEST_F(SuspendSimTest, ProcessExitingWhileSuspendedIsForgottenAndItsRamReleased) {
  const ShimEnv& env = Env("job", "512MiB", false);
  SuspendService& service = Service();
  Client& c = Start(env, 150 * MiB, 0x77);
  ASSERT_TRUE(c.ready());
  const int pid = c.pid();
  ASSERT_TRUE(service.Suspend(pid).ok);
  EXPECT_GE(service.manager().budget().held_bytes(), 150 * MiB);
  c.Kill();
  service.Tick();
  EXPECT_FALSE(service.manager().Get(pid).has_value());
  EXPECT_EQ(service.manager().budget().held_bytes(), 0u);
  EXPECT_FALSE(service.Resume(pid).ok);
}

TEST_F(SuspendSimTest, RestartedServiceAdoptsSuspendedAndLockedProcesses) {
  const ShimEnv& env = Env("job", "512MiB", false);
  Client& a = Start(env, 100 * MiB, 0xa);
  ASSERT_TRUE(a.ready());
  Client& b = Start(env, 100 * MiB, 0xb);
  ASSERT_TRUE(b.ready());
  {
    SuspendService& first = Service();
    ASSERT_TRUE(first.Suspend(a.pid()).ok);
    services_.clear();  // the service goes away with `a` suspended
  }
  // `b` is caught between lock and checkpoint, as if the service died there.
  std::string error;
  auto raw = DlopenCheckpointDriver::Open(GSLICE_TEST_SIM_DIR "/libcuda.so.1", &error);
  ASSERT_NE(raw, nullptr) << error;
  ASSERT_EQ(raw->Lock(b.pid(), 5000), CUDA_SUCCESS);

  SuspendService& second = Service();
  second.Tick();
  auto sa = second.manager().Get(a.pid());
  ASSERT_TRUE(sa.has_value());
  EXPECT_EQ(sa->state, State::kSuspended);
  EXPECT_GE(second.manager().budget().held_bytes(), 100 * MiB);
  auto sb = second.manager().Get(b.pid());
  ASSERT_TRUE(sb.has_value());
  EXPECT_EQ(sb->state, State::kRunning);  // unlocked: it runs on
  EXPECT_NE(b.Ask("call", 10).find("CUDA_SUCCESS"), std::string::npos);
  // The adopted suspended process resumes through the new service.
  a.Send("call");
  EXPECT_EQ(a.Read(0.5), "");
  ASSERT_TRUE(second.Resume(a.pid()).ok);
  EXPECT_NE(a.Read().find("CUDA_SUCCESS"), std::string::npos);
  EXPECT_EQ(a.Ask("verify"), "verified ok");
  EXPECT_EQ(b.Ask("verify"), "verified ok");
}

TEST_F(SuspendSimTest, MoveRestoresTheProcessOnTheOtherGpu) {
  const ShimEnv& env = Env("job", "512MiB", false);
  SuspendService& service = Service();
  Client& c = Start(env, 200 * MiB, 0x600d);
  ASSERT_TRUE(c.ready());
  service.Tick();
  const GpuInfo gpu0 = nvml_->Info(0);
  Outcome running = service.Move(c.pid(), gpu0, nvml_->Info(1));
  EXPECT_FALSE(running.ok);  // a running process is suspended first
  EXPECT_NE(running.reason.find("suspend it first"), std::string::npos) << running.reason;
  ASSERT_TRUE(service.Suspend(c.pid()).ok);
  const GpuInfo before0 = nvml_->Info(0), before1 = nvml_->Info(1);
  ASSERT_EQ(before0.name, before1.name);
  Outcome o = service.Move(c.pid(), gpu0, before1);
  ASSERT_TRUE(o.ok) << o.reason;
  EXPECT_EQ(service.manager().Get(c.pid())->info.gpu_uuid, before1.uuid);
  EXPECT_LE(nvml_->Info(1).free_bytes + 200 * MiB, before1.free_bytes);
  EXPECT_EQ(nvml_->Info(0).free_bytes, before0.free_bytes);
  EXPECT_EQ(c.Ask("verify"), "verified ok");
  EXPECT_NE(c.Ask("call").find("CUDA_SUCCESS"), std::string::npos);
}

TEST_F(SuspendSimTest, GsliceMoveMovesARunningProcessThroughTheService) {
  const ShimEnv& env = Env("job", "512MiB", false);
  SuspendService& service = Service();
  Client& c = Start(env, 120 * MiB, 0x3c3c);
  ASSERT_TRUE(c.ready());
  service.Start();
  // gslice move finds the process through the gates the service makes when it takes it up.
  ASSERT_TRUE(WaitState(service, c.pid(), State::kRunning));
  const GpuInfo before1 = nvml_->Info(1);
  // A GPU that does not exist: refused, and the process stays (running) where it was.
  test::ChildResult bad = env.Run({test::GsliceBinary(), "move", std::to_string(c.pid()), "--to",
                                   "GPU-00000000-0000-0000-0000-0000000000ff"}, 60);
  EXPECT_EQ(bad.exit_code, 1) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("refused"), std::string::npos) << bad.err;
  EXPECT_EQ(service.manager().Get(c.pid())->state, State::kRunning);
  // The other GPU: suspended, restored there, running again.
  test::ChildResult ok = env.Run({test::GsliceBinary(), "move", std::to_string(c.pid()), "--to", before1.uuid}, 60);
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_NE(ok.out.find("runs on " + before1.uuid), std::string::npos) << ok.out;
  auto st = service.manager().Get(c.pid());
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->state, State::kRunning);
  EXPECT_EQ(st->info.gpu_uuid, before1.uuid);
  EXPECT_LE(nvml_->Info(1).free_bytes + 120 * MiB, before1.free_bytes);
  EXPECT_EQ(c.Ask("verify"), "verified ok");
  // Bad input is refused before anything is asked of the service.
  test::ChildResult usage = env.Run({test::GsliceBinary(), "move", "notapid", "--to", "1"}, 30);
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_NE(usage.err.find("by pid"), std::string::npos) << usage.err;
}

}  // namespace
}  // namespace gslice::suspend
