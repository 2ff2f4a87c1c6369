#include "daemon_client.h"

#include <netdb.h>
#include <poll.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "gslice/ledger.h"
#include "gslice/options.h"
#include "gslice/pid_namespace.h"

namespace gslice::cli {
namespace {

constexpr size_t kMaxReply = 64u << 20;

using Clock = std::chrono::steady_clock;

int RemainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

bool WaitFd(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  for (;;) {
    int rc = poll(&p, 1, RemainingMs(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return false;
  }
}

// Connects (non-blocking, bounded by the deadline); -1 with `error` set on failure.
int Connect(const DaemonAddress& a, Clock::time_point deadline, std::string* error, NoAnswer* no_answer) {
  int fd = -1;
  int rc = -1;
  if (a.tcp_host.empty()) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (a.socket.size() >= sizeof addr.sun_path) {
      *error = "socket path too long";
      return -1;
    }
    std::memcpy(addr.sun_path, a.socket.c_str(), a.socket.size() + 1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      *error = std::strerror(errno);
      return -1;
    }
    // A unix socket whose listen backlog is full answers EAGAIN (blocking, connect would
    // wait without bound): try again until the deadline.
    for (;;) {
      rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
      if (rc == 0 || (errno != EAGAIN && errno != EINTR)) break;
      if (RemainingMs(deadline) == 0) {
        errno = ETIMEDOUT;
        break;
      }
      poll(nullptr, 0, std::min(20, RemainingMs(deadline)));
    }
  } else {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    std::string port = std::to_string(a.tcp_port);
    if (getaddrinfo(a.tcp_host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) {
      *error = "cannot resolve " + a.tcp_host;
      return -1;
    }
    fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd >= 0) {
      rc = connect(fd, res->ai_addr, res->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        if (WaitFd(fd, POLLOUT, deadline)) {
          int err = 0;
          socklen_t len = sizeof err;
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
          rc = err == 0 ? 0 : -1;
          errno = err;
        } else {
          errno = ETIMEDOUT;
        }
      }
    }
    freeaddrinfo(res);
  }
  if (fd < 0 || rc != 0) {
    const int err = errno;
    *error = err == ETIMEDOUT ? "its socket accepts no connection (listen backlog full)" : std::strerror(err);
    if (no_answer != nullptr) {
      *no_answer = err == ENOENT                        ? NoAnswer::kNoSocket
                   : err == ECONNREFUSED                ? NoAnswer::kNotListening
                   : err == EACCES || err == EPERM      ? NoAnswer::kDenied
                   : err == ETIMEDOUT                   ? NoAnswer::kTimeout
                                                        : NoAnswer::kBroken;
    }
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;  // non-blocking: the exchange waits with poll
}

// Parses "HTTP/1.1 200 OK\r\n...\r\n\r\nbody" (the server closes the connection, so the body
// is what follows the headers, checked against Content-Length when given).
bool ParseReply(const std::string& raw, DaemonReply* reply) {
  auto end = raw.find("\r\n\r\n");
  if (raw.compare(0, 5, "HTTP/") != 0 || end == std::string::npos) return false;
  auto sp = raw.find(' ');
  if (sp == std::string::npos || sp > end) return false;
  reply->status = std::atoi(raw.c_str() + sp + 1);
  reply->body = raw.substr(end + 4);
  std::string headers = raw.substr(0, end);
  for (char& c : headers) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto cl = headers.find("\r\ncontent-length:");
  if (cl != std::string::npos) {
    size_t n = std::strtoull(headers.c_str() + cl + 17, nullptr, 10);
    if (reply->body.size() < n) return false;
    reply->body.resize(n);
  }
  return reply->status >= 100;
}

}  // namespace

std::string DaemonAddress::Describe() const {
  if (tcp_host.empty()) return "unix:" + socket;
  return tcp_host + ":" + std::to_string(tcp_port);
}

DaemonAddress DaemonAddressFromEnvironment(const std::string& socket_flag) {
  DaemonAddress a;
  const char* tcp = OptionValue(Option::Daemon);
  if (socket_flag.empty() && *tcp) {
    std::string t = tcp;
    if (t.rfind("http://", 0) == 0) t = t.substr(7);
    while (!t.empty() && t.back() == '/') t.pop_back();
    auto colon = t.rfind(':');
    a.tcp_host = colon == std::string::npos ? t : t.substr(0, colon);
    a.tcp_port = colon == std::string::npos ? 80 : std::atoi(t.c_str() + colon + 1);
    a.token = OptionValue(Option::Token);
    return a;
  }
  const char* env = OptionValue(Option::Socket);
  a.socket = !socket_flag.empty() ? socket_flag : (*env ? env : GetOptionInfo(Option::Socket).default_value);
  return a;
}

DaemonReply DaemonClient::Call(const std::string& method, const std::string& path,
                               const std::string& body, int timeout_ms) const {
  DaemonReply reply;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string error;
  int fd = Connect(address_, deadline, &error, &reply.no_answer);
  if (fd < 0) {
    reply.message = "cannot connect to gsliced at " + address_.Describe() + ": " + error;
    return reply;
  }
  std::string request = method + " " + path + " HTTP/1.1\r\nHost: gsliced\r\nConnection: close\r\n";
  if (!address_.tcp_host.empty() && !address_.token.empty()) {
    request += "Authorization: Bearer " + address_.token + "\r\n";
  }
  if (!body.empty() || method == "POST" || method == "PUT") {
    request += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  request += "\r\n" + body;
  size_t sent = 0;
  while (sent < request.size()) {
    if (!WaitFd(fd, POLLOUT, deadline)) break;
    ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[65536];
  bool timed_out = false;
  while (raw.size() < kMaxReply) {
    if (!WaitFd(fd, POLLIN, deadline)) {
      error = "no answer within " + std::to_string(timeout_ms) + " ms";
      timed_out = true;
      break;
    }
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (!ParseReply(raw, &reply)) {
    reply.no_answer = timed_out ? NoAnswer::kTimeout : NoAnswer::kBroken;
    reply.message = "gsliced at " + address_.Describe() + " gave no valid answer" +
                    (error.empty() ? "" : " (" + error + ")");
    return reply;
  }
  reply.connected = true;
  reply.no_answer = NoAnswer::kNone;
  if (reply.status >= 400) {
    auto j = nlohmann::json::parse(reply.body, nullptr, false);
    if (j.is_object() && j.contains("error") && j["error"].is_string()) {
      reply.message = j["error"].get<std::string>();
    } else {
      reply.message = "HTTP " + std::to_string(reply.status);
    }
  }
  return reply;
}

std::string NoDaemonHint(const DaemonReply& reply, const DaemonAddress& address) {
  std::string why = reply.message;
  if (address.tcp_host.empty() && access(address.socket.c_str(), F_OK) != 0) {
    why = "no socket at " + address.socket;
  } else if (address.tcp_host.empty() && access(address.socket.c_str(), W_OK) != 0) {
    return "gsliced's socket " + address.socket +
           " does not let you in (permission denied): ask for the group that owns it, or use "
           "`gslice run` without a daemon";
  }
  return "gsliced is not running (" + why +
         "): start it with `gsliced --config /etc/gslice/gsliced.toml` (or `systemctl start "
         "gsliced`), point GSLICE_SOCKET at its socket, or use `gslice run --no-daemon` without a daemon";
}

std::string DaemonConfiguredBecause(const DaemonAddress& address) {
  for (Option o : {Option::Daemon, Option::Socket}) {
    if (OptionIsSet(o) && *OptionValue(o)) return std::string(OptionEnv(o)) + " is set";
  }
  struct stat st;
  if (!address.socket.empty() && lstat(address.socket.c_str(), &st) == 0) return address.socket + " exists";
  const char* default_socket = GetOptionInfo(Option::Socket).default_value;
  if (lstat(default_socket, &st) == 0) return std::string(default_socket) + " exists";
  if (lstat(kDaemonConfigFile, &st) == 0) return std::string(kDaemonConfigFile) + " exists";
  return "";
}

std::string CurrentUserName() {
  const char* user = std::getenv("USER");
  if (user != nullptr && *user) return user;
  if (passwd* pw = getpwuid(getuid()); pw != nullptr) return pw->pw_name;
  return "uid" + std::to_string(getuid());
}

RegisterResult RegisterSlice(const SliceRegistration& slice, std::string* message, DaemonReply* reply,
                             int timeout_ms) {
  nlohmann::json body;
  if (!slice.name.empty()) body["name"] = slice.name;
  // The owner is the caller as the kernel names it to gsliced; "user" is sent only when
  // someone else is named (which only admins may do).
  if (!slice.user.empty()) body["user"] = slice.user;
  if (!slice.project.empty()) body["project"] = slice.project;
  body["class"] = slice.opportunistic ? "opportunistic" : "guaranteed";
  if (slice.protect_permille != 0) body["protect"] = slice.protect_permille / 1000.0;
  body["origin"] = "run";
  if (slice.idle_timeout_s > 0) body["idle_timeout_s"] = slice.idle_timeout_s;
  if (!slice.remote_client.empty()) body["remote_client"] = slice.remote_client;
  nlohmann::json gpus = nlohmann::json::array();
  for (const SliceRegistration::Gpu& g : slice.gpus) {
    gpus.push_back({{"gpu", g.gpu}, {"memory", g.memory_bytes}, {"compute", g.compute}});
  }
  body["gpus"] = gpus;
  const uint32_t self = static_cast<uint32_t>(getpid());
  body["holder"] = {{"pid", self}, {"pid_ns", SelfPidNamespace()}, {"start_time", ProcessStartTime(self)}};
  DaemonClient client(DaemonAddressFromEnvironment());
  DaemonReply r = client.Call("POST", "/v1/slices", body.dump(), timeout_ms);
  if (reply) *reply = r;
  if (!r.connected) {
    if (message) *message = r.message;
    return RegisterResult::kNoAnswer;
  }
  if (!r.ok()) {
    if (message) *message = r.message;
    return RegisterResult::kRefused;
  }
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (message) *message = j.is_object() && j.contains("name") ? j["name"].get<std::string>() : slice.name;
  return RegisterResult::kRegistered;
}

bool UnregisterSlice(const std::string& name, int timeout_ms) {
  DaemonClient client(DaemonAddressFromEnvironment());
  DaemonReply r = client.Call("DELETE", "/v1/slices/" + name, "", timeout_ms);
  return r.ok() || (r.connected && r.status == 404);  // 404: deleted or expired already
}

}  // namespace gslice::cli
