// The real gsliced against hostile API clients: callers that are not who the body says,
// users touching others' slices, bodies that never end, connections that never finish,
// floods of parallel clients, and configuration that points at the wrong things. Parts run
// as the unprivileged user nobody (uid 65534) in a forked child that drops privileges
// before it connects, because the kernel names the caller at connect time.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "daemon_test_support.h"
#include "gslice/ledger.h"
#include "gslice/pid_namespace.h"

namespace gslice {
namespace {

using nlohmann::json;
using testing::FreePort;
using testing::ReadAll;
using testing::AwaitGsliced;
using testing::SpawnGsliced;
using Clock = std::chrono::steady_clock;

constexpr uid_t kNobody = 65534;
constexpr gid_t kNogroup = 65534;
constexpr const char* kToken = "hostile-test-token-0123456789";

int ConnectUnix(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Connects to 127.0.0.1:port from `source` (another loopback address plays another host).
int ConnectTcp(int port, const char* source = nullptr) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (source != nullptr) {
    sockaddr_in s{};
    s.sin_family = AF_INET;
    inet_pton(AF_INET, source, &s.sin_addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&s), sizeof s) != 0) {
      close(fd);
      return -1;
    }
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

struct Reply {
  int status = 0;  // 0: no answer
  std::string body;
};

// Reads one HTTP/1.1 answer with a Content-Length body from `fd`, within `timeout_ms`.
Reply ReadReply(int fd, int timeout_ms = 5000) {
  Reply r;
  std::string raw;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[65536];
  for (;;) {
    auto end = raw.find("\r\n\r\n");
    if (end != std::string::npos) {
      std::string head = raw.substr(0, end);
      for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t length = 0;
      if (auto cl = head.find("content-length:"); cl != std::string::npos) {
        length = std::strtoull(head.c_str() + cl + 15, nullptr, 10);
      }
      if (raw.size() >= end + 4 + length) {
        r.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
        r.body = raw.substr(end + 4, length);
        return r;
      }
    }
    int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) <= 0) return r;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return r;
    raw.append(buf, static_cast<size_t>(n));
  }
}

std::string Request(const std::string& method, const std::string& path, const std::string& body = "",
                    const std::string& extra_headers = "") {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: gsliced\r\n" + extra_headers;
  if (!body.empty() || method == "POST" || method == "PUT") {
    r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return r + "\r\n" + body;
}

bool SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// One request on its own connection to the unix socket.
Reply CallUnix(const std::string& socket, const std::string& method, const std::string& path,
               const std::string& body = "") {
  int fd = ConnectUnix(socket);
  if (fd < 0) return {};
  SendAll(fd, Request(method, path, body));
  Reply r = ReadReply(fd);
  close(fd);
  return r;
}

int64_t RssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoll(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

// Reads everything `fd` sends until it closes the connection, or until `timeout_ms` passes.
std::string ReadUntilClosed(int fd, int timeout_ms = 5000) {
  std::string raw;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[65536];
  for (;;) {
    int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) <= 0) return raw;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return raw;
    raw.append(buf, static_cast<size_t>(n));
  }
}

// Whether the peer has closed (or reset) `fd` by now; what it sent before is read and dropped.
bool PeerClosed(int fd) {
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) return false;
    if (recv(fd, buf, sizeof buf, MSG_DONTWAIT) <= 0) return true;
  }
}

