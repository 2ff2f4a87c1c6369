// gsliced's MPS control daemons on the simulator, with a stand-in control program
// (mps_control_standin.cc) and a stand-in CUDA program (mps_client_probe.cc): one daemon per
// GPU with private folders, started again when it dies, asked to quit when gsliced stops;
// `gslice run` of one user on MPS with its class's priority and its cap as a thread
// percentage; a second user's slice on that GPU time-sliced, told why, and never waiting; the
// user's slices of the other class time-sliced beside its server under mps_classes "one".
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <thread>

#include "sim_gsliced_fixture.h"

namespace gslice {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kAlice = 1000, kBob = 1001;

bool Eventually(const std::function<bool()>& done, std::chrono::seconds limit = std::chrono::seconds(15)) {
  for (const auto until = Clock::now() + limit; Clock::now() < until;) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

bool Alive(int pid) { return pid > 0 && kill(pid, 0) == 0; }

std::string Environ(int pid) {
  std::string env = testing::ReadAll("/proc/" + std::to_string(pid) + "/environ");
  for (char& c : env) c = c == '\0' ? '\n' : c;
  return env;
}

class MpsSim : public testing::SimGsliced {
 protected:
  MpsSim() : SimGsliced("mps") {}

  void SetUp() override {
    SimGsliced::SetUp();
    setenv("GSLICE_SIM_DEVICES", "2", 1);
    mps_ = dir_ + "/mps";
    chmod(dir_.c_str(), 0755);  // other users' programs run from here
  }
  void TearDown() override {
    if (pid_ > 0) {  // gsliced asks its daemons to quit
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    for (pid_t p : programs_) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
    // Daemons of a gsliced the test killed outright.
    std::error_code ec;
    for (const auto& gpu : std::filesystem::directory_iterator(mps_, ec)) {
      std::ifstream in(gpu.path() / "pipe" / "nvidia-cuda-mps-control.pid");
      int pid = 0;
      if (in >> pid && pid > 0) kill(pid, SIGKILL);
    }
    SimGsliced::TearDown();
    unsetenv("GSLICE_SIM_DEVICES");
  }

  void Configure(const std::string& mode, const std::string& control = GSLICE_TEST_MPS_CONTROL) {
    std::ofstream(dir_ + "/gsliced.toml", std::ios::app)
        << "mps = \"" << mode << "\"\nmps_control = \"" << control << "\"\nmps_directory = \"" << mps_ << "\"\n";
  }
  json Gpu(int index) {
    json gpus = Get("/v1/gpus")["gpus"];
    return gpus.is_array() && static_cast<int>(gpus.size()) > index ? gpus[index] : json();
  }
  std::string Uuid(int index) { return Gpu(index).value("uuid", std::string()); }
  std::string Substrate(int index) {
    json g = Gpu(index);
    return g.contains("sharing") ? g["sharing"].value("substrate", std::string()) : "";
  }
  std::string Pipe(int index) { return mps_ + "/" + Uuid(index) + "/pipe"; }
  int DaemonPid(int index) {
    std::ifstream in(Pipe(index) + "/nvidia-cuda-mps-control.pid");
    int pid = 0;
    in >> pid;
    return pid;
  }
  // Starts gsliced and lets other users' programs use its simulated node (a real node's
  // driver is everyone's).
  void StartForEveryone() {
    Start();
    chmod(sim_state_.c_str(), 0666);
  }
  bool Serving() {
    return Substrate(0) == "mps" && Substrate(1) == "mps" && Alive(DaemonPid(0)) && Alive(DaemonPid(1));
  }
  // The probe under `gslice run --sim` as `uid`, in the background; its output goes to `out`.
  pid_t RunInBackground(int uid, const std::string& flags, const std::string& out, const std::string& probe_flags) {
    const std::string command = "exec setpriv --reuid=" + std::to_string(uid) + " --regid=" + std::to_string(uid) +
                                " --clear-groups " + GSLICE_CLI + " run --sim " + flags + " -- " +
                                GSLICE_TEST_MPS_CLIENT + " " + probe_flags + " > " + out + " 2>&1";
    const pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    programs_.push_back(pid);
    return pid;
  }
  int Wait(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    std::erase(programs_, pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string Log() { return testing::ReadAll(dir_ + "/gsliced.log"); }

  std::string mps_;
  std::vector<pid_t> programs_;
};

mode_t ModeOf(const std::string& path, uid_t* owner = nullptr) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return 0;
  if (owner != nullptr) *owner = st.st_uid;
  return st.st_mode;
}

TEST_F(MpsSim, RunsOneDaemonPerGpuInFoldersOfItsOwn) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (gsliced gives each GPU's daemon to a uid)";
  Configure("on");
  Start();
  ASSERT_TRUE(Eventually([&] { return Serving(); })) << Get("/v1/gpus").dump(2) << Log();
  EXPECT_NE(DaemonPid(0), DaemonPid(1));
  uid_t owner = 99;
  EXPECT_EQ(ModeOf(mps_, &owner) & 07777, 0711u);
  EXPECT_EQ(owner, 0u);
  for (int i = 0; i < 2; ++i) {
    const std::string gpu = mps_ + "/" + Uuid(i);
    EXPECT_EQ(ModeOf(gpu) & 07777, 0711u) << gpu;
    EXPECT_EQ(ModeOf(gpu + "/pipe") & 07777, 0711u);
    EXPECT_EQ(ModeOf(gpu + "/log") & 07777, 0700u);
    // The daemon made its socket for anyone; nobody but root reaches it before a tenant.
    const mode_t socket = ModeOf(gpu + "/pipe/control", &owner);
    EXPECT_TRUE(S_ISSOCK(socket));
    EXPECT_EQ(socket & 07777, 0600u);
    EXPECT_EQ(owner, 0u);
    EXPECT_EQ(testing::ReadAll(gpu + "/tenant"), "none class pending\n");  // mps_classes "one"
    // Each daemon sees its GPU alone, and its own folders.
    const std::string env = Environ(DaemonPid(i));
    EXPECT_NE(env.find("CUDA_VISIBLE_DEVICES=" + Uuid(i) + "\n"), std::string::npos) << env;
    EXPECT_NE(env.find("CUDA_MPS_PIPE_DIRECTORY=" + gpu + "/pipe\n"), std::string::npos) << env;
    EXPECT_NE(env.find("CUDA_MPS_LOG_DIRECTORY=" + gpu + "/log\n"), std::string::npos) << env;
  }
}

TEST_F(MpsSim, StartsADaemonThatDiesAgain) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  Configure("on");
  Start();
  ASSERT_TRUE(Eventually([&] { return Serving(); })) << Log();
  const int first = DaemonPid(0);
  ASSERT_EQ(kill(first, SIGKILL), 0);
  ASSERT_TRUE(Eventually([&] {
    return Gpu(0)["sharing"]["mps_restarts"] == 1 && Substrate(0) == "mps" && DaemonPid(0) != first &&
           Alive(DaemonPid(0));
  })) << Gpu(0).dump(2) << Log();
  EXPECT_EQ(Gpu(1)["sharing"]["mps_restarts"], 0);
  EXPECT_NE(Log().find("has exited; starting it again"), std::string::npos) << Log();
  // The new daemon's socket is closed to others like the first one's.
  EXPECT_EQ(ModeOf(Pipe(0) + "/control") & 07777, 0600u);
}

TEST_F(MpsSim, AsksItsDaemonsToQuitWhenStopped) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  Configure("on");
  Start();
  ASSERT_TRUE(Eventually([&] { return Serving(); })) << Log();
  const int a = DaemonPid(0), b = DaemonPid(1);
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << Log();
  EXPECT_TRUE(Eventually([&] { return !Alive(a) && !Alive(b); }, std::chrono::seconds(5)));
  EXPECT_NE(Log().find("has quit (gsliced stops)"), std::string::npos) << Log();
}

TEST_F(MpsSim, ARestartedGslicedAdoptsTheRunningDaemonsAndTheirTenants) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (to run programs as other users)";
  Configure("on");
  StartForEveryone();
  ASSERT_TRUE(Eventually([&] { return Serving(); })) << Log();
  const std::string hold = dir_ + "/release", out = dir_ + "/alice.out";
  const pid_t alice = RunInBackground(kAlice, "--name alice --gpus 0 --memory 256MiB", out, "--hold-file " + hold);
  ASSERT_TRUE(Eventually([&] { return testing::ReadAll(out).find("mps: served") != std::string::npos; }))
      << testing::ReadAll(out) << Log();
  const int daemon = DaemonPid(0);
  // gsliced dies outright: its daemons and alice's program run on.
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  ASSERT_TRUE(Alive(daemon));
  Start();
  ASSERT_TRUE(Eventually([&] { return Substrate(0) == "mps" && Gpu(0)["sharing"]["mps_uid"] == kAlice; }))
      << Gpu(0).dump(2) << Log();
  EXPECT_EQ(DaemonPid(0), daemon);  // the same daemon, not a second one
  EXPECT_NE(Log().find("adopted its running MPS control daemon (pid " + std::to_string(daemon) + "), given to uid 1000"),
            std::string::npos)
      << Log();
  std::ofstream(hold) << "go";
  EXPECT_EQ(Wait(alice), 0) << testing::ReadAll(out);
}

// Stopped while a client still uses a daemon: gsliced closes it to everyone, so no program
// queues at a daemon that takes no new clients, and the next gsliced waits for it to end.
TEST_F(MpsSim, ADaemonStoppedWithClientsIsClosedAndWaitedFor) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (to run programs as other users)";
  Configure("on");
  StartForEveryone();
  ASSERT_TRUE(Eventually([&] { return Serving(); })) << Log();
  const std::string hold = dir_ + "/release", out = dir_ + "/alice.out";
  const pid_t alice = RunInBackground(kAlice, "--name alice --gpus 0 --memory 256MiB", out, "--hold-file " + hold);
  ASSERT_TRUE(Eventually([&] { return testing::ReadAll(out).find("mps: served") != std::string::npos; }))
      << testing::ReadAll(out) << Log();
  const int draining = DaemonPid(0);
  const std::string pipe = Pipe(0);  // named while gsliced answers
  kill(pid_, SIGTERM);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  EXPECT_NE(Log().find("1 program(s) still use its server; it ends when they exit"), std::string::npos) << Log();
  ASSERT_TRUE(Alive(draining));
  uid_t owner = 99;
  EXPECT_EQ(ModeOf(pipe + "/control", &owner) & 07777, 0600u);
  EXPECT_EQ(owner, 0u);
  // alice's next program cannot reach it, and runs without MPS instead of waiting.
  const std::string direct = dir_ + "/alice-direct.out";
  const int rc = std::system(("CUDA_MPS_PIPE_DIRECTORY=" + pipe + " setpriv --reuid=1000 --regid=1000 --clear-groups " +
                              GSLICE_TEST_MPS_CLIENT + " --wait-ms 2000 > " + direct + " 2>&1")
                                 .c_str());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << testing::ReadAll(direct);
  EXPECT_NE(testing::ReadAll(direct).find("mps: not reached (Permission denied)"), std::string::npos);

