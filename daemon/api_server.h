// The HTTP/1.1 + JSON API (docs/api.md), the metrics page and the dashboard, served on a
// unix socket (its file permissions decide who may connect; the kernel names each caller)
// and optionally on TCP, where every request but the dashboard's static files needs the
// bearer token, whose holder is an admin.
//
// Each listener is its own libmicrohttpd daemon with its own threads (one per connection),
// connection limits (per listener, per client) and timeouts, so clients flooding TCP do not
// take the unix socket's threads. A request without the token on TCP is refused (401) on
// its headers, before its body is read; a body over max_body_bytes, by Content-Length or
// counted as chunks arrive, is never buffered: it is dropped as read and answered 413.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config.h"
#include "registry.h"

namespace gslice {

class HttpListener;

// Requests answered, by HTTP status.
struct ApiCounters {
  void Count(int code) {
    std::lock_guard lock(mu);
    by_code[code]++;
  }
  std::map<int, uint64_t> ByCode() const {
    std::lock_guard lock(mu);
    return by_code;
  }
  mutable std::mutex mu;
  std::map<int, uint64_t> by_code;
};

// One request as the router sees it (transport-independent, so tests can call it directly).
struct ApiRequest {
  std::string method;
  std::string path;  // without the query
  std::map<std::string, std::string> query;
  std::string body;
  std::string authorization;  // the Authorization header
  bool over_tcp = false;
  // Who calls; the transport fills it in (peer credentials, or the token). The default
  // is nobody in particular: it may read, and change nothing.
  Caller caller;
};

struct ApiResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::string allow;  // for 405
};

class ApiRouter {
 public:
  // `trace_dir`: where slices' traces are (`<folder of config.database>/traces`); empty: none
  // are kept.
  ApiRouter(Registry* registry, std::string token, double start_time_seconds, std::string trace_dir = "")
      : registry_(registry), token_(std::move(token)), start_time_(start_time_seconds),
        trace_dir_(std::move(trace_dir)) {}
  ApiResponse Handle(const ApiRequest& request);
  ApiCounters& counters() { return counters_; }
  // Whether a request for `path` over TCP with this Authorization header may go on; the
  // transport asks before reading the body. The dashboard's static files need no token.
  bool Authorized(const std::string& method, const std::string& path,
                  const std::string& authorization) const;

 private:
  ApiResponse Route(const ApiRequest& request);
  // Serves GET `key` from the cache while the registry's generation is unchanged.
  ApiResponse Cached(const std::string& key, const std::function<ApiResponse()>& render);
  Registry* registry_;
  std::mutex cache_mu_;
  std::map<std::string, std::pair<uint64_t, ApiResponse>> cache_;
  std::string token_;
  double start_time_;
  std::string trace_dir_;
  ApiCounters counters_;
};

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
