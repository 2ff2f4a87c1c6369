// One API listener: a libmicrohttpd daemon (a thread per connection) on a socket bound by
// the caller, and what the library does not do itself. Requests go to an ApiRouter.
//
// Clients. Each connection belongs to a client: on the unix socket its peer's uid; on TCP
// from a loopback address the uid the kernel gives the peer's socket (so the users of one
// machine are as many clients as on the unix socket, not one address); on TCP from
// elsewhere its address. A client holds at most per_client connections; the next ones are
// answered 429 on their headers and closed.
//
// Threads. A listener serves at most max_connections connections, each on its own thread;
// a connection waiting for a request (opened and silent, or kept alive between requests)
// holds its thread too. So that waiting connections cannot keep others out, a connection
// that would make one more closes a waiting one first: one its client may not hold (over
// its limit, or refused for room); on TCP, one whose requests never carried the token
// before one that did; then one of the client holding the most connections, the one
// waiting longest. A connection being answered is never closed for room; when all are,
// the new one is answered 503 on its headers. So a client holding fewer connections than
// the largest holder always gets in, and a request with the token is never kept out by
// ones without it.
//
// Deadlines (a sweeper shuts down connections that pass theirs; the library closes them).
// A connection's first request must arrive whole, request line, headers and body, within
// request_timeout_s of the connection opening; after an answer the next must arrive whole
// within idle_timeout_s of it. A TCP connection whose request did not carry the token is
// closed after its answer, so it lives at most request_timeout_s plus its answer. A
// connection that stops reading its answer is closed after idle_timeout_s without progress.
//
// Bodies. A request without the token on TCP is refused (401) on its headers, before its
// body is read; a body over max_body, by Content-Length or counted as chunks arrive, is
// never buffered: it is dropped as read and answered 413. Every answer of the listener's
// own is the API's JSON error.
#pragma once

#include <microhttpd.h>

#include <chrono>
#include <condition_variable>
#include <cstdarg>
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
  using Clock = std::chrono::steady_clock;

  // What one request has sent so far. One at a time per connection: HTTP/1.1 answers in order.
  struct Request {
    bool headers_seen = false;
    bool too_large = false;
    std::string body;
  };
  struct Connection {
    int fd = -1;
    std::string client;  // "uid 1000", "192.0.2.7": the key of the per-client count
    Caller caller;       // on the unix socket
    // Decided as it opens, before its thread runs.
    bool over_limit = false;  // more connections than per_client: answered 429, closed
    bool no_room = false;     // max_connections were all being answered: answered 503, closed
    // Fields below: REQUIRES mu_ held.
    bool token_seen = false;  // TCP: a request on it carried the token
    bool answering = false;   // its request is complete: being answered, never closed for room
    Clock::time_point waiting_since;                        // opened, or its last answer sent
    Clock::time_point deadline = Clock::time_point::max();  // shut down when it passes
    bool shut = false;
    Request request;  // only the connection's own thread touches it
  };

  static void OnConnection(void* cls, MHD_Connection* c, void** socket_context,
                           MHD_ConnectionNotificationCode code);
  static void* OnRequestLine(void* cls, const char* uri, MHD_Connection* c);
  static MHD_Result OnRequest(void* cls, MHD_Connection* c, const char* url, const char* method,
                              const char* version, const char* upload, size_t* upload_size,
                              void** con_cls);
  static void OnCompleted(void* cls, MHD_Connection* c, void** con_cls,
                          MHD_RequestTerminationCode code);
  // The library's log: where it says it answers a request itself, the API answers instead.
  static void OnLibraryLog(void* cls, const char* format, va_list args);
  // The first call for a request: its headers are in, its body is not read yet.
  MHD_Result OnHeaders(MHD_Connection* c, Connection* conn, const char* url, const char* method);
  // The last call: the whole request is in.
  MHD_Result OnWholeRequest(MHD_Connection* c, Connection* conn, const char* url, const char* method);
  MHD_Result Answer(MHD_Connection* c, const ApiResponse& r, bool close);
  MHD_Result Refuse(MHD_Connection* c, int status, const std::string& message);
  // The client a new connection belongs to (see the top of this file).
  std::string ClientOf(MHD_Connection* c, Connection* conn) const;
  // With `arriving` one connection too many, shuts down one that waits, or marks `arriving`
  // no_room. REQUIRES: mu_ held.
  void MakeRoom(Connection* arriving);
  void Shut(Connection* conn);  // REQUIRES: mu_ held
  void Sweep();

  ApiRouter* router_;
  Settings settings_;
  MHD_Daemon* daemon_ = nullptr;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;                       // REQUIRES: mu_ held
  std::set<Connection*> connections_;           // REQUIRES: mu_ held
  unsigned open_ = 0;                           // connections_ not shut; REQUIRES: mu_ held
  std::map<std::string, unsigned> per_client_;  // REQUIRES: mu_ held
  std::thread sweeper_;
};

}  // namespace gslice