// A child process that becomes user `uid` (group nogroup, no other groups) and runs `body`,
// which may Report() lines to the test. The child then waits for Release() before it exits,
// so that what it connected stays connected meanwhile.
class ChildAs {
 public:
  ChildAs(uid_t uid, const std::function<void(ChildAs&)>& body) {
    EXPECT_EQ(pipe(report_), 0);
    EXPECT_EQ(pipe(release_), 0);
    pid_ = fork();
    if (pid_ == 0) {
      close(report_[0]);
      close(release_[1]);
      if (setgroups(0, nullptr) != 0 || setresgid(kNogroup, kNogroup, kNogroup) != 0 ||
          setresuid(uid, uid, uid) != 0) {
        Report("cannot become uid " + std::to_string(uid));
        _exit(3);
      }
      body(*this);
      char c;
      while (read(release_[0], &c, 1) > 0) {
      }
      _exit(0);
    }
    close(report_[1]);
    close(release_[0]);
  }
  ~ChildAs() { Release(); }
  // In the child: one line for the test.
  void Report(const std::string& line) {
    const std::string text = line + "\n";
    EXPECT_EQ(write(report_[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  // In the test: the child's next line, or "" when none comes within `timeout_ms`.
  std::string NextReport(int timeout_ms = 20000) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      if (auto nl = reported_.find('\n'); nl != std::string::npos) {
        std::string line = reported_.substr(0, nl);
        reported_.erase(0, nl + 1);
        return line;
      }
      int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      pollfd p{report_[0], POLLIN, 0};
      if (left <= 0 || poll(&p, 1, left) <= 0) return "";
      char buf[4096];
      ssize_t n = read(report_[0], buf, sizeof buf);
      if (n <= 0) return "";
      reported_.append(buf, static_cast<size_t>(n));
    }
  }
  // In the test: lets the child exit (closing what it holds) and waits for it.
  void Release() {
    if (pid_ <= 0) return;
    close(release_[1]);
    close(report_[0]);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int report_[2] = {-1, -1};
  int release_[2] = {-1, -1};
  std::string reported_;
};

// "STATUS BODY", as a child reports an answer.
std::string ReportOf(const Reply& r) {
  std::string line = std::to_string(r.status) + " " + r.body;
  std::replace(line.begin(), line.end(), '\n', ' ');
  return line;
}

class ApiHostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::UniquePath("hostile", "/tmp");
    // 0755: user nobody must reach the socket inside.
    ASSERT_EQ(mkdir(dir_.c_str(), 0755), 0);
    chmod(dir_.c_str(), 0755);
    socket_ = dir_ + "/api.sock";
    port_ = FreePort();
    std::ofstream(dir_ + "/token") << kToken << "\n";
    chmod((dir_ + "/token").c_str(), 0600);
    setenv("GSLICE_SIM_STATE", sim_state_.c_str(), 1);
    setenv("GSLICE_SUSPEND_BOARD", board_.c_str(), 1);
  }
  void TearDown() override {
    Stop();
    std::system(("rm -rf " + dir_).c_str());
    std::filesystem::remove_all(ledger_);  // the ledger and the board are directories
    unlink(sim_state_.c_str());
    std::filesystem::remove_all(board_);
  }
  void WriteConfig(const std::string& extra = "") {
    std::ofstream(dir_ + "/gsliced.toml")
        << "socket = \"" << socket_ << "\"\n"
        << "socket_mode = \"0666\"\n"
        << "database = \"" << dir_ << "/state/gsliced.db\"\n"
        << "ledger = \"" << ledger_ << "\"\n"
        << "nvml_library = \"" << GSLICE_SIM_NVML << "\"\n"
        << "tcp = \"127.0.0.1:" << port_ << "\"\n"
        << "token_file = \"" << dir_ << "/token\"\n"
        << "sample_interval_ms = 200\n"
        << extra;
  }
  // Runs gsliced with `args` to its end; its exit status and what it wrote.
  std::pair<int, std::string> RunToEnd(const std::vector<std::string>& extra) {
    std::string cmd = std::string(GSLICED) + " --config " + dir_ + "/gsliced.toml";
    for (const std::string& e : extra) cmd += " " + e;
    cmd += " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    int status = pclose(p);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
  }
  void Start() {
    pid_ = SpawnGsliced(GSLICED, dir_);
    ASSERT_TRUE(AwaitGsliced(&pid_, dir_, [&] {
      // Both listeners: gsliced opens the unix socket first and TCP right after it.
      if (CallUnix(socket_, "GET", "/healthz").status != 200) return false;
      if (port_ <= 0) return true;
      const int fd = ConnectTcp(port_);
      if (fd < 0) return false;
      close(fd);
      return true;
    }));
  }
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  // Runs `method path body` on the unix socket as user nobody, with supplementary groups
  // `groups`, in a child that drops privileges before it connects.
  Reply CallAsNobody(const std::string& method, const std::string& path, const std::string& body = "",
                     std::vector<gid_t> groups = {}) {
    return CallAs(kNobody, kNogroup, method, path, body, groups);
  }
  // The same as uid and gid.
  Reply CallAs(uid_t uid, gid_t gid, const std::string& method, const std::string& path, const std::string& body = "",
               std::vector<gid_t> groups = {}) {
    int out[2];
    EXPECT_EQ(pipe(out), 0);
    pid_t child = fork();
    if (child == 0) {
      close(out[0]);
      if (setgroups(groups.size(), groups.data()) != 0 || setresgid(gid, gid, gid) != 0 ||
          setresuid(uid, uid, uid) != 0) {
        _exit(3);
      }
      Reply r = CallUnix(socket_, method, path, body);
      std::string msg = std::to_string(r.status) + "\n" + r.body;
      write(out[1], msg.data(), msg.size());
      _exit(0);
    }
    close(out[1]);
    std::string msg;
    char buf[4096];
    for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) msg.append(buf, static_cast<size_t>(n));
    close(out[0]);
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child could not become uid " << uid;
    Reply r;
    r.status = std::atoi(msg.c_str());
    if (auto nl = msg.find('\n'); nl != std::string::npos) r.body = msg.substr(nl + 1);
    return r;
  }
  std::string Error(const Reply& r) {
    json j = json::parse(r.body, nullptr, false);
    return j.is_object() && j.contains("error") ? j["error"].get<std::string>() : r.body;
  }

  std::string dir_, socket_;
  int port_ = 0;
  pid_t pid_ = -1;
  std::string ledger_ = testing::UniquePath("ledger");
  std::string sim_state_ = testing::UniquePath("sim");
  std::string board_ = testing::UniquePath("suspend-board");
};

constexpr const char* kSlice = R"({"name":"%s","gpus":["0"],"memory":"1GiB"%s})";

std::string SliceBody(const std::string& name, const std::string& extra = "") {
  char buf[256];
  std::snprintf(buf, sizeof buf, kSlice, name.c_str(), extra.c_str());
  return buf;
}

