// gslice-remoted: serves remote GPUs to forwarding clients (docs/remote.md).
//
//   gslice-remoted --listen unix:PATH|tcp://HOST:PORT|tls://HOST:PORT [--listen ...] [--sim]
//                  [--cert FILE --key FILE --token-file FILE]
//
// Each connection gets its own session process. The session reads the client's handshake
// and runs `gslice run --memory ... [--sim] -- gslice-remoted --worker-fd N`, so the worker
// runs in a slice exactly like a local program: under the gslice shim, admitted by gsliced
// where one runs, limited and metered alike. The session waits for its worker and tells the
// client why when `gslice run` refused. A probe's session (the client has not made a call that
// needs a GPU yet, attach.h) instead loads the driver itself and answers device queries, with
// no worker and no slice. The listening process never loads a driver.
//
// Security: plain TCP is served on loopback addresses only; other machines are served over
// tls:// only, where the session first completes a TLS handshake (the server's certificate and
// key) and then compares the client's token with --token-file's in constant time. A failed
// handshake or a wrong or missing token is logged and the connection closed before any worker
// starts. The worker never sees TLS: the session relays between the TLS connection and a
// socket pair whose other end is the worker's. Unix sockets are made mode 0600.
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "calls.h"
#include "gslice/options.h"
#include "probe.h"
#include "socket_io.h"
#include "tls.h"
#include "token.h"
#include "worker.h"

namespace gslice::remote {
namespace {

const char kUsage[] =
    "usage: gslice-remoted --listen ADDR [--listen ADDR ...] [--sim]\n"
    "                      [--cert FILE --key FILE --token-file FILE]\n"
    "\n"
    "Serves this node's GPUs to programs on other machines or containers that run with\n"
    "gslice's forwarding libcuda.so.1 (gslice run --remote ADDR ...). Every client gets its own\n"
    "worker process in a slice of the memory/compute it asks for, like gslice run.\n"
    "\n"
    "  --listen ADDR  unix:PATH (made mode 0600), tcp://HOST:PORT on a loopback address\n"
    "                 (127.0.0.1, ::1, localhost; port 0 picks a free one), or tls://HOST:PORT\n"
    "                 on any address: TLS, and clients must send the token of --token-file.\n"
    "  --cert FILE    the server's certificate chain (PEM), for tls://.\n"
    "  --key FILE     its private key (PEM), for tls://.\n"
    "  --token-file FILE  the token clients must send over tls:// (its first line, at least 16\n"
    "                 characters; the file mode 0600). Clients read theirs from\n"
    "                 GSLICE_REMOTE_TOKEN_FILE.\n"
    "  --sim          serve gslice's simulated driver (build/lib/sim) instead of a real GPU.\n"
    "  -h, --help     this text.\n";

volatile sig_atomic_t g_stop = 0;
void OnStop(int) { g_stop = 1; }

std::string SelfExe() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return buf;
}

bool Loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
    return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

struct Listener {
  int fd = -1;
  Address address;
  std::string shown;  // what the log says (the real port when 0 was asked for)
};

bool ListenUnix(Listener* l, std::string* error) {
  const std::string& path = l->address.path;
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      *error = path + " exists and is not a socket";
      return false;
    }
    std::string ignored;
    int probe = Connect(l->address, &ignored);
    if (probe >= 0) {
      close(probe);
      *error = path + " is served by another process";
      return false;
    }
    unlink(path.c_str());  // a stale socket of a server that is gone
  }
  l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un sa = {};
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path, path.c_str(), path.size());
  const mode_t old = umask(0177);
  const int rc = bind(l->fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  umask(old);
  if (rc != 0 || listen(l->fd, 64) != 0) {
    *error = "cannot listen on " + l->address.text + ": " + strerror(errno);
    return false;
  }
  l->shown = l->address.text;
  return true;
}

