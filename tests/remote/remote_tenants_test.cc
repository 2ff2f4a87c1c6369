// Remote tenants on the simulated driver (docs/remote.md, "Tenants"; docs/security.md, "Remote
// GPUs"): gslice-remoted started as root serves two local users over one unix socket and two
// tls:// tenants, each client's worker running as its own uid with no capabilities,
// no_new_privs and the system-call filter, in a mount namespace where the server's key and
// tenants file cannot be opened;
// gsliced sees a remote slice as its tenant's, so the other tenant cannot change it; a token
// removed from the tenants file ends its sessions and no others; one user's flood of
// connections leaves another user served.
//
// Needs root (its clients run as `nobody` and `daemon`); every test uses its own simulated node,
// ledger, board and folder (pid-based names).
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "node.h"
#include "remote_test_support.h"
#include "test_support.h"
#include "tls.h"

namespace {

using gslice::test::Child;
using nlohmann::json;
using namespace gslice::remote;

const std::string kBin = GSLICE_TEST_BIN;
const std::string kProgram = GSLICE_TEST_ATTACH_PROBE;

std::string Prefix() { return "/dev/shm/gslice-test-" + std::to_string(getpid()) + "-tenants"; }
std::string Dir() { return "/tmp/gslice-test-" + std::to_string(getpid()) + "-tenants"; }

struct User {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string name;
};

// The fields of /proc/PID/status ("Uid" -> "65534\t65534\t65534\t65534").
std::map<std::string, std::string> Status(pid_t pid) {
  std::map<std::string, std::string> fields;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t value = line.find_first_not_of(" \t", colon + 1);
    fields[line.substr(0, colon)] = value == std::string::npos ? "" : line.substr(value);
  }
  return fields;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string Link(const std::string& path) {
  char buf[256];
  const ssize_t n = readlink(path.c_str(), buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "?";
}

// errno of opening path for reading as user (0: it opened).
int OpenErrnoAs(const User& user, const std::string& path) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, nullptr) != 0 || setresgid(user.gid, user.gid, user.gid) != 0 ||
        setresuid(user.uid, user.uid, user.uid) != 0) {
      _exit(255);
    }
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    _exit(fd >= 0 ? 0 : errno);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
}

// The lowercase hex SHA-256 of a token file's token (its first line).
std::string TokenDigest(const std::string& token_file) {
  std::string token = ReadAll(token_file);
  token = token.substr(0, token.find('\n'));
  unsigned char digest[32];
  std::string error;
  if (!TlsSha256(token.data(), token.size(), digest, &error)) return error;
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : digest) hex += {kHex[b >> 4], kHex[b & 15]};
  return hex;
}

// Writes path's new text whole: readers see the old file or the new one.
void Replace(const std::string& path, const std::string& text, mode_t mode) {
  const std::string next = path + ".next";
  std::ofstream(next) << text;
  chmod(next.c_str(), mode);
  rename(next.c_str(), path.c_str());
}

class RemoteTenants : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (its clients run as two other users)";
    for (auto [name, user] : {std::pair{"nobody", &a_}, std::pair{"daemon", &b_}}) {
      passwd* pw = getpwnam(name);
      if (pw == nullptr || pw->pw_uid == 0) GTEST_SKIP() << "needs the user " << name;
      *user = User{.uid = pw->pw_uid, .gid = pw->pw_gid, .name = name};
    }
    shared::SetUpSimWorld(Prefix(), {"GSLICE_IDLE_TIMEOUT", "GSLICE_REMOTE_TOKEN_FILE", "GSLICE_REMOTE_CA"});
    if (const std::string asan = GSLICE_TEST_ASAN_RUNTIME; !asan.empty()) setenv("LD_PRELOAD", asan.c_str(), 1);
    std::filesystem::remove_all(Dir());
    ASSERT_EQ(mkdir(Dir().c_str(), 0755), 0);
    chmod(Dir().c_str(), 0755);  // whatever the umask: the tenants reach the sockets in it
    // The workers run as the tenants: the simulated node must open for them too.
    ASSERT_NE(shared::SimUsed(), ~0ull);
    ASSERT_EQ(chmod((Prefix() + "-node").c_str(), 0666), 0);
  }

  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(Dir(), ec);
    shared::RemoveSimWorld(Prefix());
  }

  // argv run as user (no supplementary groups).
  static std::vector<std::string> As(const User& user, std::vector<std::string> argv) {
    std::vector<std::string> out = {"/usr/bin/setpriv", "--reuid=" + std::to_string(user.uid),
                                    "--regid=" + std::to_string(user.gid), "--clear-groups"};
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }

  // The attach probe through the client: it stops after its device queries, then after it has
  // written its memory (the worker running), each time until told to go on.
  static std::vector<std::string> Probe(const std::string& address) {
    return shared::Remote(address, "1GiB", {kProgram});
  }

  // Takes a probe client to "written"; returns its worker's pid (from its info log).
  static pid_t ToWritten(Child* client) {
    if (client->ReadUntil("queried", 30000).empty()) return -1;
    client->WriteLine("go");
    pid_t worker = -1;
    for (std::string line; client->ReadLine(&line, 30000);) {
      if (line.find("worker pid") != std::string::npos) worker = shared::WorkerPid(line);
      if (line == "written") return worker;
    }
    return -1;
  }

  // Lets a probe client finish: its memory intact, and exit 0.
  static void Finish(Child* client) {
    client->WriteLine("go");
    EXPECT_EQ(client->ReadUntil("intact", 30000), "intact");
    client->WriteLine("go");
    std::string rest;
    EXPECT_EQ(client->Wait(&rest, 30000), 0) << rest;
  }

  // The address a server logged for its tls:// listener.
  static std::string TlsAddress(Child* server) {
    for (int i = 0; i < 4; ++i) {
      const std::string line = server->ReadUntil("gslice-remoted: listening on", 20000);
      const size_t at = line.find("tls://");
      if (at != std::string::npos) return line.substr(at, line.find(' ', at) - at);
    }
    return "";
  }

  User a_, b_;
};

