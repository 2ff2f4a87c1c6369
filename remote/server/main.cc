// gslice-remoted: serves remote GPUs to forwarding clients (docs/remote.md).
//
//   gslice-remoted --listen unix:PATH|tcp://HOST:PORT|tls://HOST:PORT [--listen ...] [--sim] [options]
//
// This file is the listener: it parses the options, listens, and forks a session process for
// every connection it lets in (session.h), counting each against its tenant's limits and
// ending the sessions of a tenant removed from the tenants file (session_book.h). The listener
// never loads a driver and never runs anything for a client: a session confines itself to its
// client's identity before it reads the client's hello (privilege.h).
//
// Security: plain TCP is served on loopback addresses only; other machines are served over
// tls:// only, where the session first completes a TLS handshake (the server's certificate and
// key) and then finds the client's tenant by its token (tenants.h). Unix sockets are made mode
// 0600 unless --socket-mode opens them; each client there is the uid the kernel names.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gslice/clock.h"
#include "peer_uid.h"
#include "privilege.h"
#include "session.h"
#include "session_book.h"
#include "socket_io.h"
#include "syscall_filter.h"
#include "tenants.h"
#include "tls.h"
#include "token.h"
#include "worker.h"

namespace gslice::remote {
namespace {

const char kUsage[] =
    "usage: gslice-remoted --listen ADDR [--listen ADDR ...] [--sim] [--socket-mode MODE]\n"
    "                      [--cert FILE --key FILE (--tenants FILE | --token-file FILE [--token-user USER])]\n"
    "                      [--allow-root-tenant] [--max-connections N] [--max-workers N]\n"
    "                      [--handshakes-per-second N] [--handshake-timeout SECONDS]\n"
    "                      [--syscall-filter on|off] [--syscall-log FOLDER]\n"
    "\n"
    "Serves this node's GPUs to programs on other machines or containers that run with\n"
    "gslice's forwarding libcuda.so.1 (gslice run --remote ADDR ...). Every client gets its own\n"
    "worker process in a slice of the memory/compute it asks for, like gslice run, running as\n"
    "the client's user: on a unix socket or loopback TCP the uid the kernel names, over tls://\n"
    "the tenant's user (never root unless --allow-root-tenant).\n"
    "\n"
    "  --listen ADDR  unix:PATH, tcp://HOST:PORT on a loopback address (127.0.0.1, ::1,\n"
    "                 localhost; port 0 picks a free one), or tls://HOST:PORT on any address:\n"
    "                 TLS, and clients must send a tenant's token.\n"
    "  --socket-mode MODE  the unix sockets' mode, octal (default 0600: the server's user only;\n"
    "                 0666 lets every local user connect, each as itself).\n"
    "  --cert FILE    the server's certificate chain (PEM), for tls://.\n"
    "  --key FILE     its private key (PEM), for tls://.\n"
    "  --tenants FILE  who may connect over tls://: one tenant a line, NAME USER PROJECT\n"
    "                 TOKEN-SHA256 (docs/remote.md); reread when it changes or on SIGHUP, the\n"
    "                 sessions of a tenant removed from it ended.\n"
    "  --token-file FILE  instead of --tenants, one token for one tenant (its first line, at\n"
    "                 least 16 characters; the file mode 0600), whose workers run as\n"
    "  --token-user USER  (needed when the server runs as root; else the server's own user).\n"
    "                 Clients read their token from GSLICE_REMOTE_TOKEN_FILE.\n"
    "  --allow-root-tenant  let a client of uid 0 (or a tenant mapped to it) have a worker as root.\n"
    "  --max-connections N  open connections per tenant (default 32).\n"
    "  --max-workers N  running workers per tenant (default 8).\n"
    "  --handshakes-per-second N  new connections per tenant a second (default 100).\n"
    "  --handshake-timeout SECONDS  time for TLS, the token and the hello (default 10).\n"
    "  --sim          serve gslice's simulated driver (build/lib/sim) instead of a real GPU.\n"
    "  --syscall-filter on|off  the system-call filter of sessions and workers (default on:\n"
    "                 mounts, namespaces, ptrace, bpf, ... refused; docs/security.md); off for\n"
    "                 debugging only.\n"
    "  --syscall-log FOLDER  measure: each session writes FOLDER/syscalls-PID.txt, the calls it\n"
    "                 and its worker made (as the client's user; docs/remote.md, \"System calls\").\n"
    "  -h, --help     this text.\n";

volatile sig_atomic_t g_stop = 0;
volatile sig_atomic_t g_reload = 0;
void OnStop(int) { g_stop = 1; }
void OnHangup(int) { g_reload = 1; }

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

bool ListenUnix(Listener* l, mode_t mode, std::string* error) {
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
  // Made 0600 and only then opened to whom --socket-mode names: no moment with wider access.
  if (rc != 0 || chmod(path.c_str(), mode) != 0 || listen(l->fd, 64) != 0) {
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
               " --cert FILE --key FILE --tenants FILE (or listen on 127.0.0.1 and reach it through an "
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
// What the command line asks for.
struct Config {
  std::vector<std::string> listen;
  bool sim = false;
  std::string socket_mode = "0600";
  std::string cert, key, tenants, token_file, token_user;
  bool allow_root = false;
  LimitConfig limits;
  int handshake_timeout_s = 10;
  int worker_fd = -1, log_fd = -1;  // a worker's (started by a session)
  bool syscall_filter = true;
  std::string syscall_log;
};

// Who may connect over tls://: the tenants file, or --token-file's single tenant.
struct TenantSource {
  std::string path;  // the tenants file ("" with --token-file)
  struct stat seen = {};
  TenantTable table;
};

bool LoadTenants(const Config& c, const TenantRules& rules, TenantSource* source, std::string* error) {
  if (!c.tenants.empty()) {
    source->path = c.tenants;
    stat(c.tenants.c_str(), &source->seen);
    return TenantTable::Load(c.tenants, rules, &source->table, error);
  }
  std::string token, user = c.token_user;
  if (!ReadTokenFile(c.token_file, &token, error)) return (*error = "--token-file: " + *error), false;
  if (user.empty() && geteuid() == 0) {
    *error = "--token-file needs --token-user USER, the user its clients' workers run as (workers never run as root)";
    return false;
  }
  if (user.empty()) user = std::to_string(geteuid());
  return TenantTable::FromToken(token, user, rules, &source->table, error);
}

// Rereads the tenants file when SIGHUP came or the file changed; ends revoked tenants' sessions.
// A file that no longer loads changes nothing (the error logged once per change).
void ReloadTenants(const TenantRules& rules, TenantSource* source, SessionBook* book) {
  if (source->path.empty()) return;
  struct stat now = {};
  const bool exists = stat(source->path.c_str(), &now) == 0;
  const bool changed = exists && (now.st_ino != source->seen.st_ino || now.st_size != source->seen.st_size ||
                                  now.st_mtim.tv_sec != source->seen.st_mtim.tv_sec ||
                                  now.st_mtim.tv_nsec != source->seen.st_mtim.tv_nsec ||
                                  now.st_ctim.tv_nsec != source->seen.st_ctim.tv_nsec);
  if (!changed && !g_reload) return;
  g_reload = 0;
  source->seen = now;
  TenantTable fresh;
  std::string error;
  if (!TenantTable::Load(source->path, rules, &fresh, &error)) {
    fprintf(stderr, "gslice-remoted: %s; the tenants as they were stay\n", error.c_str());
    return;
  }
  source->table = std::move(fresh);
  const int ended = book->Revoke(source->table);
  fprintf(stderr, "gslice-remoted: read %s: %zu tenants; %d sessions ended\n", source->path.c_str(),
          source->table.tenants().size(), ended);
}

// Whom a new connection counts as (limits.h): a local client's uid, a tls:// client's address.
std::string LimitKey(int fd, bool tls) {
  if (tls) {
    std::string peer = PeerName(fd);
    return kAddressKey + peer.substr(0, peer.rfind(':'));
  }
  PeerUser user;
  std::string error;
  return LocalPeer(fd, &user, &error) ? "uid " + std::to_string(user.uid) : "an unknown local peer";
}

// The listening state the accept loop shares.
struct Serving {
  std::vector<Listener> listeners;
  SessionSetup setup;
  TenantSource tenants;
  SessionBook* book = nullptr;
  std::map<std::string, int64_t> refusals_logged;  // key -> when its last refusal was logged
};

// Accepts one connection on listener k and forks its session, or refuses it at once.
void AcceptOne(Serving* s, size_t k) {
  int fd = accept4(s->listeners[k].fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  const bool tls = s->listeners[k].address.tls;
  const std::string key = LimitKey(fd, tls);
  const int64_t now = MonotonicMs();
  const std::string why = s->book->Admit(key, now);
  if (!why.empty()) {
    // A flood is one line a second per key, not one a connection.
    if (s->refusals_logged.size() > 1024) s->refusals_logged.clear();
    int64_t& last = s->refusals_logged[key];
    if (now - last >= 1000) fprintf(stderr, "gslice-remoted: refused a connection of %s: %s\n", key.c_str(), why.c_str());
    if (now - last >= 1000) last = now;
    close(fd);
    return;
  }
  WidenBuffers(fd);
  if (!s->listeners[k].address.unix_socket) TuneTcp(fd);
  int control[2];
  pid_t pid = -1;
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, control) == 0) {
    pid = fork();
    if (pid == 0) {
      // The session keeps its own end only: never another session's, never a listener.
      for (const Listener& l : s->listeners) close(l.fd);
      for (int other : s->book->ControlFds()) close(other);
      close(control[0]);
      signal(SIGTERM, SIG_DFL);
      signal(SIGINT, SIG_DFL);
      signal(SIGHUP, SIG_DFL);
      SessionSetup setup = s->setup;
      setup.control = control[1];
      if (!tls) setup.tls = nullptr;
      setup.tenants = &s->tenants.table;
      _exit(Session(fd, setup));
    }
    close(control[1]);
  }
  close(fd);
  if (pid > 0) {
    s->book->Add(pid, control[0], key);
  } else {
    if (pid < 0 && control[0] >= 0) close(control[0]);
    s->book->Drop(key);
  }
}

void ServeLoop(Serving* s, const TenantRules& rules) {
  while (!g_stop) {
    std::vector<pollfd> fds;
    for (const Listener& l : s->listeners) fds.push_back({l.fd, POLLIN, 0});
    for (int c : s->book->ControlFds()) fds.push_back({c, POLLIN, 0});
    const int rc = poll(fds.data(), fds.size(), 200);
    for (size_t k = 0; rc > 0 && k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      if (k < s->listeners.size()) AcceptOne(s, k);
      else s->book->Answer(fds[k].fd, s->tenants.table, MonotonicMs());
    }
    s->book->Reap();
    ReloadTenants(rules, &s->tenants, s->book);
  }
}

// The files no client's process may see (privilege.h), as absolute paths.
std::vector<std::string> HiddenFiles(const Config& c) {
  std::vector<std::string> hidden;
  for (const std::string& f : {c.key, c.token_file, c.tenants}) {
    char real[PATH_MAX];
    if (!f.empty() && realpath(f.c_str(), real) != nullptr) hidden.push_back(real);
  }
  return hidden;
}

// Checks what tls:// needs and loads it. 0, or the exit status.
int PrepareTls(const Config& c, bool any_tls, const TenantRules& rules, Serving* s) {
  const bool tls_files = !c.cert.empty() || !c.key.empty() || !c.token_file.empty() || !c.tenants.empty();
  if (!any_tls) {
    if (!tls_files && c.token_user.empty()) return 0;
    fprintf(stderr, "gslice-remoted: --cert, --key, --tenants, --token-file and --token-user are for tls:// "
                    "listeners, and none is given\n");
    return 2;
  }
  if (c.cert.empty() || c.key.empty() || c.tenants.empty() == c.token_file.empty()) {
    fprintf(stderr, "gslice-remoted: a tls:// listener needs --cert FILE, --key FILE and one of --tenants FILE or "
                    "--token-file FILE\n");
    return 2;
  }
  std::string error;
  if (!LoadTenants(c, rules, &s->tenants, &error)) {
    fprintf(stderr, "gslice-remoted: %s\n", error.c_str());
    return 2;
  }
  s->setup.tls = TlsServerLoad(c.cert, c.key, &error);
  if (s->setup.tls == nullptr) {
    fprintf(stderr, "gslice-remoted: %s\n", error.c_str());
    return 2;
  }
  return 0;
}

int Serve(const Config& c, mode_t socket_mode) {
  Serving s;
  bool any_tls = false;
  std::vector<Address> parsed;
  for (const std::string& text : c.listen) {
    Address a;
    std::string error;
    if (!ParseAddress(text, &a, &error)) {
      fprintf(stderr, "gslice-remoted: --listen %s\n", error.c_str());
      return 2;
    }
    any_tls = any_tls || a.tls;
    parsed.push_back(a);
  }
  const TenantRules rules{.allow_root = c.allow_root, .server_uid = geteuid()};
  if (const int rc = PrepareTls(c, any_tls, rules, &s); rc != 0) return rc;
  std::string error, placeholder_folder;
  if (!MakePlaceholder(&s.setup.placeholder, &placeholder_folder, &error)) {
    fprintf(stderr, "gslice-remoted: %s\n", error.c_str());
    TlsServerFree(s.setup.tls);
    return 2;
  }
  s.setup.sim = c.sim;
  s.setup.rules = rules;
  s.setup.hidden = HiddenFiles(c);
  s.setup.handshake_timeout_s = c.handshake_timeout_s;
  s.setup.syscall_filter = c.syscall_filter;
  s.setup.syscall_log = c.syscall_log;
  for (const Address& a : parsed) {
    Listener l;
    l.address = a;
    if (!(l.address.unix_socket ? ListenUnix(&l, socket_mode, &error) : ListenTcp(&l, &error))) {
      fprintf(stderr, "gslice-remoted: --listen %s\n", error.c_str());
      TlsServerFree(s.setup.tls);
      RemovePlaceholder(s.setup.placeholder, placeholder_folder);
      return 2;
    }
    s.listeners.push_back(l);
  }
  SessionBook book(c.limits);
  s.book = &book;
  struct sigaction stop = {}, hangup = {};
  stop.sa_handler = OnStop;
  hangup.sa_handler = OnHangup;
  sigaction(SIGTERM, &stop, nullptr);
  sigaction(SIGINT, &stop, nullptr);
  sigaction(SIGHUP, &hangup, nullptr);
  signal(SIGPIPE, SIG_IGN);
  for (const Listener& l : s.listeners) {
    fprintf(stderr, "gslice-remoted: listening on %s%s\n", l.shown.c_str(), c.sim ? " (simulated driver)" : "");
  }
  ServeLoop(&s, rules);
  book.SignalAll(SIGTERM);
  TlsServerFree(s.setup.tls);
  RemovePlaceholder(s.setup.placeholder, placeholder_folder);
  for (const Listener& l : s.listeners) {
    close(l.fd);
    if (l.address.unix_socket) unlink(l.address.path.c_str());
  }
  return 0;
}

// The command line's options, one row each: a flag, or a value checked as it is read.
struct OptionRow {
  const char* name;
  std::function<bool(Config*, const std::string&, std::string*)> set;  // nullptr value: a flag
  bool flag = false;
};

bool Count(const std::string& text, int low, int high, int* out, std::string* why) {
  const bool digits = !text.empty() && text.size() <= 9 && text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || std::stoi(text) < low || std::stoi(text) > high) {
    *why = "'" + text + "': a whole number from " + std::to_string(low) + " to " + std::to_string(high);
    return false;
  }
  *out = std::stoi(text);
  return true;
}

const std::vector<OptionRow>& Options() {
  static const std::vector<OptionRow> rows = {
      {"--listen", [](Config* c, const std::string& v, std::string*) { c->listen.push_back(v); return true; }},
      {"--sim", [](Config* c, const std::string&, std::string*) { return c->sim = true; }, true},
      {"--socket-mode", [](Config* c, const std::string& v, std::string*) { c->socket_mode = v; return true; }},
      {"--cert", [](Config* c, const std::string& v, std::string*) { c->cert = v; return true; }},
      {"--key", [](Config* c, const std::string& v, std::string*) { c->key = v; return true; }},
      {"--tenants", [](Config* c, const std::string& v, std::string*) { c->tenants = v; return true; }},
      {"--token-file", [](Config* c, const std::string& v, std::string*) { c->token_file = v; return true; }},
      {"--token-user", [](Config* c, const std::string& v, std::string*) { c->token_user = v; return true; }},
      {"--allow-root-tenant", [](Config* c, const std::string&, std::string*) { return c->allow_root = true; }, true},
      {"--max-connections",
       [](Config* c, const std::string& v, std::string* why) { return Count(v, 1, 100000, &c->limits.connections, why); }},
      {"--max-workers",
       [](Config* c, const std::string& v, std::string* why) { return Count(v, 1, 10000, &c->limits.workers, why); }},
      {"--handshakes-per-second",
       [](Config* c, const std::string& v, std::string* why) {
         return Count(v, 1, 100000, &c->limits.handshakes_per_second, why);
       }},
      {"--handshake-timeout",
       [](Config* c, const std::string& v, std::string* why) { return Count(v, 1, 600, &c->handshake_timeout_s, why); }},
      {"--syscall-filter",
       [](Config* c, const std::string& v, std::string* why) { return ParseSyscallFilter(v, &c->syscall_filter, why); }},
      {"--syscall-log",
       [](Config* c, const std::string& v, std::string* why) {
         struct stat st;
         if (v.empty() || v[0] != '/' || stat(v.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
           *why = "'" + v + "': an existing folder, by its absolute path";
           return false;
         }
         c->syscall_log = v;
         return true;
       }},
      {"--worker-fd", [](Config* c, const std::string& v, std::string* why) { return Count(v, 0, 1 << 20, &c->worker_fd, why); }},
      {"--log-fd", [](Config* c, const std::string& v, std::string* why) { return Count(v, 0, 1 << 20, &c->log_fd, why); }},
  };
  return rows;
}

// Parses argv into c. 0 to go on, else the exit status (1: --help shown).
int ParseArgs(int argc, char** argv, Config* c) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], value;
    if (a == "-h" || a == "--help") {
      fputs(kUsage, stdout);
      return 1;
    }
    const size_t eq = a.find('=');
    const bool inline_value = a.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      value = a.substr(eq + 1);
      a.resize(eq);
    }
    const OptionRow* row = nullptr;
    for (const OptionRow& r : Options()) row = a == r.name ? &r : row;
    if (row == nullptr) {
      fprintf(stderr, "gslice-remoted: unknown argument '%s' (see --help)\n", argv[i]);
      return 2;
    }
    if (!row->flag && !inline_value) {
      if (i + 1 >= argc) {
        fprintf(stderr, "gslice-remoted: %s needs a value (see --help)\n", row->name);
        return 2;
      }
      value = argv[++i];
    }
    std::string why;
    if (!row->set(c, value, &why)) {
      fprintf(stderr, "gslice-remoted: %s %s\n", row->name, why.c_str());
      return 2;
    }
  }
  return 0;
}