  // The next gsliced leaves it to its last client, then starts GPU 0's next daemon.
  Start();
  ASSERT_TRUE(Eventually([&] { return Substrate(1) == "mps"; })) << Log();
  EXPECT_EQ(Substrate(0), "time-sliced");
  EXPECT_NE(Gpu(0)["sharing"]["why"].get<std::string>().find("ends with its last clients"), std::string::npos)
      << Gpu(0).dump(2);
  EXPECT_EQ(DaemonPid(0), draining);
  std::ofstream(hold) << "go";
  EXPECT_EQ(Wait(alice), 0);
  ASSERT_TRUE(Eventually([&] { return Substrate(0) == "mps" && DaemonPid(0) != draining && Alive(DaemonPid(0)); }))
      << Gpu(0).dump(2) << Log();
  EXPECT_FALSE(Alive(draining));
}

TEST_F(MpsSim, OffNeverStartsOne) {
  Configure("off");
  Start();
  EXPECT_EQ(Substrate(0), "time-sliced");
  EXPECT_EQ(Gpu(0)["sharing"]["reason"], "mps-off");
  struct stat st {};
  EXPECT_NE(lstat(mps_.c_str(), &st), 0) << "mps = off made " << mps_;
}

TEST_F(MpsSim, AutoWithoutTheControlProgramSaysSoAndOnRefusesToStart) {
  Configure("auto", "/nonexistent/nvidia-cuda-mps-control");
  Start();
  EXPECT_EQ(Substrate(0), "time-sliced");
  EXPECT_EQ(Gpu(0)["sharing"]["reason"], "no-control");
  EXPECT_NE(Gpu(0)["sharing"]["why"].get<std::string>().find("/nonexistent/nvidia-cuda-mps-control"),
            std::string::npos);
  EXPECT_NE(Log().find("no MPS control program"), std::string::npos) << Log();
  kill(pid_, SIGTERM);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;

  const pid_t refused = testing::SpawnGsliced(GSLICED, dir_, {"--sim", "--set", "mps=on"}, true);
  int status = 0;
  waitpid(refused, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2);
  EXPECT_NE(Log().find("mps = \"on\": the MPS control program"), std::string::npos) << Log();
}

