// The HTTP/1.1 + JSON API (docs/api.md), the metrics page and the dashboard, served on a
// unix socket (its file permissions decide who may call) and optionally on TCP, where
// every request but the dashboard's static files needs the bearer token.
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

namespace httplib {
class Server;
}

namespace gslice {

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
};

struct ApiResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::string allow;  // for 405
};

class ApiRouter {
 public:
  ApiRouter(Registry* registry, std::string token, double start_time_seconds)
      : registry_(registry), token_(std::move(token)), start_time_(start_time_seconds) {}
  ApiResponse Handle(const ApiRequest& request);
  ApiCounters& counters() { return counters_; }

 private:
  ApiResponse Route(const ApiRequest& request);
  // Serves GET `key` from the cache while the registry's generation is unchanged.
  ApiResponse Cached(const std::string& key, const std::function<ApiResponse()>& render);
  Registry* registry_;
  std::mutex cache_mu_;
  std::map<std::string, std::pair<uint64_t, ApiResponse>> cache_;
  std::string token_;
  double start_time_;
  ApiCounters counters_;
};

class ApiServer {
 public:
  ApiServer(Registry* registry, DaemonConfig config, std::string token);
  ~ApiServer();
  // Binds the socket (replacing a stale one) and the TCP address, and starts serving.
  Status Start();
  void Stop();
  // The TCP port actually bound (useful with port 0), or 0.
  int tcp_port() const { return tcp_port_; }

 private:
  std::unique_ptr<httplib::Server> MakeServer(bool over_tcp);
  Registry* registry_;
  DaemonConfig config_;
  ApiRouter router_;
  std::unique_ptr<httplib::Server> unix_server_, tcp_server_;
  std::vector<std::thread> threads_;
  int tcp_port_ = 0;
};

}  // namespace gslice