TEST_F(ApiHostileTest, UsersChangeOnlyTheirOwnSlicesAndTheKernelSaysWhoTheyAre) {
  group* admins = getgrnam("users");
  ASSERT_NE(admins, nullptr) << "this test needs the group 'users'";
  const gid_t admin_gid = admins->gr_gid;
  WriteConfig("admin_group = \"users\"\n");
  Start();
  // Root's slice; its owner comes from the kernel, not from a body.
  Reply created = CallUnix(socket_, "POST", "/v1/slices", SliceBody("roots"));
  ASSERT_EQ(created.status, 201) << created.body;
  json j = json::parse(created.body);
  EXPECT_EQ(j["user"], "root");
  EXPECT_EQ(j["owner_uid"], 0);

  // Nobody may read it, and may not delete, suspend or resume it.
  EXPECT_EQ(CallAsNobody("GET", "/v1/slices/roots").status, 200);
  for (auto [method, path] : {std::pair{"DELETE", "/v1/slices/roots"},
                              {"POST", "/v1/slices/roots/suspend"},
                              {"POST", "/v1/slices/roots/resume"}}) {
    Reply r = CallAsNobody(method, path);
    EXPECT_EQ(r.status, 403) << method << " " << path << ": " << r.body;
    EXPECT_NE(Error(r).find("belongs to root (uid 0), not to nobody (uid 65534)"), std::string::npos) << r.body;
  }
  // A body that names another user is refused: the body is no authority.
  Reply spoof = CallAsNobody("POST", "/v1/slices", SliceBody("spoofed", R"(,"user":"root")"));
  EXPECT_EQ(spoof.status, 403) << spoof.body;
  EXPECT_NE(Error(spoof).find("is not you"), std::string::npos) << spoof.body;
  // Projects are the node's policy: admins only.
  EXPECT_EQ(CallAsNobody("POST", "/v1/projects", R"({"name":"mine","memory_quota":"100GiB"})").status, 403);

  // Its own slice it creates and deletes; the slice says whose it is.
  Reply own = CallAsNobody("POST", "/v1/slices", SliceBody("nobodys"));
  ASSERT_EQ(own.status, 201) << own.body;
  json o = json::parse(own.body);
  EXPECT_EQ(o["user"], "nobody");
  EXPECT_EQ(o["owner_uid"], 65534);
  EXPECT_EQ(CallAsNobody("POST", "/v1/slices/nobodys/suspend").status == 403, false);
  EXPECT_EQ(CallAsNobody("DELETE", "/v1/slices/nobodys").status, 200);

  // Root's slice is still there and unchanged.
  Reply still = CallUnix(socket_, "GET", "/v1/slices/roots");
  EXPECT_EQ(still.status, 200);
  EXPECT_EQ(json::parse(still.body)["state"], "running");

  // A member of admin_group (by its supplementary groups) may change any slice.
  Reply admin = CallAsNobody("DELETE", "/v1/slices/roots", "", {admin_gid});
  EXPECT_EQ(admin.status, 200) << admin.body;
  EXPECT_EQ(CallUnix(socket_, "GET", "/v1/slices/roots").status, 404);
}

// A slice's trace says what its programs ran (kernel names, arguments, timing): like changing
// the slice, reading it is for its owner and admins. gsliced serves it from beside its
// database (<state dir>/traces/<slice>.json), whole, bounded, never through a link.
TEST_F(ApiHostileTest, ASlicesTraceIsServedOnlyToItsOwnerAndAdmins) {
  group* admins = getgrnam("users");
  ASSERT_NE(admins, nullptr) << "this test needs the group 'users'";
  const gid_t admin_gid = admins->gr_gid;
  WriteConfig("admin_group = \"users\"\n");
  Start();
  ASSERT_EQ(CallUnix(socket_, "POST", "/v1/slices", SliceBody("roots")).status, 201);
  ASSERT_EQ(CallAsNobody("POST", "/v1/slices", SliceBody("nobodys")).status, 201);

  // None recorded yet: 404, and how to record one.
  Reply none = CallUnix(socket_, "GET", "/v1/slices/roots/trace");
  EXPECT_EQ(none.status, 404) << none.body;
  EXPECT_NE(Error(none).find("has no trace yet: record one with `gslice trace roots --seconds 10`"),
            std::string::npos) << none.body;
  EXPECT_EQ(CallUnix(socket_, "GET", "/v1/slices/nosuch/trace").status, 404);

  const std::string traces = dir_ + "/state/traces";
  std::filesystem::create_directories(traces);
  auto trace_of = [](const std::string& slice) {
    json t = {{"traceEvents", json::array({
                  {{"ph", "X"}, {"cat", "kernel"}, {"name", "secret_kernel_of_" + slice}, {"pid", 42},
                   {"tid", 1000000000}, {"ts", 10.5}, {"dur", 2.25}}})},
              {"displayTimeUnit", "ns"},
              {"otherData", {{"gslice", {{"version", 1}, {"slice", slice}, {"started_unix_ns", 1},
                                         {"dropped_events", 0}}}}}};
    return t.dump();
  };
  for (const char* slice : {"roots", "nobodys"}) {
    const std::string path = traces + "/" + slice + ".json";
    std::ofstream(path) << trace_of(slice);
    chmod(path.c_str(), 0640);
  }
  // Its owner, an admin (by admin_group) and the token's holder read it byte for byte.
  Reply owner = CallUnix(socket_, "GET", "/v1/slices/roots/trace");
  EXPECT_EQ(owner.status, 200) << owner.body;
  EXPECT_EQ(owner.body, trace_of("roots"));
  Reply admin = CallAsNobody("GET", "/v1/slices/roots/trace", "", {admin_gid});
  EXPECT_EQ(admin.status, 200) << admin.body;
  EXPECT_EQ(admin.body, trace_of("roots"));
  auto over_tcp = [&](const std::string& path, bool with_token) {
    const int fd = ConnectTcp(port_);
    if (fd < 0) return Reply{};
    SendAll(fd, Request("GET", path, "", with_token ? std::string("Authorization: Bearer ") + kToken + "\r\n" : ""));
    Reply r = ReadReply(fd);
    close(fd);
    return r;
  };
  Reply token = over_tcp("/v1/slices/roots/trace", true);
  EXPECT_EQ(token.status, 200) << token.body;
  EXPECT_EQ(token.body, trace_of("roots"));
  EXPECT_EQ(over_tcp("/v1/slices/roots/trace", false).status, 401);

  // Anyone else is refused, told whose it is, and gets nothing of it.
  Reply other = CallAsNobody("GET", "/v1/slices/roots/trace");
  EXPECT_EQ(other.status, 403) << other.body;
  EXPECT_NE(Error(other).find("the trace of slice 'roots' is for its owner, root (uid 0), or an admin"),
            std::string::npos) << other.body;
  EXPECT_EQ(other.body.find("secret_kernel"), std::string::npos) << other.body;
  // Its own it reads.
  Reply mine = CallAsNobody("GET", "/v1/slices/nobodys/trace");
  EXPECT_EQ(mine.status, 200) << mine.body;
  EXPECT_EQ(mine.body, trace_of("nobodys"));
  EXPECT_EQ(CallUnix(socket_, "DELETE", "/v1/slices/roots/trace").status, 405);

  // Bounded: a trace over 64 MiB is refused with what to do, without being read.
  ASSERT_EQ(truncate((traces + "/roots.json").c_str(), (64ll << 20) + 1), 0);
  Reply large = CallUnix(socket_, "GET", "/v1/slices/roots/trace");
  EXPECT_EQ(large.status, 500) << large.body;
  EXPECT_NE(Error(large).find("larger than the 64 MiB gsliced serves"), std::string::npos) << large.body;
  // A link in place of a trace is not followed, whatever it points at.
  unlink((traces + "/nobodys.json").c_str());
  ASSERT_EQ(symlink("/etc/shadow", (traces + "/nobodys.json").c_str()), 0);
  Reply link = CallAsNobody("GET", "/v1/slices/nobodys/trace");
  EXPECT_EQ(link.status, 500) << link.body;
  EXPECT_NE(Error(link).find("symbolic link"), std::string::npos) << link.body;
  EXPECT_EQ(CallUnix(socket_, "GET", "/healthz").status, 200);
}