TEST_F(MpsSim, OneUsersSlicesRunOnMpsAtTheirClassesPriority) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (to run programs as other users)";
  Configure("on");
  // Both classes on one server, one after the other (under "one" the second would wait for
  // the first slice's entry to be gone).
  std::ofstream(dir_ + "/gsliced.toml", std::ios::app) << "mps_classes = \"mixed\"\n";
  StartForEveryone();
  ASSERT_TRUE(Eventually([&] { return Serving(); })) << Log();
  std::string out, err;
  ASSERT_EQ(Cli("run --sim --gpus 0 --memory 256MiB -- " + std::string(GSLICE_TEST_MPS_CLIENT), &out, &err,
                std::to_string(kAlice)),
            0)
      << out << err << Log();
  EXPECT_NE(out.find("uid=1000 pipe=" + Pipe(0) + " log=" + mps_ + "/" + Uuid(0) + "/log priority=0 threads=-"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("mps: served by server"), std::string::npos) << out;
  ASSERT_EQ(Cli("run --sim --gpus 0 --memory 256MiB --class opportunistic --cap 30% -- " +
                    std::string(GSLICE_TEST_MPS_CLIENT),
                &out, &err, std::to_string(kAlice)),
            0)
      << out << err;
  EXPECT_NE(out.find("uid=1000 pipe=" + Pipe(0)), std::string::npos) << out;
  EXPECT_NE(out.find("priority=1 threads=30"), std::string::npos) << out;
  EXPECT_NE(out.find("mps: served by server"), std::string::npos) << out;
  // A slice over both GPUs is time-sliced: a program reaches one daemon.
  ASSERT_EQ(Cli("run --sim --gpus 0,1 --memory 256MiB -- " + std::string(GSLICE_TEST_MPS_CLIENT), &out, &err,
                std::to_string(kAlice)),
            0)
      << out << err;
  EXPECT_NE(out.find("pipe=- "), std::string::npos) << out;
  EXPECT_NE(out.find("mps: none"), std::string::npos) << out;
}