bool ListenTcp(Listener* l, std::string* error) {
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(l->address.host.c_str(), l->address.port.c_str(), &hints, &res);
  if (rc != 0) {
    *error = l->address.text + ": " + gai_strerror(rc);
    return false;
  }
  for (addrinfo* ai = res; ai != nullptr && !l->address.tls; ai = ai->ai_next) {
    if (!Loopback(ai->ai_addr)) {
      freeaddrinfo(res);
      const std::string host_port = l->address.text.substr(6);
      *error = l->address.text +
               ": not a loopback address. gslice-remoted serves other machines only with token "
               "authentication and TLS: --listen tls://" + host_port +
               " --cert FILE --key FILE --token-file FILE (or listen on 127.0.0.1 and reach it through an "
               "ssh tunnel)";
      return false;
    }
  }
  addrinfo* ai = res;
  l->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
  int one = 1;
  setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (l->fd < 0 || bind(l->fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(l->fd, 64) != 0) {
    *error = "cannot listen on " + l->address.text + ": " + strerror(errno);
    freeaddrinfo(res);
    return false;
  }
  freeaddrinfo(res);
  sockaddr_storage bound = {};
  socklen_t len = sizeof bound;
  getsockname(l->fd, reinterpret_cast<sockaddr*>(&bound), &len);
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (bound.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&bound);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
    l->shown = std::string(l->address.tls ? "tls://" : "tcp://") + host + ":" + std::to_string(port);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&bound);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
    l->shown = std::string(l->address.tls ? "tls://[" : "tcp://[") + host + "]:" + std::to_string(port);
  }
  return true;
}

bool SendRefusal(const Channel& c, const std::string& message) {
  Writer w;
  EncodeHelloReply(HelloReply{.status = 1, .worker_pid = 0, .message = message}, &w);
  return WriteFrame(c, FrameHeader{.seq = 0, .op = kOpHello | kReplyBit}, w.buffer().data(), w.size());
}

// What tls:// listeners need, loaded once at start.
struct TlsListening {
  TlsServer* server = nullptr;
  std::string token;
};

// Who connected, for the log.
std::string PeerName(int fd) {
  sockaddr_storage peer = {};
  socklen_t len = sizeof peer;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  if (peer.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&peer);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (peer.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&peer);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    return std::string("[") + host + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "a unix socket";
}

// Ends a refused connection so that the refusal reaches the client: closing with unread input
// (the handshake the client sent after its token) would reset the connection and could discard
// the refusal before the client reads it. Drains for at most 1 s.
void CloseGently(int fd) {
  shutdown(fd, SHUT_WR);
  char buf[4096];
  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const long long left_ms = 1000 - ((now.tv_sec - start.tv_sec) * 1000LL + (now.tv_nsec - start.tv_nsec) / 1000000);
    pollfd p = {fd, POLLIN, 0};
    if (left_ms <= 0 || poll(&p, 1, static_cast<int>(left_ms)) <= 0) break;
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
  }
}