// A small opportunistic slice, and a `gslice run` registration held by this test's process.
std::string SmallSlice(const std::string& name) { return SliceBody(name, R"(,"class":"opportunistic")"); }
std::string RunRegistration(const std::string& name) {
  const uint32_t self = static_cast<uint32_t>(getpid());
  return json{{"name", name}, {"gpus", json::array({"0"})}, {"memory", "1GiB"}, {"origin", "run"},
              {"holder", {{"pid", self}, {"pid_ns", SelfPidNamespace()}, {"start_time", ProcessStartTime(self)}}}}
      .dump();
}

// The node ledger holds 64 slices for everyone; one user fills only its share of them
// (slices_per_user), and root creates and runs after it.
TEST_F(ApiHostileTest, OneUserFillsOnlyItsShareOfTheSliceTable) {
  WriteConfig();  // the defaults: 16 slices per user
  Start();
  for (int i = 1; i <= 16; ++i) {
    Reply r = CallAsNobody("POST", "/v1/slices", SmallSlice("flood-" + std::to_string(i)));
    ASSERT_EQ(r.status, 201) << i << ": " << r.body;
  }
  for (const std::string& body : {SmallSlice("flood-17"), RunRegistration("flood-run")}) {
    Reply refused = CallAsNobody("POST", "/v1/slices", body);
    EXPECT_EQ(refused.status, 409) << refused.body;
    EXPECT_NE(Error(refused).find("nobody (uid 65534) holds 16 slices, the most one user may hold (slices_per_user = "
                                  "16 in gsliced's configuration)"),
              std::string::npos)
        << refused.body;
    EXPECT_NE(Error(refused).find("ask an admin (root or a member of gsliced's admin_group)"), std::string::npos)
        << refused.body;
  }
  // Root creates, and registers a program to run.
  Reply created = CallUnix(socket_, "POST", "/v1/slices", SmallSlice("roots"));
  EXPECT_EQ(created.status, 201) << created.body;
  Reply run = CallUnix(socket_, "POST", "/v1/slices", RunRegistration("roots-run"));
  EXPECT_EQ(run.status, 201) << run.body;
  Ledger ledger;
  ASSERT_EQ(ledger.Open(ledger_.c_str()), LedgerError::kOk);
  EXPECT_GE(ledger.FindSlice("roots-run"), 0) << "the program's slice is not in the node ledger";
  EXPECT_LT(ledger.FindSlice("flood-17"), 0);
  // The share is counted from what gsliced holds: one deleted, one more may be made.
  ASSERT_EQ(CallAsNobody("DELETE", "/v1/slices/flood-3").status, 200);
  EXPECT_EQ(CallAsNobody("POST", "/v1/slices", SmallSlice("flood-17")).status, 201);
  EXPECT_EQ(CallAsNobody("POST", "/v1/slices", SmallSlice("flood-18")).status, 409);
}

// With no share per user, one user still leaves the table's last entries (8) to admins: root
// and members of admin_group create and run after any flood.
TEST_F(ApiHostileTest, TheLastEntriesOfTheSliceTableStayForAdmins) {
  passwd* daemon_user = getpwnam("daemon");
  ASSERT_NE(daemon_user, nullptr) << "this test needs the user 'daemon' (an admin by its own group)";
  const uid_t admin_uid = daemon_user->pw_uid;
  const gid_t admin_gid = daemon_user->pw_gid;
  group* admins = getgrgid(admin_gid);
  ASSERT_NE(admins, nullptr);
  WriteConfig("slices_per_user = 0\nadmin_group = \"" + std::string(admins->gr_name) + "\"\n");
  Start();
  int created = 0;
  Reply refused;
  for (int i = 0; i < kLedgerMaxSlices; ++i) {
    Reply r = CallAsNobody("POST", "/v1/slices", SmallSlice("flood-" + std::to_string(i)));
    if (r.status != 201) {
      refused = r;
      break;
    }
    ++created;
  }
  EXPECT_EQ(created, kLedgerMaxSlices - 8);
  EXPECT_EQ(refused.status, 409) << refused.body;
  EXPECT_NE(Error(refused).find("the node's slice table has 8 of its 64 entries free, and the last 8 are kept for "
                                "admins (slices_reserved_for_admins in gsliced's configuration)"),
            std::string::npos)
      << refused.body;
  // Admins take them: root creates and registers a program, a member of admin_group creates.
  Reply root = CallUnix(socket_, "POST", "/v1/slices", SmallSlice("roots"));
  EXPECT_EQ(root.status, 201) << root.body;
  Reply run = CallUnix(socket_, "POST", "/v1/slices", RunRegistration("roots-run"));
  EXPECT_EQ(run.status, 201) << run.body;
  Reply member = CallAs(admin_uid, admin_gid, "POST", "/v1/slices", SmallSlice("admins"));
  EXPECT_EQ(member.status, 201) << member.body;
  Ledger ledger;
  ASSERT_EQ(ledger.Open(ledger_.c_str()), LedgerError::kOk);
  for (const char* name : {"roots", "roots-run", "admins"}) EXPECT_GE(ledger.FindSlice(name), 0) << name;
  // What admins took is not handed back to others: deleting one of its own, nobody still
  // finds no more than the reserve free.
  ASSERT_EQ(CallAsNobody("DELETE", "/v1/slices/flood-0").status, 200);
  Reply still = CallAsNobody("POST", "/v1/slices", SmallSlice("flood-again"));
  EXPECT_EQ(still.status, 409) << still.body;
  EXPECT_NE(Error(still).find("has 6 of its 64 entries free"), std::string::npos) << still.body;
  EXPECT_EQ(CallUnix(socket_, "GET", "/healthz").status, 200);
}