TEST_F(MpsSim, ASecondUserOnTheGpuIsTimeSlicedAndNeverWaits) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (to run programs as other users)";
  Configure("on");
  StartForEveryone();
  ASSERT_TRUE(Eventually([&] { return Serving(); })) << Log();
  // alice's program holds GPU 0's MPS server.
  const std::string hold = dir_ + "/release-alice", alice_out = dir_ + "/alice.out";
  const pid_t alice = RunInBackground(kAlice, "--name alice --gpus 0 --memory 256MiB", alice_out,
                                      "--hold-file " + hold);
  ASSERT_TRUE(Eventually([&] { return testing::ReadAll(alice_out).find("mps: served") != std::string::npos; }))
      << testing::ReadAll(alice_out) << Log();

  // bob's slice on the same GPU gets no MPS, and says why.
  const std::string bob_out = dir_ + "/bob.out";
  const pid_t bob = RunInBackground(kBob, "--name bob --gpus 0 --memory 256MiB", bob_out, "--hold-file " + hold);
  ASSERT_TRUE(Eventually([&] { return testing::ReadAll(bob_out).find("mps: ") != std::string::npos; }))
      << testing::ReadAll(bob_out);
  EXPECT_NE(testing::ReadAll(bob_out).find("uid=1001 pipe=- "), std::string::npos) << testing::ReadAll(bob_out);
  EXPECT_NE(testing::ReadAll(bob_out).find("mps: none"), std::string::npos);
  json slice = Get("/v1/slices/bob");
  ASSERT_TRUE(slice.is_object()) << slice;
  EXPECT_EQ(slice["gpus"][0]["sharing"], "time-sliced");
  EXPECT_TRUE(slice["gpus"][0]["mps"].is_null());
  EXPECT_NE(slice["gpus"][0]["sharing_why"].get<std::string>().find("serves uid 1000"), std::string::npos) << slice;
  EXPECT_EQ(Get("/v1/slices/alice")["gpus"][0]["sharing"], "mps");
  EXPECT_EQ(Gpu(0)["sharing"]["mps_uid"], kAlice);
  // The daemon's socket is alice's, and only hers.
  uid_t owner = 0;
  EXPECT_EQ(ModeOf(Pipe(0) + "/control", &owner) & 07777, 0600u);
  EXPECT_EQ(owner, static_cast<uid_t>(kAlice));
  EXPECT_EQ(testing::ReadAll(mps_ + "/" + Uuid(0) + "/tenant"), "uid 1000 class guaranteed\n");
  // So do the metrics.
  auto metrics = Api().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("gslice_gpu_sharing{gpu=\"" + Uuid(0) + "\",substrate=\"mps\",reason=\"serving\"} 1"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("gslice_gpu_mps_uid{gpu=\"" + Uuid(0) + "\"} 1000"), std::string::npos);
  EXPECT_NE(metrics->body.find("gslice_slice_mps{gpu=\"" + Uuid(0) + "\",slice=\"bob\""), std::string::npos);
  for (const char* who : {"alice", "bob"}) {
    const size_t at = metrics->body.find(std::string("gslice_slice_mps{gpu=\"") + Uuid(0) + "\",slice=\"" + who + "\"");
    ASSERT_NE(at, std::string::npos) << who;
    const std::string line = metrics->body.substr(at, metrics->body.find('\n', at) - at);
    EXPECT_EQ(line.back(), std::string(who) == "alice" ? '1' : '0') << line;
  }
  // gslice ls says which is which.
  std::string ls, err;
  ASSERT_EQ(Cli("ls", &ls, &err), 0) << err;
  EXPECT_NE(ls.find("MPS (uid 1000, guaranteed)"), std::string::npos) << ls;
  EXPECT_NE(ls.find("time-sliced"), std::string::npos) << ls;

  // A program of bob's pointed at alice's daemon by hand cannot reach it: it runs without MPS
  // instead of waiting behind her program.
  std::string probe;
  const std::string direct = dir_ + "/bob-direct.out";
  const int rc = std::system(("CUDA_MPS_PIPE_DIRECTORY=" + Pipe(0) + " setpriv --reuid=1001 --regid=1001 --clear-groups " +
                              GSLICE_TEST_MPS_CLIENT + " --wait-ms 2000 > " + direct + " 2>&1")
                                 .c_str());
  probe = testing::ReadAll(direct);
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << probe;
  EXPECT_NE(probe.find("mps: not reached (Permission denied)"), std::string::npos) << probe;

  // Once alice's program and slice are gone, the GPU passes to bob's next program.
  std::ofstream(hold) << "go";
  EXPECT_EQ(Wait(alice), 0) << testing::ReadAll(alice_out);
  EXPECT_EQ(Wait(bob), 0) << testing::ReadAll(bob_out);
  std::string out;
  ASSERT_TRUE(Eventually([&] { return Gpu(0)["sharing"]["mps_uid"].is_null(); })) << Gpu(0).dump(2);
  ASSERT_EQ(Cli("run --sim --gpus 0 --memory 256MiB -- " + std::string(GSLICE_TEST_MPS_CLIENT), &out, &err,
                std::to_string(kBob)),
            0)
      << out << err;
  EXPECT_NE(out.find("uid=1001 pipe=" + Pipe(0)), std::string::npos) << out;
  EXPECT_NE(out.find("mps: served by server"), std::string::npos) << out;
  // Nobody ever waited at the stand-in daemon.
  const std::string control_log = testing::ReadAll(mps_ + "/" + Uuid(0) + "/log/control.log");
  EXPECT_EQ(control_log.find("WAITING"), std::string::npos) << control_log;
  EXPECT_NE(control_log.find("SERVED"), std::string::npos) << control_log;
}

