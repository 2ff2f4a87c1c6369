#include "session.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "calls.h"
#include "gslice/clock.h"
#include "gslice/options.h"
#include "peer_uid.h"
#include "privilege.h"
#include "probe.h"
#include "session_control.h"
#include "socket_io.h"
#include "wire.h"

namespace gslice::remote {
namespace {

std::string SelfExe() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return buf;
}

bool SendRefusal(const Channel& c, const std::string& message) {
  Writer w;
  EncodeHelloReply(HelloReply{.status = 1, .worker_pid = 0, .message = message}, &w);
  return WriteFrame(c, FrameHeader{.seq = 0, .op = kOpHello | kReplyBit}, w.buffer().data(), w.size());
}

// Ends a refused connection so that the refusal reaches the client: closing with unread input
// (the handshake the client sent after its token) would reset the connection and could discard
// the refusal before the client reads it. Drains for at most 1 s.
void CloseGently(int fd) {
  shutdown(fd, SHUT_WR);
  char buf[4096];
  const int64_t deadline_ms = MonotonicMs() + 1000;
  for (;;) {
    const int64_t left_ms = deadline_ms - MonotonicMs();
    pollfd p = {fd, POLLIN, 0};
    if (left_ms <= 0 || poll(&p, 1, static_cast<int>(left_ms)) <= 0) break;
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
  }
}

// Relays between a TLS client and its worker's socket pair, one thread each way (the session
// is thread-safe, tls.h). The client closing closes the worker's end (its watcher ends it).
struct Relay {
  Channel client;
  int worker = -1;
};

void* RelayToWorker(void* arg) {
  auto* r = static_cast<Relay*>(arg);
  std::vector<char> buf(256 * 1024);
  for (;;) {
    const ssize_t n = TlsRead(r->client.tls, buf.data(), buf.size());
    if (n <= 0 || !WriteAll(r->worker, buf.data(), static_cast<size_t>(n))) break;
  }
  shutdown(r->worker, SHUT_RDWR);  // the worker's watcher ends it
  return nullptr;
}

void* RelayToClient(void* arg) {
  auto* r = static_cast<Relay*>(arg);
  std::vector<char> buf(256 * 1024);
  for (;;) {
    const ssize_t n = read(r->worker, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || !TlsWriteAll(r->client.tls, buf.data(), static_cast<size_t>(n))) break;
  }
  return nullptr;  // the session closes the client's connection once the worker is gone
}

// Who a session serves, as `gslice ls` shows it: the host the client names, and its peer
// as this side sees it (a unix socket's peer pid and uid, a TCP peer's address).
std::string ClientOf(int fd, const std::string& host) {
  std::string peer;
  sockaddr_storage sa = {};
  socklen_t len = sizeof sa;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0 && sa.ss_family == AF_UNIX) {
    ucred cred = {};
    socklen_t clen = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0) {
      peer = "unix pid " + std::to_string(cred.pid) + " uid " + std::to_string(cred.uid);
    }
  } else if (sa.ss_family == AF_INET || sa.ss_family == AF_INET6) {
    char text[INET6_ADDRSTRLEN] = {};
    int port = 0;
    if (sa.ss_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(&sa);
      inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
      port = ntohs(in->sin_port);
      peer = std::string("tcp ") + text + ":" + std::to_string(port);
    } else {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&sa);
      inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
      port = ntohs(in6->sin6_port);
      peer = std::string("tcp [") + text + "]:" + std::to_string(port);
    }
  }
  if (host.empty()) return peer.empty() ? "unknown" : peer;
  return peer.empty() ? host : host + " (" + peer + ")";
}

// The driver a probe loads: the simulated one beside this binary, or the node's.
std::string ProbeDriver(bool sim) {
  if (sim) {
    const std::string self = SelfExe();
    return self.substr(0, self.rfind('/') + 1) + "../lib/sim/libcuda.so.1";
  }
  const char* real = OptionValue(Option::RealDriver);
  return real[0] != '\0' ? real : "libcuda.so.1";
}

