// The real gsliced binary on the simulated driver: socket permissions, the TCP token,
// hostile requests at the HTTP level, metrics through promtool, restart with a SIGTERM and
// after a SIGKILL, a second daemon on the same socket, and config errors.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "daemon_test_support.h"
#include "gslice/ledger.h"

namespace gslice {
namespace {

using nlohmann::json;
using testing::FreePort;
using testing::ReadAll;
using testing::AwaitGsliced;
using testing::SpawnGsliced;

class GslicedProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::UniquePath("gsliced", "/tmp");
    ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0);
    socket_ = dir_ + "/api.sock";
    port_ = FreePort();
    token_ = "test-token-0123456789abcdef";
    std::ofstream(dir_ + "/token") << token_ << "\n";
    chmod((dir_ + "/token").c_str(), 0600);
    std::ofstream(dir_ + "/gsliced.toml")
        << "socket = \"" << socket_ << "\"\n"
        << "database = \"" << dir_ << "/state/gsliced.db\"\n"
        << "ledger = \"" << ledger_ << "\"\n"
        << "nvml_library = \"" << GSLICE_SIM_NVML << "\"\n"
        << "tcp = \"127.0.0.1:" << port_ << "\"\n"
        << "token_file = \"" << dir_ << "/token\"\n"
        << "sample_interval_ms = 200\n"
        << "max_body_bytes = \"16KiB\"\n";
    setenv("GSLICE_SIM_STATE", sim_state_.c_str(), 1);
    setenv("GSLICE_SUSPEND_BOARD", board_.c_str(), 1);
  }
  void TearDown() override {
    Stop(SIGTERM);
    std::system(("rm -rf " + dir_).c_str());
    std::filesystem::remove_all(ledger_);
    unlink(sim_state_.c_str());
    std::error_code ec;
    std::filesystem::remove_all(board_, ec);  // the suspend board gsliced made: a directory
  }

  // Starts gsliced and waits until its socket answers.
  void Start(std::vector<std::string> extra = {}) {
    pid_ = SpawnGsliced(GSLICED, dir_, extra);
    ASSERT_TRUE(AwaitGsliced(&pid_, dir_, [&] {
      auto r = Unix().Get("/healthz");
      return r && r->status == 200;
    }));
  }
  int Stop(int sig) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }
  httplib::Client Unix() {
    httplib::Client c(socket_);
    c.set_address_family(AF_UNIX);
    c.set_read_timeout(10, 0);
    return c;
  }
  httplib::Client Tcp() {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10, 0);
    return c;
  }
  std::string Slices() {
    auto r = Unix().Get("/v1/slices");
    EXPECT_TRUE(r && r->status == 200);
    json j = json::parse(r ? r->body : "{}", nullptr, false);
    for (json& s : j["slices"]) s.erase("processes");
    return j.dump();
  }

  std::string dir_, socket_, token_;
  std::string ledger_ = testing::UniquePath("ledger");
  std::string sim_state_ = testing::UniquePath("sim");
  std::string board_ = testing::UniquePath("suspend-board");
  int port_ = 0;
  pid_t pid_ = -1;
};