// A fatal fault of one MPS client ends every client of its server (docs/compute.md, "Faults"):
// under mps_classes "one" a user's opportunistic program runs time-sliced beside the server
// its guaranteed program uses, and says why; once the guaranteed work is gone the server
// passes to the other class.
TEST_F(MpsSim, TheTenantsOtherClassIsTimeSlicedBesideItsServer) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (to run programs as other users)";
  Configure("on");
  StartForEveryone();
  ASSERT_TRUE(Eventually([&] { return Serving(); })) << Log();
  const std::string hold = dir_ + "/release", train_out = dir_ + "/train.out";
  const pid_t train = RunInBackground(kAlice, "--name train --gpus 0 --memory 256MiB", train_out, "--hold-file " + hold);
  ASSERT_TRUE(Eventually([&] { return testing::ReadAll(train_out).find("mps: served") != std::string::npos; }))
      << testing::ReadAll(train_out) << Log();
  EXPECT_EQ(testing::ReadAll(mps_ + "/" + Uuid(0) + "/tenant"), "uid 1000 class guaranteed\n");
  EXPECT_EQ(Gpu(0)["sharing"]["mps_uid"], kAlice);
  EXPECT_EQ(Gpu(0)["sharing"]["mps_class"], "guaranteed");
  EXPECT_EQ(Get("/v1/slices/train")["gpus"][0]["mps"]["class"], "guaranteed");

  // alice's opportunistic program on the same GPU: no MPS, and -v says why.
  std::string out, err;
  ASSERT_EQ(Cli("run --sim -v --name batch --gpus 0 --memory 256MiB --class opportunistic -- " +
                    std::string(GSLICE_TEST_MPS_CLIENT),
                &out, &err, std::to_string(kAlice)),
            0)
      << out << err << Log();
  EXPECT_NE(out.find("uid=1000 pipe=- "), std::string::npos) << out;
  EXPECT_NE(out.find("mps: none"), std::string::npos) << out;
  EXPECT_NE(err.find("sharing: time-sliced"), std::string::npos) << err;
  EXPECT_NE(err.find("its faults would end the guaranteed work on that server"), std::string::npos) << err;
  auto metrics = Api().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("gslice_gpu_mps_class{gpu=\"" + Uuid(0) + "\",class=\"guaranteed\"} 1"),
            std::string::npos)
      << metrics->body;
  std::string ls;
  ASSERT_EQ(Cli("ls", &ls, &err), 0) << err;
  EXPECT_NE(ls.find("MPS (uid 1000, guaranteed)"), std::string::npos) << ls;

  // Once the guaranteed program and its slice are gone, the next opportunistic one gets MPS.
  std::ofstream(hold) << "go";
  EXPECT_EQ(Wait(train), 0) << testing::ReadAll(train_out);
  ASSERT_TRUE(Eventually([&] { return Gpu(0)["sharing"]["mps_uid"].is_null(); })) << Gpu(0).dump(2);
  ASSERT_EQ(Cli("run --sim --gpus 0 --memory 256MiB --class opportunistic -- " + std::string(GSLICE_TEST_MPS_CLIENT),
                &out, &err, std::to_string(kAlice)),
            0)
      << out << err;
  EXPECT_NE(out.find("uid=1000 pipe=" + Pipe(0)), std::string::npos) << out;
  EXPECT_NE(out.find("priority=1"), std::string::npos) << out;
  EXPECT_NE(out.find("mps: served by server"), std::string::npos) << out;

  // A class change (gslice set --class) moves a slice at the next plan: the GPU's only slice
  // made opportunistic takes the server for that class.
  ASSERT_EQ(Cli("create infer --gpus 0 --memory 256MiB", &out, &err, std::to_string(kAlice)), 0) << err;
  const std::string tenant = mps_ + "/" + Uuid(0) + "/tenant";
  ASSERT_TRUE(Eventually([&] { return testing::ReadAll(tenant) == "uid 1000 class guaranteed\n"; }))
      << testing::ReadAll(tenant) << Log();
  ASSERT_EQ(Cli("set infer --class opportunistic", &out, &err, std::to_string(kAlice)), 0) << err;
  ASSERT_TRUE(Eventually([&] { return testing::ReadAll(tenant) == "uid 1000 class opportunistic\n"; }))
      << testing::ReadAll(tenant) << Log();
  json infer = Get("/v1/slices/infer");
  EXPECT_EQ(infer["gpus"][0]["sharing"], "mps") << infer.dump(2);
  EXPECT_EQ(infer["gpus"][0]["mps"]["class"], "opportunistic") << infer.dump(2);
}

