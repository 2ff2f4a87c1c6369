// The API's listeners (docs/api.md): the unix socket (its file permissions decide who may
// connect; the kernel names each caller) and optionally TCP, where every request but the
// dashboard's static files needs the bearer token, whose holder is an admin. Both serve
// one ApiRouter (api_router.h).
//
// Each listener is its own HttpListener (http_listener.h) with its own threads, connection
// limits and timeouts, so clients flooding TCP do not take the unix socket's threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "api_router.h"
#include "config.h"
#include "registry.h"

namespace gslice {

class HttpListener;

class ApiServer {
 public:
  ApiServer(Registry* registry, DaemonConfig config, std::string token);
  ~ApiServer();
  // Binds the socket (replacing a stale socket nobody answers on; never a file of another
  // kind) and the TCP address, and starts serving.
  Status Start();
  void Stop();
  // The TCP port actually bound (useful with port 0), or 0.
  int tcp_port() const { return tcp_port_; }

 private:
  Status StartUnix();
  Status StartTcp();
  Registry* registry_;
  DaemonConfig config_;
  ApiRouter router_;
  std::unique_ptr<HttpListener> unix_listener_, tcp_listener_;
  int64_t admin_gid_ = -1;  // admin_group's gid, -1: none
  int tcp_port_ = 0;
  uint64_t socket_inode_ = 0;  // the socket file this server bound, removed on Stop
};

}  // namespace gslice