TEST_F(ApiHostileTest, AChunkedBodyIsRefusedBeforeItIsBufferedWithOrWithoutTheToken) {
  WriteConfig();
  Start();
  const int64_t before = RssKiB(pid_);
  ASSERT_GT(before, 0);
  const std::string chunk = [] {
    std::string data(1 << 20, 'x');
    char head[32];
    std::snprintf(head, sizeof head, "%zx\r\n", data.size());
    return head + data + "\r\n";
  }();
  for (bool with_token : {false, true}) {
    int fd = ConnectTcp(port_);
    ASSERT_GE(fd, 0);
    std::string headers = "POST /v1/slices HTTP/1.1\r\nHost: gsliced\r\nContent-Type: application/json\r\n"
                          "Transfer-Encoding: chunked\r\n";
    if (with_token) headers += std::string("Authorization: Bearer ") + kToken + "\r\n";
    ASSERT_TRUE(SendAll(fd, headers + "\r\n"));
    // 100 MiB, as long as gsliced reads it; it may answer and close at any point.
    int64_t peak = before;
    for (int i = 0; i < 100; ++i) {
      if (!SendAll(fd, chunk)) break;
      if (i % 10 == 0) peak = std::max(peak, RssKiB(pid_));
    }
    SendAll(fd, "0\r\n\r\n");
    Reply r = ReadReply(fd, 10000);
    close(fd);
    if (with_token) {
      EXPECT_EQ(r.status, 413) << r.body;
      EXPECT_NE(Error(r).find("max_body_bytes"), std::string::npos) << r.body;
    } else {
      EXPECT_EQ(r.status, 401) << r.body;
    }
    peak = std::max(peak, RssKiB(pid_));
    EXPECT_LT(peak - before, 50 * 1024) << "gsliced grew from " << before << " KiB to " << peak
                                        << " KiB on a chunked body" << (with_token ? " with" : " without")
                                        << " the token";
  }
  // And it still serves.
  EXPECT_EQ(CallUnix(socket_, "GET", "/healthz").status, 200);
}

TEST_F(ApiHostileTest, SlowClientsOnTcpStopNeitherOtherClientsNorTheUnixSocket) {
  WriteConfig("api_request_timeout_s = 2\napi_idle_timeout_s = 3\n");
  Start();
  // 120 connections from "another host" (127.0.0.2) that send half a request and stall.
  std::vector<int> slow;
  for (int i = 0; i < 120; ++i) {
    int fd = ConnectTcp(port_, "127.0.0.2");
    if (fd < 0) break;
    SendAll(fd, "GET /v1/node HTTP/1.1\r\nHost: gsliced\r\n");
    slow.push_back(fd);
  }
  ASSERT_GE(slow.size(), 110u);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // The unix socket answers meanwhile, and so does an authenticated TCP client.
  EXPECT_EQ(CallUnix(socket_, "GET", "/v1/node").status, 200);
  int fd = ConnectTcp(port_);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, Request("GET", "/v1/node", "", std::string("Authorization: Bearer ") + kToken + "\r\n")));
  Reply r = ReadReply(fd, 5000);
  close(fd);
  EXPECT_EQ(r.status, 200) << "an authenticated request got no answer within 5 s behind 120 slow connections";
  // The slow ones are closed once their request timeout passes.
  int closed = 0;
  for (int s : slow) {
    pollfd p{s, POLLIN, 0};
    char c;
    if (poll(&p, 1, 8000) > 0 && recv(s, &c, 1, 0) <= 0) ++closed;
    close(s);
  }
  EXPECT_EQ(closed, static_cast<int>(slow.size())) << "slow connections still open after the request timeout";
}

// Local users on TCP are told apart by the uid the kernel gives each socket, as on the unix
// socket; all of loopback is not one client. One user's slow connections from 127.0.0.1, a
// little over its share, refuse only its own further ones (429, saying what to do), never
// the token holder's requests from the same address.
TEST_F(ApiHostileTest, OnTcpEachLocalUserHasItsOwnShareOfConnections) {
  WriteConfig();  // 128 connections per client
  Start();
  ChildAs nobody(kNobody, [&](ChildAs& self) {
    std::vector<int> slow;
    for (int i = 0; i < 130; ++i) {
      const int fd = ConnectTcp(port_);
      if (fd < 0) break;
      SendAll(fd, "GET /v1/node HTTP/1.1\r\nHost: gsl");  // and nothing more
      slow.push_back(fd);
    }
    self.Report(std::to_string(slow.size()));
    const int fd = ConnectTcp(port_);
    Reply r;
    if (fd >= 0 && SendAll(fd, Request("GET", "/healthz"))) r = ReadReply(fd);
    self.Report(ReportOf(r));
  });
  ASSERT_EQ(nobody.NextReport(), "130");
  const std::string over = nobody.NextReport();
  EXPECT_EQ(over.rfind("429 ", 0), 0u) << "nobody's 131st connection: " << over;
  EXPECT_NE(over.find("uid 65534 holds more than 128 connections to gsliced (api_connections_per_client)"),
            std::string::npos) << over;
  // The token's holder, from the same address, is answered meanwhile.
  const int fd = ConnectTcp(port_);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, Request("GET", "/v1/node", "", std::string("Authorization: Bearer ") + kToken + "\r\n")));
  Reply r = ReadReply(fd);
  close(fd);
  EXPECT_EQ(r.status, 200) << "an authenticated request from 127.0.0.1 behind 130 slow connections of another "
                              "local user: " << r.body;
}