// Two local users over one unix socket (mode 0666) and a tls:// tenant of the second user: every
// worker runs as its client's uid and group, without supplementary groups or capabilities, with
// no_new_privs, under the system-call filter (Seccomp 2: its clients' programs still run), in a
// mount namespace of its own where the server's key and tenants file (left readable by everyone
// here, an operator's mistake) cannot be opened and read nothing.
TEST_F(RemoteTenants, EveryWorkerRunsAsItsClientWithoutPrivilege) {
  shared::TlsFiles files("tenants-tls");
  ASSERT_TRUE(files.ok()) << "the openssl command is needed to make the test certificates";
  chmod(files("server.key").c_str(), 0644);
  const std::string tenants = Dir() + "/tenants";
  Replace(tenants, "team-b " + b_.name + " - " + TokenDigest(files("token")) + "\n", 0644);
  const std::string socket = Dir() + "/remoted.sock";
  Child server({kBin + "/gslice-remoted", "--listen", "unix:" + socket, "--socket-mode", "0666", "--listen",
                "tls://127.0.0.1:0", "--cert", files("server.pem"), "--key", files("server.key"), "--tenants", tenants,
                "--sim"});
  const std::string tls = TlsAddress(&server);
  ASSERT_NE(tls, "");
  const std::string key = ReadAll(files("server.key"));
  ASSERT_FALSE(key.empty());
  struct Case {
    User user;
    Child* client;
  };
  Child by_a(As(a_, Probe("unix:" + socket)), {"GSLICE_LOG=info"});
  Child by_b(As(b_, Probe("unix:" + socket)), {"GSLICE_LOG=info"});
  Child over_tls(Probe(tls), {"GSLICE_LOG=info", "GSLICE_REMOTE_TOKEN_FILE=" + files("token"),
                              "GSLICE_REMOTE_CA=" + files("ca.pem")});
  for (const Case& c : {Case{a_, &by_a}, Case{b_, &by_b}, Case{b_, &over_tls}}) {
    const pid_t worker = ToWritten(c.client);
    ASSERT_GT(worker, 0);
    const std::string uid = std::to_string(c.user.uid), gid = std::to_string(c.user.gid);
    std::map<std::string, std::string> status = Status(worker);
    EXPECT_EQ(status["Uid"], uid + "\t" + uid + "\t" + uid + "\t" + uid) << c.user.name;
    EXPECT_EQ(status["Gid"], gid + "\t" + gid + "\t" + gid + "\t" + gid) << c.user.name;
    EXPECT_EQ(status["Groups"], "") << c.user.name;
    for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
      EXPECT_EQ(status[set], "0000000000000000") << c.user.name << " " << set;
    }
    EXPECT_EQ(status["NoNewPrivs"], "1") << c.user.name;
    EXPECT_EQ(status["Seccomp"], "2") << c.user.name;
    const std::string root = "/proc/" + std::to_string(worker) + "/root";
    EXPECT_NE(Link("/proc/self/ns/mnt"), Link("/proc/" + std::to_string(worker) + "/ns/mnt")) << c.user.name;
    for (const std::string& secret : {files("server.key"), tenants}) {
      EXPECT_EQ(OpenErrnoAs(c.user, root + secret), EACCES) << c.user.name << " opened " << secret;
      EXPECT_EQ(ReadAll(root + secret), "") << "the worker's view of " << secret;
    }
    // The same files outside the worker's namespace: still there for the server.
    EXPECT_EQ(ReadAll(files("server.key")), key);
  }
  for (Child* c : {&by_a, &by_b, &over_tls}) Finish(c);
  server.Kill(SIGTERM);
  server.Wait(nullptr, 10000);
}