// A TLS client's first frame: its token. False (the client refused, the refusal logged) when
// it is missing or wrong.
bool CheckToken(const Channel& c, const std::string& token, const std::string& peer) {
  FrameHeader h;
  std::vector<uint8_t> payload;
  const FrameRead got = ReadFrame(c, kMaxToken, &h, &payload);
  if (got != FrameRead::kOk || h.op != kOpToken) {
    fprintf(stderr, "gslice-remoted: refused a client from %s: no token\n", peer.c_str());
    if (got == FrameRead::kOk) SendRefusal(c, "this server wants a token (GSLICE_REMOTE_TOKEN_FILE)");
    CloseGently(c.fd);
    return false;
  }
  if (!TokenEquals(token, payload.data(), payload.size())) {
    fprintf(stderr, "gslice-remoted: refused a client from %s: wrong token\n", peer.c_str());
    SendRefusal(c, "wrong token (GSLICE_REMOTE_TOKEN_FILE)");
    CloseGently(c.fd);
    return false;
  }
  return true;
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

// One client's session: over tls://, the TLS handshake and the token; then the handshake, and
// `gslice run ... -- gslice-remoted --worker-fd N`.
int Session(int fd, bool sim, const TlsListening* tls) {
  Channel channel{.fd = fd};
  std::string error;
  if (tls != nullptr) {
    const std::string peer = PeerName(fd);
    channel.tls = TlsAccept(tls->server, fd, 10000, &error);
    if (channel.tls == nullptr) {
      fprintf(stderr, "gslice-remoted: refused a client from %s: %s\n", peer.c_str(), error.c_str());
      return 0;
    }
    // The token and the handshake must come within 10 s (the session ends on SIGALRM).
    alarm(10);
    if (!CheckToken(channel, tls->token, peer)) return 0;
  }
  // The handshake must come whole within 10 s and be small.
  timeval limit = {.tv_sec = 10, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  FrameHeader h;
  std::vector<uint8_t> payload;
  const FrameRead got = ReadFrame(channel, 4096, &h, &payload);
  timeval none = {.tv_sec = 0, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
  alarm(0);
  if (got != FrameRead::kOk || (h.op != kOpHello && h.op != kOpProbe)) {
    fprintf(stderr, "gslice-remoted: a client that does not speak the protocol: connection closed\n");
    return 0;
  }
  Reader r(payload.data(), payload.size());
  Hello hello;
  if (!DecodeHello(&r, &hello, &error)) {
    SendRefusal(channel, error);
    fprintf(stderr, "gslice-remoted: refused a client: %s\n", error.c_str());
    return 0;
  }
  if (hello.calls_hash != kCallsHash) {
    SendRefusal(channel, "the client and gslice-remoted forward different call lists (remote/calls.def): "
                    "use the same gslice build on both sides");
    return 0;
  }
  if (hello.memory.empty()) {
    SendRefusal(channel, "no memory limit asked for: run the program with gslice run --remote ADDR --memory SIZE");
    return 0;
  }
  if (h.op == kOpProbe) {
    // Device queries before the client's first GPU call: no worker, no slice (attach.h).
    return RunProbe(channel, ProbeOptions{.driver = ProbeDriver(sim), .nvml = ProbeNvml(sim), .memory = hello.memory});
  }
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
  args.push_back("--remote-client=" + ClientOf(fd, hello.host));
  args.push_back("--name=remote-" + std::to_string(getpid()));
  if (sim) args.push_back("--sim");
  // The worker's socket: the client's own, or over TLS one end of a pair this session relays.
  int worker_fd = fd;
  int pair[2] = {-1, -1};
  if (channel.tls != nullptr) {
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return 1;
    WidenBuffers(pair[0]);
    WidenBuffers(pair[1]);
    worker_fd = pair[1];
  }
  const int log_fd = dup(STDERR_FILENO);  // the worker's own log (without CLOEXEC)
  args.insert(args.end(),
              {"--", worker, "--worker-fd", std::to_string(worker_fd), "--log-fd", std::to_string(log_fd)});
  // A client that records a timeline: the worker records too, its shim's part going to a
  // folder of this session's (mode 0700), removed when the worker ends (worker.cc: Trace).
  std::string trace_folder;
  if (hello.trace) {
    const char* tmp = getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp") + "/gslice-remote-trace-XXXXXX";
    if (mkdtemp(pattern.data()) != nullptr) {
      trace_folder = pattern;
    } else {
      fprintf(stderr, "gslice-remoted: cannot make a folder for the worker's timeline (%s): %s; it records none\n",
              pattern.c_str(), strerror(errno));
    }
  }
  int errors[2];
  if (pipe2(errors, O_CLOEXEC) != 0) return 1;
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
  close(log_fd);
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
  // What `gslice run` says before the worker takes over its stderr (its refusal, if any).
  std::string said;
  char buf[1024];
  for (;;) {
    ssize_t n = read(errors[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (said.size() < 4096) said.append(buf, static_cast<size_t>(n));
    ssize_t w = write(STDERR_FILENO, buf, static_cast<size_t>(n));
    (void)w;
  }
  close(errors[0]);
  int status = 0;
  while (waitpid(g_worker, &status, 0) < 0 && errno == EINTR) {
  }
  if (relaying) pthread_join(relays[1], nullptr);  // what the worker said last reaches the client
  if (!trace_folder.empty()) RemoveTraceFolder(trace_folder);
  if (WIFEXITED(status) && (WEXITSTATUS(status) == 2 || WEXITSTATUS(status) == 127)) {
    while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
    SendRefusal(channel, said.empty() ? "the worker could not start (see the server's log)" : said);
  }
  if (channel.tls != nullptr) shutdown(fd, SHUT_RDWR);
  return 0;  // the relay to the worker ends with the process
}

// --cert, --key and --token-file.
struct TlsFiles {
  std::string cert, key, token;
};

int Serve(const std::vector<std::string>& addresses, bool sim, const TlsFiles& files) {
  std::vector<Listener> listeners;
  std::vector<Address> parsed;
  bool any_tls = false;
  for (const std::string& text : addresses) {
    Address a;
    std::string error;
    if (!ParseAddress(text, &a, &error)) {
      fprintf(stderr, "gslice-remoted: --listen %s\n", error.c_str());
      return 2;
    }
    any_tls = any_tls || a.tls;
    parsed.push_back(a);
  }
  TlsListening tls;
  if (any_tls) {
    if (files.cert.empty() || files.key.empty() || files.token.empty()) {
      fprintf(stderr, "gslice-remoted: a tls:// listener needs --cert FILE, --key FILE and --token-file FILE\n");
      return 2;
    }
    std::string error;
    if (!ReadTokenFile(files.token, &tls.token, &error)) {
      fprintf(stderr, "gslice-remoted: --token-file: %s\n", error.c_str());
      return 2;
    }
    tls.server = TlsServerLoad(files.cert, files.key, &error);
    if (tls.server == nullptr) {
      fprintf(stderr, "gslice-remoted: %s\n", error.c_str());
      return 2;
    }
  } else if (!files.cert.empty() || !files.key.empty() || !files.token.empty()) {
    fprintf(stderr, "gslice-remoted: --cert, --key and --token-file are for tls:// listeners, and none is given\n");
    return 2;
  }
  for (const Address& a : parsed) {
    Listener l;
    l.address = a;
    std::string error;
    if (!(l.address.unix_socket ? ListenUnix(&l, &error) : ListenTcp(&l, &error))) {
      fprintf(stderr, "gslice-remoted: --listen %s\n", error.c_str());
      TlsServerFree(tls.server);
      return 2;
    }
    listeners.push_back(l);
  }
  struct sigaction stop = {};
  stop.sa_handler = OnStop;
  sigaction(SIGTERM, &stop, nullptr);
  sigaction(SIGINT, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);
  for (const Listener& l : listeners) {
    fprintf(stderr, "gslice-remoted: listening on %s%s\n", l.shown.c_str(), sim ? " (simulated driver)" : "");
  }
  std::vector<pid_t> sessions;
  while (!g_stop) {
    std::vector<pollfd> fds;
    for (const Listener& l : listeners) fds.push_back({l.fd, POLLIN, 0});
    int rc = poll(fds.data(), fds.size(), 200);
    for (size_t k = 0; rc > 0 && k < fds.size(); ++k) {
      if ((fds[k].revents & POLLIN) == 0) continue;
      int fd = accept4(listeners[k].fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      WidenBuffers(fd);
      if (!listeners[k].address.unix_socket) TuneTcp(fd);
      pid_t pid = fork();
      if (pid == 0) {
        for (const Listener& l : listeners) close(l.fd);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        _exit(Session(fd, sim, listeners[k].address.tls ? &tls : nullptr));
      }
      close(fd);
      if (pid > 0) sessions.push_back(pid);
    }
    for (size_t k = 0; k < sessions.size();) {
      if (waitpid(sessions[k], nullptr, WNOHANG) == sessions[k]) {
        sessions.erase(sessions.begin() + static_cast<long>(k));
      } else {
        ++k;
      }
    }
  }
  for (pid_t pid : sessions) kill(pid, SIGTERM);
  TlsServerFree(tls.server);
  for (const Listener& l : listeners) {
    close(l.fd);
    if (l.address.unix_socket) unlink(l.address.path.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace gslice::remote

int main(int argc, char** argv) {
  using namespace gslice::remote;
  std::vector<std::string> listen;
  bool sim = false;
  TlsFiles tls_files;
  int worker_fd = -1, log_fd = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      if (i + 1 >= argc) {
        fprintf(stderr, "gslice-remoted: %s needs a value (see --help)\n", name);
        exit(2);
      }
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      fputs(kUsage, stdout);
      return 0;
    } else if (a == "--listen") {
      listen.push_back(value("--listen"));
    } else if (a.rfind("--listen=", 0) == 0) {
      listen.push_back(a.substr(9));
    } else if (a == "--sim") {
      sim = true;
    } else if (a == "--cert") {
      tls_files.cert = value("--cert");
    } else if (a == "--key") {
      tls_files.key = value("--key");
    } else if (a == "--token-file") {
      tls_files.token = value("--token-file");
    } else if (a == "--worker-fd") {
      worker_fd = atoi(value("--worker-fd"));
    } else if (a == "--log-fd") {
      log_fd = atoi(value("--log-fd"));
    } else {
      fprintf(stderr, "gslice-remoted: unknown argument '%s' (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (worker_fd >= 0) {
    // Started by a session through `gslice run`: from here on stderr is the server's log.
    if (log_fd >= 0) {
      dup2(log_fd, STDERR_FILENO);
      close(log_fd);
    }
    fcntl(worker_fd, F_SETFD, FD_CLOEXEC);
    return RunWorker(worker_fd);
  }
  if (listen.empty()) {
    fprintf(stderr, "gslice-remoted: --listen unix:PATH or --listen tcp://127.0.0.1:PORT is required (see --help)\n");
    return 2;
  }
  return Serve(listen, sim, tls_files);
}
