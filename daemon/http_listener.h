// One API listener: a libmicrohttpd daemon (a thread per connection) on a socket bound by
// the caller, and what the library does not do itself: the caller of each connection,
// connections per client, and deadlines for whole requests (a sweeper shuts down
// connections that pass theirs; the library closes them). Requests go to an ApiRouter.
//
// A request without the token on TCP is refused (401) on its headers, before its body is
// read; a body over max_body, by Content-Length or counted as chunks arrive, is never
// buffered: it is dropped as read and answered 413.
#pragma once

#include <microhttpd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "api_router.h"
#include "status.h"

namespace gslice {

class HttpListener {
 public:
  struct Settings {
    bool over_tcp = false;
    unsigned max_connections = 256;
    unsigned per_client = 128;
    int request_timeout_s = 10;
    int idle_timeout_s = 30;
    uint64_t max_body = 65536;
    int64_t admin_gid = -1;
  };
  HttpListener(ApiRouter* router, Settings settings) : router_(router), settings_(settings) {}
  ~HttpListener() { Stop(); }

  // Serves the bound, listening socket `fd` (the listener owns it from here on).
  Status Start(int fd);
  void Stop();

 private:
  // What one request has sent so far. One at a time per connection: HTTP/1.1 answers in order.
  struct Request {
    bool headers_seen = false;
    bool too_large = false;
    std::string body;
  };
  using Clock = std::chrono::steady_clock;
  struct Connection {
    int fd = -1;
    std::string client;  // "uid 1000", "127.0.0.1": the key of the per-client count
    Caller caller;
    bool over_limit = false;  // more connections than per_client: answered 429, closed
    Clock::time_point deadline = Clock::time_point::max();  // REQUIRES: mu_ held
    bool shut = false;                                       // REQUIRES: mu_ held
    Request request;
  };

  static void OnConnection(void* cls, MHD_Connection* c, void** socket_context,
                           MHD_ConnectionNotificationCode code);
  static void* OnRequestLine(void* cls, const char* uri, MHD_Connection* c);
  static MHD_Result OnRequest(void* cls, MHD_Connection* c, const char* url, const char* method,
                              const char* version, const char* upload, size_t* upload_size,
                              void** con_cls);
  static void OnCompleted(void* cls, MHD_Connection* c, void** con_cls,
                          MHD_RequestTerminationCode code);
  MHD_Result Answer(MHD_Connection* c, const ApiResponse& r, bool close);
  MHD_Result Refuse(MHD_Connection* c, int status, const std::string& message);
  void SetDeadline(Connection* conn, Clock::time_point deadline) {
    std::lock_guard lock(mu_);
    conn->deadline = deadline;
  }
  void Sweep();

  ApiRouter* router_;
  Settings settings_;
  MHD_Daemon* daemon_ = nullptr;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;                     // REQUIRES: mu_ held
  std::set<Connection*> connections_;         // REQUIRES: mu_ held
  std::map<std::string, unsigned> per_client_;  // REQUIRES: mu_ held
  std::thread sweeper_;
};

}  // namespace gslice