TEST_F(GslicedProcess, SocketPermissionsDecideWhoMayCall) {
  Start();
  struct stat st {};
  ASSERT_EQ(stat(socket_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  auto r = Unix().Get("/v1/gpus");
  ASSERT_TRUE(r);
  json gpus = json::parse(r->body);
  ASSERT_EQ(gpus["gpus"].size(), 2u);  // the sim's default
  EXPECT_EQ(gpus["gpus"][0]["memory_total_bytes"], 16 * testing::kGiB);
  EXPECT_EQ(gpus["gpus"][0]["uuid"].get<std::string>().rfind("GPU-", 0), 0u);
}

TEST_F(GslicedProcess, TcpNeedsTheTokenExceptForTheDashboardFiles) {
  Start();
  auto page = Tcp().Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
  auto none = Tcp().Get("/v1/slices");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_NE(none->body.find("bearer token"), std::string::npos);
  auto wrong = Tcp().Get("/v1/slices", {{"Authorization", "Bearer " + std::string(token_.size(), 'x')}});
  EXPECT_EQ(wrong->status, 401);
  auto metrics = Tcp().Get("/metrics");
  EXPECT_EQ(metrics->status, 401);
  auto create = Tcp().Post("/v1/slices", {{"Authorization", "Bearer nope"}},
                           R"({"user":"u","gpus":["0"],"memory":"1GiB"})", "application/json");
  EXPECT_EQ(create->status, 401);
  EXPECT_EQ(Slices(), R"({"slices":[]})");
  auto ok = Tcp().Get("/v1/slices", {{"Authorization", "Bearer " + token_}});
  EXPECT_EQ(ok->status, 200);
}

TEST_F(GslicedProcess, HostileHttpGetsA4xxAndChangesNothing) {
  Start();
  auto created = Unix().Post("/v1/slices", R"({"name":"keep","user":"u","gpus":["0"],"memory":"1GiB"})",
                             "application/json");
  ASSERT_EQ(created->status, 201) << created->body;
  const std::string before = Slices();
  // A body over max_body_bytes.
  std::string huge = R"({"name":"big","user":"u","gpus":["0"],"memory":"1GiB","pad":")" +
                     std::string(1 << 20, 'x') + "\"}";
  auto r = Unix().Post("/v1/slices", huge, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(r->body.find("max_body_bytes"), std::string::npos) << r->body;
  // Encoded traversal reaches the router decoded, and is refused there.
  r = Unix().Get("/v1/slices/..%2F..%2Fetc%2Fpasswd");
  ASSERT_TRUE(r);
  EXPECT_GE(r->status, 400);
  EXPECT_LT(r->status, 500);
  r = Unix().Delete("/v1/slices/%2e%2e");
  EXPECT_GE(r->status, 400);
  EXPECT_LT(r->status, 500);
  r = Unix().Put("/v1/slices/keep", "{}", "application/json");
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "GET, PATCH, DELETE");
  r = Unix().Post("/v1/slices", "\x01\x02garbage", "application/json");
  EXPECT_EQ(r->status, 400);
  // Raw bytes that are not HTTP at all.
  {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", socket_.c_str());
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const char junk[] = "\x16\x03\x01 not http at all\r\n\r\n";
    ASSERT_GT(write(fd, junk, sizeof junk - 1), 0);
    char buf[512] = {};
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n > 0) {
      EXPECT_NE(std::string(buf).find(" 400 "), std::string::npos) << buf;
    }
  }
  EXPECT_EQ(Slices(), before);
  auto health = Unix().Get("/healthz");
  EXPECT_EQ(health->status, 200);
}

TEST_F(GslicedProcess, MetricsPassPromtool) {
  Start();
  Unix().Post("/v1/slices", R"({"name":"a","user":"alice","project":"default","gpus":["0","1"],"memory":"2GiB","compute_share":"25%"})",
              "application/json");
  Unix().Post("/v1/slices", R"({"name":"b","user":"bob","class":"opportunistic","gpus":["1"],"memory":"20GiB"})",
              "application/json");  // refused: more than the GPU
  auto r = Unix().Get("/metrics");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/plain; version=0.0.4"), std::string::npos);
  std::string path = dir_ + "/metrics.txt";
  std::ofstream(path) << r->body;
  std::string out = dir_ + "/promtool.txt";
  int rc = std::system(("promtool check metrics < " + path + " > " + out + " 2>&1").c_str());
  EXPECT_EQ(rc, 0) << ReadAll(out) << "\n" << r->body;
  EXPECT_EQ(ReadAll(out), "") << "promtool has remarks";
  for (const char* want : {"gslice_slice_memory_limit_bytes{gpu=\"GPU-", "slice=\"a\",user=\"alice\",project=\"default\"",
                           "gslice_gpu_memory_total_bytes{gpu=\"GPU-", "gslice_slice_compute_share_ratio{",
                           "} 0.25\n", "gslice_admission_refusals_total 1\n", "gslice_api_requests_total{code=\"201\"} 1\n",
                           "gslice_api_requests_total{code=\"400\"} 1\n"}) {
    EXPECT_NE(r->body.find(want), std::string::npos) << want << "\n" << r->body;
  }
}