// A connection that waits (opened and silent, or kept alive between requests) holds one of
// the listener's threads. Two users holding all their share of idle connections, together
// every thread, do not keep a third user out: gsliced closes a waiting connection of the
// client that holds the most to make room.
TEST_F(ApiHostileTest, TwoUsersHoldingIdleConnectionsLeaveRoomForAThird) {
  WriteConfig("api_threads = 16\napi_connections_per_client = 8\n");
  Start();
  std::vector<int> roots;
  for (int i = 0; i < 8; ++i) {
    roots.push_back(ConnectUnix(socket_));
    ASSERT_GE(roots.back(), 0);
  }
  ChildAs nobody(kNobody, [&](ChildAs& self) {
    int held = 0;
    for (int i = 0; i < 8; ++i) held += ConnectUnix(socket_) >= 0;
    self.Report(std::to_string(held));
  });
  ASSERT_EQ(nobody.NextReport(), "8");
  ChildAs third(kNobody - 1, [&](ChildAs& self) { self.Report(ReportOf(CallUnix(socket_, "GET", "/v1/node"))); });
  const std::string answer = third.NextReport();
  EXPECT_EQ(answer.rfind("200 ", 0), 0u) << "a third user behind 16 idle connections of two others: " << answer;
  for (int fd : roots) close(fd);
}

// The documented timeouts are the real ones. A connection's first request must arrive whole
// within api_request_timeout_s of the connection opening, however slowly it drips (a
// request line that never ends included), and a silent one is closed then too; a TCP
// connection whose request did not carry the token is closed after its answer.
TEST_F(ApiHostileTest, ARequestMustArriveWithinTheRequestTimeoutOfItsConnectionOpening) {
  WriteConfig("api_request_timeout_s = 2\napi_idle_timeout_s = 60\n");
  Start();
  const int silent = ConnectUnix(socket_);
  const int drip_unix = ConnectUnix(socket_);
  const int drip_tcp = ConnectTcp(port_);
  ASSERT_GE(silent, 0);
  ASSERT_GE(drip_unix, 0);
  ASSERT_GE(drip_tcp, 0);
  // One byte every 250 ms, of a request line that never ends, for at most 20 s: a third of
  // the idle timeout, ten times the request timeout.
  const std::string line = "GET /healthz?" + std::string(200, 'x');
  bool closed[3] = {false, false, false};
  for (size_t i = 0; i < 80 && !(closed[0] && closed[1] && closed[2]); ++i) {
    if (!closed[1]) send(drip_unix, &line[i], 1, MSG_NOSIGNAL);
    if (!closed[2]) send(drip_tcp, &line[i], 1, MSG_NOSIGNAL);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    for (int k = 0; k < 3; ++k) closed[k] = closed[k] || PeerClosed(std::array{silent, drip_unix, drip_tcp}[k]);
  }
  EXPECT_TRUE(closed[0]) << "a silent unix connection outlived the request timeout";
  EXPECT_TRUE(closed[1]) << "a unix connection dripping its request line outlived the request timeout";
  EXPECT_TRUE(closed[2]) << "a TCP connection dripping its request line outlived the request timeout";
  for (int fd : {silent, drip_unix, drip_tcp}) close(fd);

  // A dashboard file over TCP without the token is answered, and the connection closed.
  const int fd = ConnectTcp(port_);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, Request("GET", "/app.css")));
  const std::string raw = ReadUntilClosed(fd, 10000);
  close(fd);
  EXPECT_EQ(raw.rfind("HTTP/1.1 200 ", 0), 0u) << raw.substr(0, 200);
  EXPECT_NE(raw.find("Connection: close"), std::string::npos) << raw.substr(0, 400);
}

// libmicrohttpd refuses a Content-Length it cannot read before gsliced sees the request (400
// when it is not a number, 413 when it is past 2^64). The answer is still the API's: one
// status line, its headers once, and {"error": ...} saying what was wrong.
TEST_F(ApiHostileTest, ABadContentLengthIsAnsweredWithTheApisJsonErrorOnce) {
  WriteConfig();
  Start();
  const std::string token = std::string("Authorization: Bearer ") + kToken + "\r\n";
  for (bool tcp : {false, true}) {
    for (auto [length, status] : {std::pair{"12abc", 400}, {"99999999999999999999999", 413}}) {
      const int fd = tcp ? ConnectTcp(port_) : ConnectUnix(socket_);
      ASSERT_GE(fd, 0);
      ASSERT_TRUE(SendAll(fd, std::string("POST /v1/slices HTTP/1.1\r\nHost: gsliced\r\nContent-Type: "
                                          "application/json\r\nContent-Length: ") +
                                  length + "\r\n" + (tcp ? token : "") + "\r\n"));
      const std::string raw = ReadUntilClosed(fd);
      close(fd);
      const std::string what = std::string(tcp ? "TCP" : "unix") + ", Content-Length " + length + ": ";
      EXPECT_EQ(raw.rfind("HTTP/1.1 " + std::to_string(status) + " ", 0), 0u) << what << raw;
      size_t lines = 0;
      for (size_t at = raw.find("HTTP/1."); at != std::string::npos; at = raw.find("HTTP/1.", at + 1)) ++lines;
      EXPECT_EQ(lines, 1u) << what << "the status line is repeated: " << raw;
      const size_t end = raw.find("\r\n\r\n");
      ASSERT_NE(end, std::string::npos) << what << raw;
      std::string head = raw.substr(0, end);
      for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      EXPECT_NE(head.find("content-type: application/json"), std::string::npos) << what << raw;
      const json body = json::parse(raw.substr(end + 4), nullptr, false);
      ASSERT_TRUE(body.is_object() && body.contains("error")) << what << raw;
      EXPECT_NE(body["error"].get<std::string>().find("Content-Length"), std::string::npos) << what << raw;
    }
  }
  EXPECT_EQ(CallUnix(socket_, "GET", "/healthz").status, 200);
}