// A program left on a GPU's MPS server after its slice is gone (one that never showed in the
// ledger) keeps the server from passing to the other class of its uid: the server cannot tell
// a client's class, so the class is pending until the program exits.
TEST_F(MpsSim, TheOtherClassGetsTheServerOnlyOnceItsClientsHaveExited) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (to run programs as other users)";
  Configure("on");
  StartForEveryone();
  ASSERT_TRUE(Eventually([&] { return Serving(); })) << Log();
  const std::string hold = dir_ + "/release", out = dir_ + "/train.out";
  const pid_t train = RunInBackground(kAlice, "--name train --gpus 0 --memory 256MiB", out, "--hold-file " + hold);
  ASSERT_TRUE(Eventually([&] { return testing::ReadAll(out).find("mps: served") != std::string::npos; }))
      << testing::ReadAll(out) << Log();
  std::string text, err;
  const std::string alice = std::to_string(kAlice), tenant = mps_ + "/" + Uuid(0) + "/tenant";
  ASSERT_EQ(Cli("create batch --gpus 0 --memory 256MiB --class opportunistic", &text, &err, alice), 0) << err;
  ASSERT_EQ(Cli("delete train", &text, &err), 0) << err;

  // The guaranteed program still uses the server: the class is pending, the opportunistic
  // slice waits time-sliced, and says why.
  ASSERT_TRUE(Eventually([&] { return testing::ReadAll(tenant) == "uid 1000 class pending\n"; }))
      << testing::ReadAll(tenant) << Log();
  json batch = Get("/v1/slices/batch");
  EXPECT_EQ(batch["gpus"][0]["sharing"], "time-sliced") << batch.dump(2);
  EXPECT_NE(batch["gpus"][0].value("sharing_why", "").find("cannot tell their class"), std::string::npos)
      << batch.dump(2);
  ASSERT_EQ(Cli("run --sim --name batch -- " + std::string(GSLICE_TEST_MPS_CLIENT) + " --wait-ms 2000", &text, &err,
                alice),
            0)
      << text << err;
  EXPECT_NE(text.find("mps: none"), std::string::npos) << text;

  // Once it has exited, the server is the opportunistic slices'.
  std::ofstream(hold) << "go";
  EXPECT_EQ(Wait(train), 0);
  ASSERT_TRUE(Eventually([&] { return testing::ReadAll(tenant) == "uid 1000 class opportunistic\n"; }))
      << testing::ReadAll(tenant) << Log();
  ASSERT_EQ(Cli("run --sim --name batch -- " + std::string(GSLICE_TEST_MPS_CLIENT) + " --wait-ms 2000", &text, &err,
                alice),
            0)
      << text << err;
  EXPECT_NE(text.find("mps: served by server"), std::string::npos) << text;
  EXPECT_NE(text.find("priority=1"), std::string::npos) << text;
}