TEST_F(GslicedProcess, RestartKeepsEverythingAndASecondDaemonIsRefused) {
  Start();
  Unix().Post("/v1/projects", R"({"name":"ml","memory_quota":"8GiB","priority":2})", "application/json");
  auto c = Unix().Post("/v1/slices", R"({"name":"s1","user":"alice","project":"ml","gpus":["0"],"memory":"4GiB","compute_share":0.5})",
                       "application/json");
  ASSERT_EQ(c->status, 201) << c->body;
  const std::string before = Slices();

  // A second gsliced on the same socket refuses to start and leaves the first alone.
  pid_t first = pid_;
  pid_ = -1;
  pid_t second = fork();
  if (second == 0) {
    freopen((dir_ + "/second.log").c_str(), "w", stderr);
    execl(GSLICED, GSLICED, "--config", (dir_ + "/gsliced.toml").c_str(), "--set", "tcp=\"\"", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(second, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(ReadAll(dir_ + "/second.log").find("another gsliced is serving"), std::string::npos)
      << ReadAll(dir_ + "/second.log");
  pid_ = first;
  EXPECT_EQ(Slices(), before);

  EXPECT_TRUE(WIFEXITED(Stop(SIGTERM)));
  Start();
  EXPECT_EQ(Slices(), before);
  Stop(SIGKILL);  // a crash leaves the socket file behind; the next start replaces it
  Start();
  EXPECT_EQ(Slices(), before);
  auto p = Unix().Get("/v1/projects/ml");
  EXPECT_NE(p->body.find("\"priority\":2"), std::string::npos) << p->body;
}

// Every path gsliced uses is an option: on the simulator the suspend board comes from
// --set like the rest, with nothing in the environment.
TEST_F(GslicedProcess, SuspendBoardAndDriverAreOptions) {
  unsetenv("GSLICE_SUSPEND_BOARD");
  const std::string nvml = GSLICE_SIM_NVML;
  const std::string driver = nvml.substr(0, nvml.rfind('/')) + "/libcuda.so.1";
  Start({"--set", "suspend_board=" + board_, "--set", "driver_library=" + driver});
  struct stat st {};
  ASSERT_EQ(stat(board_.c_str(), &st), 0) << ReadAll(dir_ + "/gsliced.log");
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_uid, geteuid());
}

TEST_F(GslicedProcess, BadConfigIsRefusedWithLineAndKey) {
  std::ofstream(dir_ + "/gsliced.toml", std::ios::app) << "api_thread = 4\n";
  std::string cmd = std::string(GSLICED) + " --config " + dir_ + "/gsliced.toml --check-config > " + dir_ +
                    "/out.txt 2>&1";
  int rc = std::system(cmd.c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  std::string out = ReadAll(dir_ + "/out.txt");
  EXPECT_NE(out.find("gsliced.toml:9: unknown key 'api_thread'"), std::string::npos) << out;
}

}  // namespace
}  // namespace gslice

namespace gslice {
namespace {

// Runs the gslice CLI against this test's gsliced; returns the exit status, fills out/err.
int RunCli(const std::string& socket, const std::string& args, std::string* out, std::string* err = nullptr) {
  static int n = 0;
  std::string base = testing::UniquePath("cli-" + std::to_string(n++), "/tmp");
  std::string cmd = "GSLICE_SOCKET=" + socket + " " + GSLICE_CLI + " " + args + " > " + base + ".out 2> " +
                    base + ".err";
  int rc = std::system(cmd.c_str());
  *out = ReadAll(base + ".out");
  if (err) *err = ReadAll(base + ".err");
  unlink((base + ".out").c_str());
  unlink((base + ".err").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST_F(GslicedProcess, CliCommandsWorkAgainstTheDaemon) {
  std::string out, err;
  // No daemon yet: the error says what to do.
  EXPECT_EQ(RunCli(socket_, "ls", &out, &err), 1);
  EXPECT_NE(err.find("gsliced is not running"), std::string::npos) << err;
  EXPECT_NE(err.find("gslice run"), std::string::npos) << err;

  Start();
  ASSERT_EQ(RunCli(socket_, "create train --gpus 0 --memory 8GiB --share 50% --user alice", &out, &err), 0) << err;
  EXPECT_NE(out.find("created slice train"), std::string::npos) << out;
  // Admission refusal reaches the person with what is free.
  EXPECT_EQ(RunCli(socket_, "create big --gpus 0 --memory 10GiB --user bob", &out, &err), 1);
  EXPECT_NE(err.find("8 GiB guaranteed memory free, asked 10 GiB"), std::string::npos) << err;
  ASSERT_EQ(RunCli(socket_, "create scratch --gpus 0,1 --memory 10GiB,2GiB --class opportunistic --user bob "
                            "--idle-timeout 30m", &out, &err), 0)
      << err;
  EXPECT_EQ(json::parse(Unix().Get("/v1/slices/scratch")->body)["idle_timeout_s"], 1800);
  EXPECT_EQ(RunCli(socket_, "create x --gpus 0 --memory 1GiB --idle-timeout soon", &out, &err), 2);
  EXPECT_NE(err.find("--idle-timeout soon"), std::string::npos) << err;

  ASSERT_EQ(RunCli(socket_, "ls", &out, &err), 0) << err;
  EXPECT_NE(out.find("train"), std::string::npos);
  EXPECT_NE(out.find("opportunistic"), std::string::npos);
  EXPECT_NE(out.find("0 B / 12 GiB"), std::string::npos) << out;

  ASSERT_EQ(RunCli(socket_, "ls --json", &out, &err), 0) << err;
  json node = json::parse(out, nullptr, false);
  ASSERT_TRUE(node.is_object()) << out;
  ASSERT_EQ(node["slices"].size(), 2u);
  EXPECT_EQ(node["slices"][0]["user"], "alice");

  ASSERT_EQ(RunCli(socket_, "top --once", &out, &err), 0) << err;
  EXPECT_NE(out.find("gslice top"), std::string::npos);
  EXPECT_NE(out.find("scratch"), std::string::npos);
  EXPECT_EQ(RunCli(socket_, "top --json", &out, &err), 2);  // --json needs --once
  EXPECT_NE(err.find("--once"), std::string::npos);

  // A slice with no process cannot be suspended (or this build has no mechanism): the
  // answer says why and the slice keeps running.
  EXPECT_EQ(RunCli(socket_, "suspend train", &out, &err), 1);
  EXPECT_NE(err.find("gslice suspend: "), std::string::npos) << err;
  EXPECT_EQ(json::parse(Unix().Get("/v1/slices/train")->body)["state"], "running");

  ASSERT_EQ(RunCli(socket_, "delete scratch --json", &out, &err), 0) << err;
  EXPECT_EQ(out, "{\"deleted\":[\"scratch\"],\"failed\":[]}\n");
  EXPECT_EQ(RunCli(socket_, "delete nope", &out, &err), 1);
  EXPECT_NE(err.find("no slice named 'nope'"), std::string::npos) << err;

  // Bad input never reaches the daemon.
  EXPECT_EQ(RunCli(socket_, "create x --gpus 0 --memory lots", &out, &err), 2);
  EXPECT_NE(err.find("--memory lots"), std::string::npos) << err;
  EXPECT_EQ(RunCli(socket_, "create x --gpus 0,1 --memory 1GiB,2GiB,3GiB", &out, &err), 2);
  EXPECT_EQ(RunCli(socket_, "create x --memory 1GiB", &out, &err), 2);
  EXPECT_NE(err.find("--gpus is required"), std::string::npos) << err;
  auto slices = json::parse(Unix().Get("/v1/slices")->body);
  EXPECT_EQ(slices["slices"].size(), 1u);

  // --help teaches: usage, options and examples.
  for (const char* cmd : {"ls", "top", "create", "delete", "suspend", "resume"}) {
    ASSERT_EQ(RunCli(socket_, std::string(cmd) + " --help", &out, &err), 0) << cmd;
    EXPECT_EQ(out.rfind("usage: gslice " + std::string(cmd), 0), 0u) << out;
  }
}

// gslice run with gsliced running: the slice passes admission (a refusal stops the program
// before it starts), shows in the registry while its program runs and leaves with it; a
// name gsliced already knows (gslice create) is joined, not registered again.
// One word, one meaning: --share is the guaranteed share (create, set, run), --cap the hard
// cap (set, run). --compute, which meant the share to create and the cap to set and run, is
// read as before for one release with a warning naming the new flag; the API's
// "compute_share" likewise replaces create's "compute".
TEST_F(GslicedProcess, ShareAndCapAreTheComputeFlagsAndTheOldOneWarns) {
  Start();
  std::string out, err;
  auto gpu0 = [&](const std::string& slice) { return json::parse(Unix().Get("/v1/slices/" + slice)->body)["gpus"][0]; };
  ASSERT_EQ(RunCli(socket_, "create a --gpus 0 --memory 1GiB --share 20%", &out, &err), 0) << err;
  EXPECT_EQ(err, "");
  EXPECT_DOUBLE_EQ(gpu0("a")["compute_share"].get<double>(), 0.2);
  ASSERT_EQ(RunCli(socket_, "create b --gpus 0 --memory 1GiB --compute 10%", &out, &err), 0) << err;
  EXPECT_NE(err.find("--compute is now --share"), std::string::npos) << err;
  EXPECT_DOUBLE_EQ(gpu0("b")["compute_share"].get<double>(), 0.1);
  ASSERT_EQ(RunCli(socket_, "set a --cap 30%", &out, &err), 0) << err;
  EXPECT_EQ(err, "");
  EXPECT_DOUBLE_EQ(gpu0("a")["compute_cap"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(gpu0("a")["compute_share"].get<double>(), 0.2);
  ASSERT_EQ(RunCli(socket_, "set a --compute 40%", &out, &err), 0) << err;
  EXPECT_NE(err.find("--compute is now --cap"), std::string::npos) << err;
  EXPECT_DOUBLE_EQ(gpu0("a")["compute_cap"].get<double>(), 0.4);
  // The API: "compute_share" at the top and per GPU; both names at once are refused.
  auto created = Unix().Post("/v1/slices", R"({"name":"c","gpus":[{"gpu":"1","compute_share":"25%"}],"memory":"1GiB"})",
                             "application/json");
  ASSERT_TRUE(created);
  ASSERT_EQ(created->status, 201) << created->body;
  auto old = Unix().Post("/v1/slices", R"({"name":"e","gpus":["1"],"memory":"1GiB","compute":"15%"})", "application/json");
  ASSERT_TRUE(old);
  ASSERT_EQ(old->status, 201) << old->body;
  EXPECT_DOUBLE_EQ(gpu0("e")["compute_share"].get<double>(), 0.15);
  auto both = Unix().Post("/v1/slices", R"({"name":"d","gpus":["1"],"memory":"1GiB","compute":0.1,"compute_share":0.1})",
                          "application/json");
  ASSERT_TRUE(both);
  EXPECT_EQ(both->status, 400);
  EXPECT_NE(both->body.find("give compute_share only"), std::string::npos) << both->body;
  EXPECT_EQ(Unix().Get("/v1/slices/d")->status, 404);
}

TEST_F(GslicedProcess, RunRegistersWithTheDaemonWhileItsProgramRuns) {
  Start();
  setenv("GSLICE_LEDGER", ledger_.c_str(), 1);  // the daemon's ledger, not the node's
  std::string out, err;
  ASSERT_EQ(RunCli(socket_, "create train --gpus 0 --memory 8GiB --share 50% --user alice", &out, &err), 0) << err;
  // Under the sanitize preset the shims are instrumented: the ASan runtime goes first
  // (gslice run keeps what is preloaded already in front of the shims).
  if (!std::string(GSLICE_TEST_ASAN_RUNTIME).empty()) {
    setenv("LD_PRELOAD", GSLICE_TEST_ASAN_RUNTIME, 1);
    setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
  }
  std::string cli = GSLICE_CLI;

  EXPECT_EQ(RunCli(socket_, "run --sim --gpus 0 --memory 10GiB -- true", &out, &err), 2);
  EXPECT_NE(err.find("gsliced refused slice"), std::string::npos) << err;
  EXPECT_NE(err.find("8 GiB guaranteed memory free, asked 10 GiB"), std::string::npos) << err;

  std::string inside = dir_ + "/inside.json";
  ASSERT_EQ(RunCli(socket_, "run --sim --gpus 0 --memory 2GiB --name during-run -- sh -c '" + cli +
                                " ls --json --socket " + socket_ + " > " + inside + "'",
                   &out, &err),
            0)
      << err;
  json during = json::parse(ReadAll(inside), nullptr, false);
  ASSERT_TRUE(during.is_object()) << ReadAll(inside);
  bool listed = false;
  for (const json& s : during["slices"]) {
    if (s["name"] == "during-run") {
      listed = true;
      EXPECT_EQ(s["memory_limit_bytes"], 2 * testing::kGiB);
      EXPECT_EQ(s["origin"], "run");
    }
  }
  EXPECT_TRUE(listed) << during.dump();
  EXPECT_EQ(Unix().Get("/v1/slices/during-run")->status, 404);  // gone with its program

  // Joining the created slice: admitted already, so no second reservation is asked for.
  EXPECT_EQ(RunCli(socket_, "run --sim --gpus 0 --memory 8GiB --name train -- true", &out, &err), 0) << err;
  EXPECT_EQ(Unix().Get("/v1/slices/train")->status, 200);
  // The program's exit status comes through.
  EXPECT_EQ(RunCli(socket_, "run --sim --gpus 0 --memory 1GiB --name exits-3 -- sh -c 'exit 3'", &out, &err), 3);
  EXPECT_EQ(Unix().Get("/v1/slices/exits-3")->status, 404);
  unsetenv("LD_PRELOAD");
  unsetenv("GSLICE_LEDGER");
}

// The protection level from the CLI to where the shims read it: gslice create --protect and
// gslice run --protect reach gsliced, `gslice ls` shows it, and gsliced writes it into its
// node ledger; a level for opportunistic work or out of range never reaches the daemon.
TEST_F(GslicedProcess, ProtectionLevelFromTheCliToTheLedger) {
  Start();
  setenv("GSLICE_LEDGER", ledger_.c_str(), 1);  // the daemon's ledger, not the node's
  if (!std::string(GSLICE_TEST_ASAN_RUNTIME).empty()) {
    setenv("LD_PRELOAD", GSLICE_TEST_ASAN_RUNTIME, 1);
    setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
  }
  std::string out, err;
  ASSERT_EQ(RunCli(socket_, "create serve --gpus 0 --memory 4GiB --protect 0.9 --user alice", &out, &err), 0) << err;
  EXPECT_NE(out.find("created slice serve (guaranteed, protect 0.9,"), std::string::npos) << out;
  EXPECT_DOUBLE_EQ(json::parse(Unix().Get("/v1/slices/serve")->body)["protect"].get<double>(), 0.9);
  ASSERT_EQ(RunCli(socket_, "create batch --gpus 0 --memory 1GiB --class opportunistic --user alice", &out, &err), 0)
      << err;
  ASSERT_EQ(RunCli(socket_, "ls", &out, &err), 0) << err;
  EXPECT_NE(out.find("PROTECT"), std::string::npos) << out;
  EXPECT_NE(out.find("guaranteed     0.9"), std::string::npos) << out;
  EXPECT_NE(out.find("opportunistic  -"), std::string::npos) << out;
  {
    Ledger ledger;
    ASSERT_EQ(ledger.Open(ledger_.c_str(), 2000, /*create=*/false), LedgerError::kOk) << ledger.detail();
    const int slice = ledger.FindSlice("serve");
    ASSERT_GE(slice, 0);
    EXPECT_EQ(ledger.limits()->slices[slice].protect_permille, 900u);
  }
  // gslice run registers the level with the slice while its program runs.
  std::string inside = dir_ + "/protect.json";
  ASSERT_EQ(RunCli(socket_, "run --sim --gpus 1 --memory 1GiB --protect 85% --name run-protect -- sh -c '" +
                                std::string(GSLICE_CLI) + " ls --json --socket " + socket_ + " > " + inside + "'",
                   &out, &err),
            0)
      << err;
  json during = json::parse(ReadAll(inside), nullptr, false);
  ASSERT_TRUE(during.is_object()) << ReadAll(inside);
  bool listed = false;
  for (const json& s : during["slices"]) {
    if (s["name"] == "run-protect") {
      listed = true;
      EXPECT_DOUBLE_EQ(s["protect"].get<double>(), 0.85);
    }
  }
  EXPECT_TRUE(listed) << during.dump();
  // Refused before anything reaches gsliced.
  EXPECT_EQ(RunCli(socket_, "create x --gpus 1 --memory 1GiB --class opportunistic --protect 0.9", &out, &err), 2);
  EXPECT_NE(err.find("--protect: only guaranteed slices have a protection level"), std::string::npos) << err;
  EXPECT_EQ(RunCli(socket_, "create x --gpus 1 --memory 1GiB --protect 0.2", &out, &err), 2);
  EXPECT_NE(err.find("--protect 0.2: must be from 0.5 to 1"), std::string::npos) << err;
  EXPECT_EQ(Unix().Get("/v1/slices/x")->status, 404);
  ASSERT_EQ(RunCli(socket_, "create --help", &out, &err), 0);
  EXPECT_NE(out.find("--protect F"), std::string::npos) << out;
  unsetenv("LD_PRELOAD");
  unsetenv("GSLICE_LEDGER");
}

// gslice run never skips an admission it could have: --no-daemon is refused while gsliced
// answers, and a stopped gsliced stops the run unless --no-daemon is given.
TEST_F(GslicedProcess, RunWithoutTheDaemonOnlyWhenAskedAndNoneAnswers) {
  Start();
  setenv("GSLICE_LEDGER", ledger_.c_str(), 1);  // the test's ledger, not the node's
  if (!std::string(GSLICE_TEST_ASAN_RUNTIME).empty()) {
    setenv("LD_PRELOAD", GSLICE_TEST_ASAN_RUNTIME, 1);
    setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
  }
  std::string out, err;
  EXPECT_EQ(RunCli(socket_, "run --sim --gpus 0 --memory 1GiB --no-daemon -- true", &out, &err), 2);
  EXPECT_NE(err.find("gsliced answers at unix:" + socket_ + "; slices here go through its admission"),
            std::string::npos)
      << err;
  Stop(SIGKILL);  // a crash: the socket file stays, nobody listens
  const std::string marker = dir_ + "/ran";
  EXPECT_EQ(RunCli(socket_, "run --sim --gpus 0 --memory 1GiB -- touch " + marker, &out, &err), 2);
  EXPECT_NE(access(marker.c_str(), F_OK), 0) << "the program ran without admission";
  EXPECT_NE(err.find("does not answer"), std::string::npos) << err;
  EXPECT_EQ(RunCli(socket_, "run --sim --gpus 0 --memory 1GiB --no-daemon -- touch " + marker, &out, &err), 0) << err;
  EXPECT_EQ(access(marker.c_str(), F_OK), 0);
  unsetenv("LD_PRELOAD");
  unsetenv("GSLICE_LEDGER");
}

#ifdef GSLICE_TEST_CLIENT
// The reported failure, end to end: while gsliced was down, `gslice run --no-daemon` started a
// 13 GiB guaranteed slice on a 16 GiB GPU that had 10 GiB guaranteed already. The restarted
// gsliced adopts it through admission, as opportunistic, and says so.
TEST_F(GslicedProcess, ARestartAdoptsUnadmittedWorkWithoutOvercommitting) {
  Start();
  ASSERT_EQ(Unix().Post("/v1/slices", R"({"name":"a","user":"u","gpus":["0"],"memory":"10GiB"})", "application/json")
                ->status,
            201);
  Stop(SIGKILL);
  if (!std::string(GSLICE_TEST_ASAN_RUNTIME).empty()) {
    setenv("LD_PRELOAD", GSLICE_TEST_ASAN_RUNTIME, 1);
    setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
  }
  int in[2], out[2];
  // Close-on-exec: gsliced, started below, must not hold the program's stdin open.
  ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  pid_t run = fork();
  if (run == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[1]);
    close(out[0]);
    setenv("GSLICE_SOCKET", socket_.c_str(), 1);
    setenv("GSLICE_LEDGER", ledger_.c_str(), 1);
    execl(GSLICE_CLI, GSLICE_CLI, "run", "--sim", "--no-daemon", "--gpus", "0", "--memory", "13GiB", "--name", "late",
          "--", GSLICE_TEST_CLIENT, "hold", "1048576", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  unsetenv("LD_PRELOAD");
  char line[16] = {};
  ASSERT_GT(read(out[0], line, sizeof line - 1), 0);  // the program allocated: it runs in the slice
  EXPECT_EQ(std::string(line), "ok\n");
  Start();
  json late, gpus;
  for (int i = 0; i < 100; ++i) {
    auto r = Unix().Get("/v1/slices/late");
    if (r && r->status == 200) {
      late = json::parse(r->body);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(late["class"], "opportunistic") << late.dump();
  EXPECT_EQ(late["origin"], "adopted");
  gpus = json::parse(Unix().Get("/v1/gpus")->body);
  EXPECT_EQ(gpus["gpus"][0]["guaranteed_memory_bytes"], 10 * testing::kGiB) << gpus.dump();
  std::string events = Unix().Get("/v1/events")->body;
  EXPECT_NE(events.find("6 GiB guaranteed memory free, asked 13 GiB"), std::string::npos) << events;
  close(in[1]);  // the program ends
  close(out[0]);
  int status = 0;
  waitpid(run, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}
#endif

}  // namespace
}  // namespace gslice