// --syscall-filter off (for debugging): the worker runs without a filter, still confined.
TEST_F(RemoteTenants, TheSyscallFilterCanBeTurnedOff) {
  const std::string socket = Dir() + "/remoted.sock";
  Child server({kBin + "/gslice-remoted", "--listen", "unix:" + socket, "--socket-mode", "0666", "--syscall-filter",
                "off", "--sim"});
  ASSERT_NE(server.ReadUntil("gslice-remoted: listening on", 20000), "");
  Child client(As(a_, Probe("unix:" + socket)), {"GSLICE_LOG=info"});
  const pid_t worker = ToWritten(&client);
  ASSERT_GT(worker, 0);
  std::map<std::string, std::string> status = Status(worker);
  EXPECT_EQ(status["Seccomp"], "0");
  EXPECT_EQ(status["NoNewPrivs"], "1");
  Finish(&client);
  server.Kill(SIGTERM);
  server.Wait(nullptr, 10000);
}

// --syscall-filter takes on or off; anything else is refused before the server listens.
TEST(RemoteServerOptions, AnUnknownSyscallFilterValueIsRefused) {
  const shared::Result r = shared::RunProgram({kBin + "/gslice-remoted", "--listen", "unix:/nonexistent/remoted.sock",
                                               "--syscall-filter", "bogus"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--syscall-filter 'bogus': on"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("listening"), std::string::npos) << r.out;
}

// A client of uid 0 has no worker unless the server allows root tenants.
TEST_F(RemoteTenants, ARootClientIsRefusedUnlessAllowed) {
  const std::string socket = Dir() + "/remoted.sock";
  Child server({kBin + "/gslice-remoted", "--listen", "unix:" + socket, "--sim"});
  ASSERT_NE(server.ReadUntil("gslice-remoted: listening on", 20000), "");
  shared::Result r = shared::RunProgram(shared::Remote("unix:" + socket, "1GiB", {kBin + "/gslice-example"}));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--allow-root-tenant"), std::string::npos) << r.out;
  EXPECT_NE(server.ReadUntil("gslice-remoted: refused a client", 20000).find("uid 0"), std::string::npos);
  server.Kill(SIGTERM);
  server.Wait(nullptr, 10000);
}

// gsliced sees a remote slice as its client's: its owner is the client's uid, and another user
// can neither delete, suspend nor change it; the client runs on undisturbed. A tls:// tenant's
// slice is its user's, in its project.
TEST_F(RemoteTenants, OneTenantCannotChangeAnothersRemoteSlice) {
  shared::TlsFiles files("tenants-gsliced");
  ASSERT_TRUE(files.ok()) << "the openssl command is needed to make the test certificates";
  const std::string tenants = Dir() + "/tenants";
  Replace(tenants, "team-b " + b_.name + " vision " + TokenDigest(files("token")) + "\n", 0600);
  const std::string api = Dir() + "/api.sock", socket = Dir() + "/remoted.sock";
  std::ofstream(Dir() + "/gsliced.toml") << "socket = \"" << api << "\"\n"
                                        << "socket_mode = \"0666\"\n"
                                        << "database = \"" << Dir() << "/state/gsliced.db\"\n"
                                        << "ledger = \"" << Prefix() << "-ledger\"\n";
  Child daemon({kBin + "/gsliced", "--sim", "--config", Dir() + "/gsliced.toml"});
  auto cli = [&](const User* user, std::vector<std::string> args, std::string* out) {
    args.insert(args.begin(), kBin + "/gslice");
    args.insert(args.end(), {"--socket", api});
    Child c(user != nullptr ? As(*user, args) : args);
    return c.Wait(out, 20000);
  };
  std::string out;
  bool up = false;
  for (int i = 0; i < 200 && !up; ++i) {
    up = cli(nullptr, {"ls", "--json"}, &out) == 0;
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(up) << out;
  // Without the sanitize build's preloaded runtime: curl is not built with it.
  ASSERT_EQ(std::system(("unset LD_PRELOAD && curl -sf --max-time 20 --unix-socket " + api +
                         " -X POST -d '{\"name\":\"vision\"}' http://gsliced/v1/projects > /dev/null")
                            .c_str()),
            0);
  Child server({kBin + "/gslice-remoted", "--listen", "unix:" + socket, "--socket-mode", "0666", "--listen",
                "tls://127.0.0.1:0", "--cert", files("server.pem"), "--key", files("server.key"), "--tenants", tenants,
                "--sim"},
               {"GSLICE_SOCKET=" + api});
  const std::string tls = TlsAddress(&server);
  ASSERT_NE(tls, "");
  Child client(As(a_, Probe("unix:" + socket)), {"GSLICE_LOG=info"});
  ASSERT_GT(ToWritten(&client), 0);
  // The remote slice whose client names `who`, as the other user lists it.
  auto remote_slice = [&](const std::string& who = "unix pid") -> json {
    std::string listed;
    if (cli(&b_, {"ls", "--json"}, &listed) != 0) return nullptr;
    json node = json::parse(listed, nullptr, false);
    if (!node.is_object()) return nullptr;
    for (const json& s : node["slices"])
      if (s["remote"].is_object() && s["remote"]["client"].get<std::string>().find(who) != std::string::npos) return s;
    return nullptr;
  };
  json slice = remote_slice();
  ASSERT_TRUE(slice.is_object());
  EXPECT_EQ(slice["owner_uid"], a_.uid) << slice;
  const std::string name = slice["name"];
  EXPECT_NE(cli(&b_, {"delete", name}, &out), 0) << out;
  EXPECT_NE(cli(&b_, {"suspend", name}, &out), 0) << out;
  EXPECT_NE(cli(&b_, {"set", name, "--memory", "512MiB"}, &out), 0) << out;
  slice = remote_slice();
  ASSERT_TRUE(slice.is_object()) << "the other user's delete took the slice";
  EXPECT_EQ(slice["remote"]["state"], "attached") << slice;
  EXPECT_NE(slice.dump().find(std::to_string(1ull << 30)), std::string::npos) << slice;
  Finish(&client);
  Child tenant(Probe(tls), {"GSLICE_REMOTE_TOKEN_FILE=" + files("token"), "GSLICE_REMOTE_CA=" + files("ca.pem")});
  ASSERT_NE(tenant.ReadUntil("queried", 30000), "");
  tenant.WriteLine("go");
  ASSERT_EQ(tenant.ReadUntil("written", 30000), "written");
  slice = remote_slice("tenant team-b");
  ASSERT_TRUE(slice.is_object());
  EXPECT_EQ(slice["owner_uid"], b_.uid) << slice;
  EXPECT_EQ(slice["project"], "vision") << slice;
  Finish(&tenant);
  server.Kill(SIGTERM);
  server.Wait(nullptr, 10000);
  daemon.Kill(SIGTERM);
  daemon.Wait(nullptr, 10000);
}

// A tenant removed from the tenants file (no restart) loses its live session and its token; the
// other tenant's session goes on to the end.
TEST_F(RemoteTenants, ARevokedTokenEndsItsSessionsAndNobodyElses) {
  shared::TlsFiles files("tenants-revoke");
  ASSERT_TRUE(files.ok()) << "the openssl command is needed to make the test certificates";
  const std::string tenants = Dir() + "/tenants";
  const std::string line_a = "team-a " + a_.name + " - " + TokenDigest(files("token")) + "\n";
  const std::string line_b = "team-b " + b_.name + " - " + TokenDigest(files("wrong")) + "\n";
  Replace(tenants, "# tenants\n" + line_a + line_b, 0600);
  Child server({kBin + "/gslice-remoted", "--listen", "tls://127.0.0.1:0", "--cert", files("server.pem"), "--key",
                files("server.key"), "--tenants", tenants, "--sim"});
  const std::string tls = TlsAddress(&server);
  ASSERT_NE(tls, "");
  auto env = [&](const std::string& token) {
    return std::vector<std::string>{"GSLICE_LOG=info", "GSLICE_REMOTE_TOKEN_FILE=" + files(token),
                                    "GSLICE_REMOTE_CA=" + files("ca.pem")};
  };
  Child client_a(Probe(tls), env("token"));
  Child client_b(Probe(tls), env("wrong"));
  const pid_t worker_a = ToWritten(&client_a), worker_b = ToWritten(&client_b);
  ASSERT_GT(worker_a, 0);
  ASSERT_GT(worker_b, 0);
  EXPECT_EQ(Status(worker_a)["Uid"].substr(0, Status(worker_a)["Uid"].find('\t')), std::to_string(a_.uid));
  EXPECT_EQ(Status(worker_b)["Uid"].substr(0, Status(worker_b)["Uid"].find('\t')), std::to_string(b_.uid));
  Replace(tenants, "# tenants\n" + line_b, 0600);
  EXPECT_NE(server.ReadUntil("gslice-remoted: tenant team-a", 30000), "");
  EXPECT_TRUE(shared::GoneWithin(worker_a, 30000)) << "the revoked tenant's worker runs on";
  EXPECT_FALSE(shared::Gone(worker_b)) << "the other tenant's worker ended";
  client_a.WriteLine("go");
  std::string rest;
  EXPECT_NE(client_a.Wait(&rest, 30000), 0) << rest;
  Finish(&client_b);
  // The token is refused from now on.
  shared::Result again = shared::RunProgram(shared::Remote(tls, "1GiB", {kBin + "/gslice-example"}), env("token"));
  EXPECT_NE(again.code, 0);
  EXPECT_NE(again.out.find("wrong token"), std::string::npos) << again.out;
  server.Kill(SIGTERM);
  server.Wait(nullptr, 10000);
}

// Opens n connections to a unix socket as user and holds them: nothing sent, garbage, or a
// frame cut short. Writes one byte to `ready` once all are open (or refused), then holds them
// until `release` reaches its end (the test closed its other end, `keep`: closed here).
pid_t Flood(const User& user, const std::string& path, int n, int ready, int release, int keep) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  close(keep);
  if (setgroups(0, nullptr) != 0 || setresgid(user.gid, user.gid, user.gid) != 0 ||
      setresuid(user.uid, user.uid, user.uid) != 0) {
    _exit(1);
  }
  sockaddr_un sa = {};
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, path.c_str(), path.size());
  std::vector<int> fds;
  static const char kGarbage[] = "GET / HTTP/1.1\r\nHost: gslice\r\n\r\n\xff\xfe\x00\x01 not a frame at all";
  static const char kCut[] = {0x10, 0x00};
  for (int i = 0; i < n; ++i) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      if (fd >= 0) close(fd);
      continue;
    }
    if (i % 3 == 1) (void)!send(fd, kGarbage, sizeof kGarbage, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (i % 3 == 2) (void)!send(fd, kCut, sizeof kCut, MSG_NOSIGNAL | MSG_DONTWAIT);
    fds.push_back(fd);
  }
  (void)!write(ready, "1", 1);
  char byte;
  while (read(release, &byte, 1) < 0 && errno == EINTR) {
  }
  for (int fd : fds) close(fd);
  _exit(0);
}