// A program left on a GPU's MPS server after its slice is gone (one that never showed in the
// ledger) holds the GPU: the next uid's slice stays time-sliced until it exits, then gets MPS.
TEST_F(MpsSim, TheNextUidGetsTheGpuOnlyOnceTheServersClientsHaveExited) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (to run programs as other users)";
  Configure("on");
  StartForEveryone();
  ASSERT_TRUE(Eventually([&] { return Serving(); })) << Log();
  const std::string hold = dir_ + "/release", out = dir_ + "/alice.out";
  const pid_t alice = RunInBackground(kAlice, "--name alice --gpus 0 --memory 256MiB", out, "--hold-file " + hold);
  ASSERT_TRUE(Eventually([&] { return testing::ReadAll(out).find("mps: served") != std::string::npos; }))
      << testing::ReadAll(out) << Log();
  std::string text, err;
  ASSERT_EQ(Cli("create bobs --gpus 0 --memory 256MiB", &text, &err, std::to_string(kBob)), 0) << err;
  ASSERT_EQ(Cli("delete alice", &text, &err), 0) << err;

  // alice's program still uses the server: bob's slice waits for the GPU, time-sliced.
  ASSERT_TRUE(Eventually([&] {
    json b = Get("/v1/slices/bobs");
    return b.is_object() && b["gpus"][0].value("sharing_why", "").find("programs of uid 1000 still use") !=
                                std::string::npos;
  })) << Get("/v1/slices/bobs").dump(2) << Log();
  EXPECT_EQ(Get("/v1/slices/bobs")["gpus"][0]["sharing"], "time-sliced");
  uid_t owner = 99;
  EXPECT_EQ(ModeOf(Pipe(0) + "/control", &owner) & 07777, 0600u);
  EXPECT_EQ(owner, 0u) << "the GPU was given on while alice's program used its server";
  ASSERT_EQ(Cli("run --sim --name bobs -- " + std::string(GSLICE_TEST_MPS_CLIENT) + " --wait-ms 2000", &text, &err,
                std::to_string(kBob)),
            0)
      << text << err;
  EXPECT_NE(text.find("mps: none"), std::string::npos) << text;

  // Once it has exited, bob's slice takes the GPU's MPS.
  std::ofstream(hold) << "go";
  EXPECT_EQ(Wait(alice), 0);
  ASSERT_TRUE(Eventually([&] { return Get("/v1/slices/bobs")["gpus"][0]["sharing"] == "mps"; }))
      << Get("/v1/slices/bobs").dump(2) << Log();
  ASSERT_EQ(Cli("run --sim --name bobs -- " + std::string(GSLICE_TEST_MPS_CLIENT) + " --wait-ms 2000", &text, &err,
                std::to_string(kBob)),
            0)
      << text << err;
  EXPECT_NE(text.find("mps: served by server"), std::string::npos) << text;
  const std::string control_log = testing::ReadAll(mps_ + "/" + Uuid(0) + "/log/control.log");
  EXPECT_EQ(control_log.find("WAITING"), std::string::npos) << control_log;
}

