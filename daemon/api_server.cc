#include "api_server.h"

#include <grp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "http_listener.h"
#include "trace_files.h"

namespace gslice {
namespace {

SliceReads SliceReadsOf(const DaemonConfig& config) {
  SliceReads reads = SliceReads::kOpen;
  ParseSliceReads(config.slice_reads, &reads);  // ValidateConfig checked it
  return reads;
}

}  // namespace

ApiServer::ApiServer(Registry* registry, DaemonConfig config, std::string token)
    : registry_(registry),
      config_(std::move(config)),
      router_(registry, std::move(token),
              std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(),
              TraceDir(config_), SliceReadsOf(config_)) {}

ApiServer::~ApiServer() { Stop(); }

Status ApiServer::Start() {
  if (!config_.admin_group.empty()) {
    group gr{};
    group* found = nullptr;
    std::vector<char> buf(16384);
    if (getgrnam_r(config_.admin_group.c_str(), &gr, buf.data(), buf.size(), &found) != 0 ||
        found == nullptr) {
      return Status::BadRequest("admin_group: no group named '" + config_.admin_group + "'");
    }
    admin_gid_ = gr.gr_gid;
  }
  if (!config_.socket.empty()) {
    if (Status s = StartUnix(); !s.ok()) return s;
  }
  if (!config_.tcp.empty()) {
    if (Status s = StartTcp(); !s.ok()) {
      Stop();
      return s;
    }
  }
  return Status::Ok();
}

namespace {

HttpListener::Settings ListenerSettings(const DaemonConfig& c, bool over_tcp, int64_t admin_gid) {
  return HttpListener::Settings{
      .over_tcp = over_tcp,
      .max_connections = static_cast<unsigned>(c.api_threads),
      .per_client = static_cast<unsigned>(c.api_connections_per_client),
      .request_timeout_s = static_cast<int>(c.api_request_timeout_s),
      .idle_timeout_s = static_cast<int>(c.api_idle_timeout_s),
      .max_body = c.max_body_bytes,
      .admin_gid = admin_gid,
  };
}

}  // namespace

Status ApiServer::StartUnix() {
  namespace fs = std::filesystem;
  const std::string& path = config_.socket;
  std::error_code ec;
  fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    return Status::BadRequest("socket: " + path + " is longer than a unix socket path may be (" +
                              std::to_string(sizeof addr.sun_path - 1) + " characters)");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  // Something at the path: a socket nobody answers on is a previous gsliced's and is
  // replaced; a live socket is another gsliced; anything else is not ours to remove.
  if (Status s = CheckSocketPath(path); !s.ok()) return s;
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool live = probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    if (probe >= 0) close(probe);
    if (live) return Status::Conflict("another gsliced is serving " + path + ": stop it first");
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Status::Unavailable("cannot remove the stale socket " + path + ": " + std::strerror(errno));
    }
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::Unavailable(std::string("cannot create a unix socket: ") + std::strerror(errno));
  // Bind with a tight umask so the socket never exists with wider permissions.
  mode_t old = umask(0177);
  int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int bind_errno = errno;
  umask(old);
  if (rc != 0) {
    close(fd);
    return Status::Unavailable("cannot listen on " + path + ": " + std::strerror(bind_errno));
  }
  if (lstat(path.c_str(), &st) == 0) socket_inode_ = st.st_ino;
  auto fail = [&](Status s) {
    close(fd);
    unlink(path.c_str());
    socket_inode_ = 0;
    return s;
  };
  if (!config_.socket_group.empty()) {
    struct group* gr = getgrnam(config_.socket_group.c_str());
    if (gr == nullptr) return fail(Status::BadRequest("socket_group: no group named '" + config_.socket_group + "'"));
    if (chown(path.c_str(), static_cast<uid_t>(-1), gr->gr_gid) != 0) {
      return fail(Status::Unavailable("socket_group: cannot chown " + path + ": " + std::strerror(errno)));
    }
  }
  if (chmod(path.c_str(), config_.socket_mode) != 0) {
    return fail(Status::Unavailable("cannot chmod " + path + ": " + std::strerror(errno)));
  }
  if (listen(fd, SOMAXCONN) != 0) return fail(Status::Unavailable("cannot listen on " + path));
  unix_listener_ = std::make_unique<HttpListener>(&router_, ListenerSettings(config_, false, admin_gid_));
  if (Status s = unix_listener_->Start(fd); !s.ok()) {
    unix_listener_.reset();
    unlink(path.c_str());
    socket_inode_ = 0;
    return s;
  }
  return Status::Ok();
}

Status ApiServer::StartTcp() {
  auto colon = config_.tcp.rfind(':');
  std::string host = config_.tcp.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  const std::string port = config_.tcp.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0 || res == nullptr) {
    return Status::BadRequest("tcp: cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  bool ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
            bind(fd, res->ai_addr, res->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0;
  int err = errno;
  freeaddrinfo(res);
  if (!ok) {
    if (fd >= 0) close(fd);
    return Status::Unavailable("cannot listen on " + config_.tcp + ": " + std::strerror(err));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  tcp_port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  tcp_listener_ = std::make_unique<HttpListener>(&router_, ListenerSettings(config_, true, admin_gid_));
  if (Status s = tcp_listener_->Start(fd); !s.ok()) {
    tcp_listener_.reset();
    return s;
  }
  return Status::Ok();
}

void ApiServer::Stop() {
  unix_listener_.reset();
  tcp_listener_.reset();
  if (socket_inode_ != 0) {
    // Only the socket this server bound: never a file someone put there since.
    struct stat st {};
    if (lstat(config_.socket.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == socket_inode_) {
      unlink(config_.socket.c_str());
    }
    socket_inode_ = 0;
  }
}

}  // namespace gslice