// One user's flood of connections (hundreds: silent, garbage, cut short) holds at most its
// share of the server's sessions, and another user's client is served to the end meanwhile.
TEST_F(RemoteTenants, OneUsersFloodLeavesAnotherServed) {
  const std::string socket = Dir() + "/remoted.sock";
  Child server({kBin + "/gslice-remoted", "--listen", "unix:" + socket, "--socket-mode", "0666", "--max-connections",
                "16", "--sim"});
  ASSERT_NE(server.ReadUntil("gslice-remoted: listening on", 20000), "");
  int ready[2], release[2];
  ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(release, O_CLOEXEC), 0);
  const pid_t flood = Flood(a_, socket, 300, ready[1], release[0], release[1]);
  ASSERT_GT(flood, 0);
  close(ready[1]);
  close(release[0]);
  pollfd p = {ready[0], POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 120000), 1) << "the flood did not get its connections open";
  EXPECT_NE(server.ReadUntil("gslice-remoted: refused a connection of uid " + std::to_string(a_.uid), 20000), "");
  // The listener itself and its sessions (forks of it: their command line is the listener's).
  const int sessions = shared::CountDescendants(server.pid(), "--max-connections") - 1;
  EXPECT_LE(sessions, 16) << "sessions held open by one user's flood";
  shared::Result served =
      shared::RunProgram(As(b_, shared::Remote("unix:" + socket, "1GiB", {kBin + "/gslice-example"})), {}, 120000);
  EXPECT_EQ(served.code, 0) << served.out;
  EXPECT_NE(served.out.find("all checks passed"), std::string::npos) << served.out;
  close(release[1]);
  close(ready[0]);
  int status = 0;
  waitpid(flood, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  server.Kill(SIGTERM);
  server.Wait(nullptr, 10000);
}

}  // namespace