// Under slice_reads = owner, whose slices hold a GPU's MPS shows only to that uid and to
// admins: another user sees that the GPU serves MPS, not for whom.
TEST_F(MpsSim, UnderOwnerReadsOnlyTheTenantSeesWhoseMpsItIs) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (to run programs as other users)";
  Configure("on");
  std::ofstream(dir_ + "/gsliced.toml", std::ios::app) << "slice_reads = \"owner\"\n";
  StartForEveryone();
  ASSERT_TRUE(Eventually([&] { return Serving(); })) << Log();
  std::string out, err;
  ASSERT_EQ(Cli("create alices-infer --gpus 0 --memory 256MiB", &out, &err, std::to_string(kAlice)), 0) << err;
  ASSERT_TRUE(Eventually([&] { return Gpu(0)["sharing"]["mps_uid"] == kAlice; })) << Gpu(0).dump(2) << Log();
  auto sharing_as = [&](int uid) {
    EXPECT_EQ(Cli("ls --json", &out, &err, std::to_string(uid)), 0) << err;
    json node = json::parse(out, nullptr, false);
    return node.is_object() ? node["gpus"][0]["sharing"] : json();
  };
  json bobs = sharing_as(kBob);
  EXPECT_EQ(bobs["substrate"], "mps") << bobs;
  EXPECT_TRUE(bobs["mps_uid"].is_null()) << bobs;
  EXPECT_EQ(bobs["mps_uid_hidden"], true) << bobs;
  EXPECT_EQ(bobs.dump().find("1000"), std::string::npos) << bobs;
  EXPECT_EQ(bobs.dump().find("alices-infer"), std::string::npos) << bobs;
  ASSERT_EQ(Cli("ls", &out, &err, std::to_string(kBob)), 0) << err;
  EXPECT_NE(out.find("MPS (another uid)"), std::string::npos) << out;
  EXPECT_EQ(out.find("alices-infer"), std::string::npos) << out;
  EXPECT_EQ(sharing_as(kAlice)["mps_uid"], kAlice);
}

}  // namespace
}  // namespace gslice