// The NVML a probe loads: the simulated one beside this binary, or the node's.
std::string ProbeNvml(bool sim) {
  if (sim) {
    const std::string self = SelfExe();
    return self.substr(0, self.rfind('/') + 1) + "../lib/sim/libnvidia-ml.so.1";
  }
  const char* real = OptionValue(Option::RealNvml);
  return real[0] != '\0' ? real : "libnvidia-ml.so.1";
}

pid_t g_worker = 0;
void ForwardStop(int sig) {
  if (g_worker > 0) kill(g_worker, sig);
}

// Removes the worker's timeline folder and the parts left in it (what its shim recorded after
// the client's last fetch, written at its exit).
void RemoveTraceFolder(const std::string& folder) {
  if (DIR* d = opendir(folder.c_str())) {
    while (dirent* e = readdir(d)) {
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) unlink((folder + "/" + e->d_name).c_str());
    }
    closedir(d);
  }
  rmdir(folder.c_str());
}


// Whom a session serves: the identity its processes take, and how the log and `gslice ls`
// name the client.
struct Client {
  Identity identity;
  std::string peer;    // for the log: an address, "a unix socket"
  std::string tenant;   // tls://: the tenant's name
  std::string project;  // tls://: the tenant's project ("" none)
};

// A TLS client's first frame: its token, and its tenant, which the listener must still know and
// let in. False (the client refused, the refusal logged) otherwise.
bool CheckToken(const Channel& c, const SessionSetup& setup, Client* client) {
  FrameHeader h;
  std::vector<uint8_t> payload;
  const FrameRead got = ReadFrame(c, kMaxToken, &h, &payload);
  std::string why, told;
  const Tenant* tenant = nullptr;
  if (got != FrameRead::kOk || h.op != kOpToken) {
    why = "no token";
    if (got == FrameRead::kOk) told = "this server wants a token (GSLICE_REMOTE_TOKEN_FILE)";
  } else if ((tenant = setup.tenants->Find(payload.data(), payload.size(), &why)) == nullptr) {
    if (why.empty()) why = "wrong token";
    told = "wrong token (GSLICE_REMOTE_TOKEN_FILE)";
  } else if (!AskListener(setup.control, TenantRequest(*tenant), &told)) {
    why = "tenant " + tenant->name + ": " + told;
    told = "tenant " + tenant->name + ": " + told;
  } else {
    client->identity = Identity{.uid = tenant->uid, .gid = tenant->gid};
    client->tenant = tenant->name;
    client->project = tenant->project;
    return true;
  }
  fprintf(stderr, "gslice-remoted: refused a client from %s: %s\n", client->peer.c_str(), why.c_str());
  if (!told.empty()) SendRefusal(c, told);
  CloseGently(c.fd);
  return false;
}

// Step 1 (session.h): who the client is. False when it is refused (logged, and told).
bool Identify(Channel* channel, const SessionSetup& setup, Client* client) {
  std::string error;
  client->peer = PeerName(channel->fd);
  if (setup.tls != nullptr) {
    channel->tls = TlsAccept(setup.tls, channel->fd, setup.handshake_timeout_s * 1000, &error);
    if (channel->tls == nullptr) {
      fprintf(stderr, "gslice-remoted: refused a client from %s: %s\n", client->peer.c_str(), error.c_str());
      return false;
    }
    return CheckToken(*channel, setup, client);
  }
  PeerUser user;
  if (LocalPeer(channel->fd, &user, &error) && UidAllowed(user.uid, setup.rules, &error)) {
    client->identity = Identity{.uid = user.uid, .gid = user.gid};
    return true;
  }
  fprintf(stderr, "gslice-remoted: refused a client from %s: %s\n", client->peer.c_str(), error.c_str());
  SendRefusal(*channel, error);
  CloseGently(channel->fd);
  return false;
}