// A JSON number's value, exactly (a long double holds every int64 and uint64); NaN for
// anything else.
long double Exact(const json& v) {
  if (v.is_number_unsigned()) return static_cast<long double>(v.get<uint64_t>());
  if (v.is_number_integer()) return static_cast<long double>(v.get<int64_t>());
  if (v.is_number_float()) return v.get<double>();
  return std::numeric_limits<long double>::quiet_NaN();
}

// Every number the API takes is stored as given or refused: swept over both ends of each
// field's range, just past them, the int32, int64 and uint64 boundaries, numbers past any
// of them, and the same values written as fractions. An accepted value reads back exactly;
// one out of range is refused with 400 and changes nothing.
TEST_F(ApiHostileTest, EveryNumberTheApiTakesIsStoredExactlyOrRefused) {
  WriteConfig();
  Start();
  ASSERT_EQ(CallUnix(socket_, "POST", "/v1/projects", R"({"name":"p"})").status, 201);
  ASSERT_EQ(CallUnix(socket_, "POST", "/v1/slices", SliceBody("s", R"(,"class":"opportunistic")")).status, 201);
  const std::vector<std::string> values = {
      "0", "-0", "1", "-1", "2", "300", "301", "4095", "4096", "4097", "1000000", "1000001", "-1000000",
      "-1000001", "31622400", "31622401", "1073741824", "2147483647", "2147483648", "-2147483648",
      "-2147483649", "4294967295", "4294967296", "4294967297", "1152921504606846976", "1152921504606846977",
      "9223372036854775807", "9223372036854775808", "-9223372036854775807", "-9223372036854775808",
      "18446744073709551615", "18446744073709551616", "-18446744073709551616", "340282366920938463463374607431768211456",
      "1.0", "1e6", "1E6", "-1e6", "0.5", "1.5", "1e-3", "4096.0", "1e400", "-1e400"};
  struct Field {
    std::string name;
    long double lo, hi;
    bool whole;  // whole numbers only: a fraction is refused, even 1.0
    std::function<Reply(const std::string&)> set;
    std::function<json()> get;
  };
  auto project = [&](const char* field) {
    return [&, field] { return json::parse(CallUnix(socket_, "GET", "/v1/projects/p").body)[field]; };
  };
  auto slice = [&](const char* field) {
    return [&, field] { return json::parse(CallUnix(socket_, "GET", "/v1/slices/s").body)[field]; };
  };
  auto put_project = [&](const char* field) {
    return [&, field](const std::string& v) {
      return CallUnix(socket_, "PUT", "/v1/projects/p", std::string("{\"") + field + "\":" + v + "}");
    };
  };
  auto patch_slice = [&](const char* field) {
    return [&, field](const std::string& v) {
      return CallUnix(socket_, "PATCH", "/v1/slices/s", std::string("{\"") + field + "\":" + v + "}");
    };
  };
  // A slice created with the value, read back and deleted; "absent" when it was not created.
  json created = "absent";
  auto create_slice = [&](const std::string& v) {
    Reply r = CallUnix(socket_, "POST", "/v1/slices", SliceBody("c", R"(,"class":"opportunistic","idle_timeout_s":)" + v));
    created = r.status == 201 ? json::parse(CallUnix(socket_, "GET", "/v1/slices/c").body)["idle_timeout_s"]
                              : json("absent");
    CallUnix(socket_, "DELETE", "/v1/slices/c");
    return r;
  };
  const std::vector<Field> fields = {
      {"project priority", -1000000, 1000000, true, put_project("priority"), project("priority")},
      {"project memory_quota", 0, 1152921504606846976.0L, true, put_project("memory_quota"), project("memory_quota_bytes")},
      {"project compute_quota", 0, 4096, false, put_project("compute_quota"), project("compute_quota")},
      {"slice idle_timeout_s", 0, 31622400, true, patch_slice("idle_timeout_s"), slice("idle_timeout_s")},
      {"new slice idle_timeout_s", 0, 31622400, true, create_slice, [&] { return created; }},
  };
  for (const Field& f : fields) {
    for (const std::string& text : values) {
      const json before = f.get();
      const Reply r = f.set(text);
      const json sent = json::parse(text, nullptr, false);  // discarded: past what JSON numbers hold
      const long double x = Exact(sent);
      const bool in_range = !std::isnan(x) && !(f.whole && sent.is_number_float()) && x >= f.lo && x <= f.hi;
      const std::string what = f.name + " = " + text + ": " + std::to_string(r.status) + " " + r.body;
      if (!in_range) {
        EXPECT_EQ(r.status, 400) << what;
        if (f.name.rfind("new ", 0) == 0) {
          EXPECT_EQ(created, "absent") << what;
        } else {
          EXPECT_EQ(f.get(), before) << what;
        }
        continue;
      }
      if (r.status != 200 && r.status != 201) {
        ADD_FAILURE() << "refused in range: " << what;
        continue;
      }
      const json got = f.get();
      if (f.whole) {
        // As written: an integer read back as the same integer, never one that wrapped.
        EXPECT_TRUE(got.is_number_integer() && got.dump() == sent.dump()) << what << "; reads back " << got.dump();
      } else {
        EXPECT_EQ(Exact(got), x) << what << "; reads back " << got.dump();
      }
    }
  }
  // Seconds to record a trace are taken, not stored: outside 1..300 they are refused, never
  // recorded for another number of seconds.
  for (const std::string& text : values) {
    const json sent = json::parse(text, nullptr, false);
    if (sent.is_number_integer() && Exact(sent) >= 1 && Exact(sent) <= 300) continue;
    Reply r = CallUnix(socket_, "POST", "/v1/slices/s/trace", "{\"seconds\":" + text + "}");
    EXPECT_EQ(r.status, 400) << "seconds = " << text << ": " << r.body;
    if (!sent.is_discarded()) {
      EXPECT_NE(Error(r).find("seconds"), std::string::npos) << "seconds = " << text << ": " << r.body;
    }
  }
}