// --socket-mode: octal, permission bits only.
bool SocketMode(const std::string& text, mode_t* mode) {
  if (text.empty() || text.size() > 4 || text.find_first_not_of("01234567") != std::string::npos) return false;
  *mode = static_cast<mode_t>(std::stoul(text, nullptr, 8));
  return *mode <= 0777;
}

}  // namespace
}  // namespace gslice::remote

int main(int argc, char** argv) {
  using namespace gslice::remote;
  Config c;
  if (const int rc = ParseArgs(argc, argv, &c); rc != 0) return rc == 1 ? 0 : rc;
  if (c.worker_fd >= 0) {
    // Started by a session through `gslice run`: from here on stderr is the server's log.
    if (c.log_fd >= 0) {
      dup2(c.log_fd, STDERR_FILENO);
      close(c.log_fd);
    }
    fcntl(c.worker_fd, F_SETFD, FD_CLOEXEC);
    return RunWorker(c.worker_fd);
  }
  if (c.listen.empty()) {
    fprintf(stderr, "gslice-remoted: --listen unix:PATH or --listen tcp://127.0.0.1:PORT is required (see --help)\n");
    return 2;
  }
  mode_t mode = 0600;
  if (!SocketMode(c.socket_mode, &mode)) {
    fprintf(stderr, "gslice-remoted: --socket-mode '%s': an octal mode of permission bits, at most 0777 (0600, 0660, 0666)\n",
            c.socket_mode.c_str());
    return 2;
  }
  return Serve(c, mode);
}