// Step 3: the client's hello, whole and small. False (logged, the client told where it can be)
// when it is not one.
bool ReadHello(const Channel& channel, uint32_t* op, Hello* hello) {
  FrameHeader h;
  std::vector<uint8_t> payload;
  const FrameRead got = ReadFrame(channel, 4096, &h, &payload);
  if (got != FrameRead::kOk || (h.op != kOpHello && h.op != kOpProbe)) {
    fprintf(stderr, "gslice-remoted: a client that does not speak the protocol: connection closed\n");
    return false;
  }
  *op = h.op;
  Reader r(payload.data(), payload.size());
  std::string error;
  if (!DecodeHello(&r, hello, &error)) {
    SendRefusal(channel, error);
    fprintf(stderr, "gslice-remoted: refused a client: %s\n", error.c_str());
    return false;
  }
  if (hello->calls_hash != kCallsHash) {
    SendRefusal(channel, "the client and gslice-remoted forward different call lists (remote/calls.def): "
                         "use the same gslice build on both sides");
    return false;
  }
  if (hello->memory.empty()) {
    SendRefusal(channel, "no memory limit asked for: run the program with gslice run --remote ADDR --memory SIZE");
    return false;
  }
  return true;
}

// The worker's command line: `gslice run` with the client's slice, then this build's worker.
std::vector<std::string> WorkerCommand(const Hello& hello, const std::string& shown, const std::string& project,
                                       bool sim, int worker_fd, int log_fd) {
  std::string self = SelfExe();
  std::string worker = self;
  const std::string deleted = " (deleted)";
  if (self.size() > deleted.size() && self.compare(self.size() - deleted.size(), deleted.size(), deleted) == 0) {
    // The binary was replaced on disk while the server runs: the worker is still this build,
    // through this session's /proc entry (the session lives while the worker starts).
    self.resize(self.size() - deleted.size());
    worker = "/proc/" + std::to_string(getpid()) + "/exe";
  }
  const std::string gslice = self.substr(0, self.rfind('/') + 1) + "gslice";
  std::vector<std::string> args = {gslice, "run", "--memory=" + hello.memory};
  if (!hello.compute.empty()) args.push_back("--cap=" + hello.compute);
  if (!hello.share.empty()) args.push_back("--share=" + hello.share);
  if (!hello.slice_class.empty()) args.push_back("--class=" + hello.slice_class);
  if (!hello.idle_timeout.empty()) args.push_back("--idle-timeout=" + hello.idle_timeout);
  args.push_back("--remote-client=" + shown);
  if (!project.empty()) args.push_back("--project=" + project);
  args.push_back("--name=remote-" + std::to_string(getpid()));
  if (sim) args.push_back("--sim");
  args.insert(args.end(),
              {"--", worker, "--worker-fd", std::to_string(worker_fd), "--log-fd", std::to_string(log_fd)});
  return args;
}

// A folder for the worker's timeline (mode 0700, the client's uid's), or "" (logged).
std::string MakeTraceFolder() {
  const char* tmp = getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp") + "/gslice-remote-trace-XXXXXX";
  if (mkdtemp(pattern.data()) != nullptr) return pattern;
  fprintf(stderr, "gslice-remoted: cannot make a folder for the worker's timeline (%s): %s; it records none\n",
          pattern.c_str(), strerror(errno));
  return "";
}

// Starts the worker (g_worker); what `gslice run` says before the worker takes over its stderr
// comes on *errors_read.
bool StartWorker(std::vector<std::string> args, int worker_fd, const std::string& trace_folder, int* errors_read) {
  int errors[2];
  if (pipe2(errors, O_CLOEXEC) != 0) return false;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  g_worker = fork();
  if (g_worker == 0) {
    dup2(errors[1], STDERR_FILENO);
    fcntl(worker_fd, F_SETFD, 0);
    if (trace_folder.empty()) unsetenv(OptionEnv(Option::Trace));
    else setenv(OptionEnv(Option::Trace), trace_folder.c_str(), 1);
    execv(argv[0], argv.data());
    fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(errors[1]);
  if (g_worker < 0) {
    close(errors[0]);
    return false;
  }
  *errors_read = errors[0];
  return true;
}

// Copies what `gslice run` says to the server's log until the worker's end; returns its start.
std::string EchoUntilClosed(int fd) {
  std::string said;
  char buf[1024];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (said.size() < 4096) said.append(buf, static_cast<size_t>(n));
    ssize_t w = write(STDERR_FILENO, buf, static_cast<size_t>(n));
    (void)w;
  }
  close(fd);
  return said;
}