TEST_F(ApiHostileTest, SixtyFourParallelClientsAllGetAnswers) {
  WriteConfig();
  Start();
  // All connect at once, without blocking (as an event-driven client does): a shallow
  // listen backlog refuses the ones over it with EAGAIN.
  constexpr int kClients = 64;
  std::atomic<int> ready{0}, answered{0}, refused{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&] {
      int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::strncpy(a.sun_path, socket_.c_str(), sizeof a.sun_path - 1);
      ready++;
      while (ready.load() < kClients) std::this_thread::yield();
      if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        refused++;
        close(fd);
        return;
      }
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      SendAll(fd, Request("GET", "/v1/node"));
      if (ReadReply(fd, 10000).status == 200) answered++;
      close(fd);
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(refused.load(), 0) << "connections refused by a full listen backlog";
  EXPECT_EQ(answered.load(), kClients);
}

TEST_F(ApiHostileTest, OneClientHoldsAtMostItsShareOfConnections) {
  WriteConfig("api_connections_per_client = 4\n");
  Start();
  // Root holds 4 connections to the unix socket; a 5th is answered 429 and closed.
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(ConnectUnix(socket_));
    ASSERT_GE(held.back(), 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Reply over = CallUnix(socket_, "GET", "/healthz");
  EXPECT_EQ(over.status, 429) << over.body;
  EXPECT_NE(Error(over).find("api_connections_per_client"), std::string::npos) << over.body;
  // Another user is not affected by root's connections.
  EXPECT_EQ(CallAsNobody("GET", "/healthz").status, 200);
  // On TCP a local user is one client by its uid, from whichever loopback address: nobody
  // holding 4 connections from 127.0.0.2 is refused a 5th from 127.0.0.1; root, from
  // either, is served.
  ChildAs nobody(kNobody, [&](ChildAs& self) {
    std::vector<int> tcp;
    for (int i = 0; i < 4; ++i) tcp.push_back(ConnectTcp(port_, "127.0.0.2"));
    const int fd = ConnectTcp(port_);
    Reply r;
    if (fd >= 0 && SendAll(fd, Request("GET", "/healthz"))) r = ReadReply(fd);
    self.Report(ReportOf(r));
  });
  const std::string fifth = nobody.NextReport();
  EXPECT_EQ(fifth.rfind("429 ", 0), 0u) << fifth;
  EXPECT_NE(fifth.find("uid 65534 holds more than 4 connections"), std::string::npos) << fifth;
  for (const char* source : {"127.0.0.1", "127.0.0.2"}) {
    int fd = ConnectTcp(port_, source);
    ASSERT_GE(fd, 0);
    SendAll(fd, Request("GET", "/healthz", "", std::string("Authorization: Bearer ") + kToken + "\r\n"));
    EXPECT_EQ(ReadReply(fd).status, 200) << source;
    close(fd);
  }
  nobody.Release();
  // Once root closes one, it is served again.
  close(held.back());
  held.pop_back();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(CallUnix(socket_, "GET", "/healthz").status, 200);
  for (int h : held) close(h);
}

TEST_F(ApiHostileTest, AKeepAliveConnectionServesWithoutARequestCap) {
  WriteConfig();
  Start();
  int fd = ConnectUnix(socket_);
  ASSERT_GE(fd, 0);
  int served = 0;
  for (int i = 0; i < 1200; ++i) {
    if (!SendAll(fd, Request("GET", "/healthz"))) break;
    if (ReadReply(fd).status != 200) break;
    ++served;
  }
  close(fd);
  EXPECT_EQ(served, 1200) << "the connection stopped after " << served << " requests";
}

TEST_F(ApiHostileTest, AFileAtTheSocketPathIsRefusedNeverDeleted) {
  WriteConfig();
  std::ofstream(socket_) << "precious\n";
  auto [check_code, check_out] = RunToEnd({"--check-config"});
  EXPECT_NE(check_code, 0) << check_out;
  EXPECT_NE(check_out.find("is not a socket"), std::string::npos) << check_out;
  auto [code, out] = RunToEnd({});
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("is not a socket"), std::string::npos) << out;
  EXPECT_EQ(ReadAll(socket_), "precious\n");
}

TEST_F(ApiHostileTest, CheckConfigChecksWhatTheConfigNames) {
  struct Case {
    std::string extra, expect;
  };
  const std::vector<Case> cases = {
      {"default_project = \"Not A Project\"\n", "default_project"},
      {"admin_group = \"no-such-group-gslice\"\n", "admin_group: no group named"},
      {"socket_group = \"no-such-group-gslice\"\n", "socket_group: no group named"},
      {"max_body_bytes = \"1TiB\"\n", "max_body_bytes"},
      {"api_idle_timeout_s = 36028797018963968\n", "api_idle_timeout_s"},
      {"api_connections_per_client = 0\n", "api_connections_per_client"},
  };
  for (const Case& c : cases) {
    WriteConfig(c.extra);
    auto [code, out] = RunToEnd({"--check-config"});
    EXPECT_NE(code, 0) << c.extra << out;
    EXPECT_NE(out.find(c.expect), std::string::npos) << c.extra << out;
  }
  // A token others may read.
  WriteConfig();
  chmod((dir_ + "/token").c_str(), 0644);
  auto [code, out] = RunToEnd({"--check-config"});
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("chmod 600"), std::string::npos) << out;
  chmod((dir_ + "/token").c_str(), 0600);
  auto [ok_code, ok_out] = RunToEnd({"--check-config"});
  EXPECT_EQ(ok_code, 0) << ok_out;
}

}  // namespace
}  // namespace gslice