// The worker's part of the session: `gslice run ... -- gslice-remoted --worker-fd N`, the relay
// over TLS, and the refusal `gslice run` gave, if any.
int RunSlice(const Channel& channel, bool sim, const Hello& hello, const Client& client) {
  // The worker's socket: the client's own, or over TLS one end of a pair this session relays.
  int worker_fd = channel.fd;
  int pair[2] = {-1, -1};
  if (channel.tls != nullptr) {
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return 1;
    WidenBuffers(pair[0]);
    WidenBuffers(pair[1]);
    worker_fd = pair[1];
  }
  const int log_fd = dup(STDERR_FILENO);  // the worker's own log (without CLOEXEC)
  // A client that records a timeline: the worker records too, its shim's part going to a
  // folder of this session's, removed when the worker ends (worker.cc: Trace).
  const std::string trace_folder = hello.trace ? MakeTraceFolder() : "";
  int errors = -1;
  std::string shown = ClientOf(channel.fd, hello.host);
  if (!client.tenant.empty()) shown += ", tenant " + client.tenant;
  const bool started = StartWorker(WorkerCommand(hello, shown, client.project, sim, worker_fd, log_fd), worker_fd,
                                   trace_folder, &errors);
  close(log_fd);
  if (!started) return 1;
  Relay relay{.client = channel, .worker = pair[0]};
  pthread_t relays[2];
  bool relaying = false;
  if (channel.tls != nullptr) {
    close(pair[1]);
    relaying = pthread_create(&relays[0], nullptr, RelayToWorker, &relay) == 0 &&
               pthread_create(&relays[1], nullptr, RelayToClient, &relay) == 0;
    if (!relaying) kill(g_worker, SIGKILL);
  }
  struct sigaction forward = {};
  forward.sa_handler = ForwardStop;
  sigaction(SIGTERM, &forward, nullptr);
  sigaction(SIGINT, &forward, nullptr);
  std::string said = EchoUntilClosed(errors);
  int status = 0;
  while (waitpid(g_worker, &status, 0) < 0 && errno == EINTR) {
  }
  if (relaying) pthread_join(relays[1], nullptr);  // what the worker said last reaches the client
  if (!trace_folder.empty()) RemoveTraceFolder(trace_folder);
  if (WIFEXITED(status) && (WEXITSTATUS(status) == 2 || WEXITSTATUS(status) == 127)) {
    while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
    SendRefusal(channel, said.empty() ? "the worker could not start (see the server's log)" : said);
  }
  if (channel.tls != nullptr) shutdown(channel.fd, SHUT_RDWR);
  return 0;  // the relay to the worker ends with the process
}

}  // namespace

int Session(int fd, const SessionSetup& setup) {
  alarm(static_cast<unsigned>(setup.handshake_timeout_s));  // the whole handshake; SIGALRM ends the session
  Channel channel{.fd = fd};
  Client client;
  if (!Identify(&channel, setup, &client)) return 0;
  std::string error;
  const Confinement confinement{.identity = client.identity,
                                .hidden = setup.hidden,
                                .placeholder = setup.placeholder,
                                .syscall_filter = setup.syscall_filter,
                                .syscall_log = setup.syscall_log};
  if (!Confine(confinement, &error)) {
    fprintf(stderr, "gslice-remoted: cannot run anything for a client from %s as uid %u: %s\n", client.peer.c_str(),
            static_cast<unsigned>(client.identity.uid), error.c_str());
    SendRefusal(channel, "the server cannot confine a worker for this client (see the server's log)");
    CloseGently(fd);
    return 0;
  }
  uint32_t op = 0;
  Hello hello;
  if (!ReadHello(channel, &op, &hello)) return 0;
  alarm(0);
  if (op == kOpProbe) {
    // Device queries before the client's first GPU call: no worker, no slice (attach.h).
    return RunProbe(channel, ProbeOptions{.driver = ProbeDriver(setup.sim), .nvml = ProbeNvml(setup.sim), .memory = hello.memory});
  }
  if (!AskListener(setup.control, kWorkerRequest, &error)) {
    const std::string who = client.tenant.empty() ? "uid " + std::to_string(client.identity.uid) : "tenant " + client.tenant;
    fprintf(stderr, "gslice-remoted: refused a worker to %s: %s\n", who.c_str(), error.c_str());
    SendRefusal(channel, who + ": " + error);
    return 0;
  }
  return RunSlice(channel, setup.sim, hello, client);
}

}  // namespace gslice::remote
