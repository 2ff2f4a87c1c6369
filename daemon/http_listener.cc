#include "http_listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <tuple>

#include "peer_identity.h"

namespace gslice {
namespace {

std::string AddressText(const sockaddr* addr) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (addr == nullptr) return text;
  if (addr->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, text, sizeof text);
  } else if (addr->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr, text, sizeof text);
  }
  return text;
}

// Connections the library may hold past max_connections: those being closed to make room,
// until their threads end. At its own limit the library would accept a connection and
// close it unanswered, so it is never reached but in a flood faster than connections close.
unsigned Headroom(unsigned max_connections) { return std::max(8u, max_connections / 8); }

// Writes all of `data` to the connected socket `fd`, waiting at most a second for room.
void WriteAll(int fd, const std::string& data) {
  size_t sent = 0;
  for (int waits = 0; sent < data.size() && waits < 10;) {
    ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 100);
      ++waits;
    } else if (n < 0 && errno != EINTR) {
      return;
    }
  }
}

// The connection this thread serves (a thread per connection), for OnLibraryLog; set once
// its first request line is read. A Connection*, which the anonymous namespace cannot name.
thread_local void* this_threads_connection = nullptr;

// What libmicrohttpd 0.9.75 logs, with the status and its HTML page, just before it answers
// a request it cannot read with a page of its own and closes the connection.
constexpr char kLibraryRefusal[] = "Error processing request (HTTP response code is %u ('%s')). Closing connection.\n";

// The text of an HTML page, without its head and tags: "Your HTTP request has ...".
std::string PageText(const char* html) {
  std::string page = html != nullptr ? html : "";
  if (size_t body = page.find("<body>"); body != std::string::npos) page.erase(0, body + 6);
  std::string text;
  bool in_tag = false;
  for (char ch : page) {
    if (ch == '<') in_tag = true;
    if (!in_tag) text += ch;
    if (ch == '>') in_tag = false;
  }
  return text;
}

}  // namespace

Status HttpListener::Start(int fd) {
  // MHD_USE_ERROR_LOG: the library logs to OnLibraryLog, which prints nothing.
  const unsigned flags =
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ERROR_LOG;
  // Connections per client and max_connections are enforced in OnConnection, on both
  // transports: the library's own per-address limit would make every local user on TCP one
  // client, and at its connection limit it closes new connections unanswered.
  daemon_ = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &HttpListener::OnRequest, this,
      MHD_OPTION_LISTEN_SOCKET, fd,
      MHD_OPTION_CONNECTION_LIMIT, settings_.max_connections + Headroom(settings_.max_connections),
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(settings_.idle_timeout_s),
      MHD_OPTION_NOTIFY_CONNECTION, &HttpListener::OnConnection, this,
      MHD_OPTION_NOTIFY_COMPLETED, &HttpListener::OnCompleted, this,
      MHD_OPTION_URI_LOG_CALLBACK, &HttpListener::OnRequestLine, this,
      MHD_OPTION_EXTERNAL_LOGGER, &HttpListener::OnLibraryLog, this,
      MHD_OPTION_END);
  if (daemon_ == nullptr) {
    close(fd);
    return Status::Unavailable("cannot start serving the API (libmicrohttpd refused its options)");
  }
  sweeper_ = std::thread([this] { Sweep(); });
  return Status::Ok();
}

void HttpListener::Stop() {
  if (daemon_ == nullptr) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  sweeper_.join();
  MHD_stop_daemon(daemon_);  // closes the listening socket and every connection
  daemon_ = nullptr;
}

void HttpListener::Shut(Connection* conn) {
  // The fd is the connection's until OnConnection(CLOSED), which takes mu_ first.
  shutdown(conn->fd, SHUT_RDWR);
  conn->shut = true;
  --open_;
}

void HttpListener::Sweep() {
  std::unique_lock lock(mu_);
  while (!stop_cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stopping_; })) {
    const Clock::time_point now = Clock::now();
    for (Connection* conn : connections_) {
      if (!conn->shut && conn->deadline <= now) Shut(conn);
    }
  }
}

void HttpListener::MakeRoom(Connection* arriving) {
  if (open_ <= settings_.max_connections) return;
  // The most expendable waiting connection: over its client's limit; without the token
  // (TCP); of the client holding the most; waiting longest.
  Connection* victim = nullptr;
  auto rank = [&](const Connection* c) {
    return std::make_tuple(c->over_limit || c->no_room, settings_.over_tcp && !c->token_seen,
                           per_client_[c->client], Clock::time_point::max() - c->waiting_since);
  };
  for (Connection* conn : connections_) {
    if (conn == arriving || conn->shut || conn->answering) continue;
    if (victim == nullptr || rank(conn) > rank(victim)) victim = conn;
  }
  if (victim != nullptr) {
    Shut(victim);
  } else {
    arriving->no_room = true;  // every other one is being answered
  }
}

std::string HttpListener::ClientOf(MHD_Connection* c, Connection* conn) const {
  if (!settings_.over_tcp) return "uid " + std::to_string(conn->caller.uid);
  if (std::optional<int64_t> uid = LoopbackPeerUid(conn->fd)) return "uid " + std::to_string(*uid);
  const MHD_ConnectionInfo* addr = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  return AddressText(addr != nullptr ? addr->client_addr : nullptr);
}

void HttpListener::OnConnection(void* cls, MHD_Connection* c, void** socket_context,
                                MHD_ConnectionNotificationCode code) {
  auto* self = static_cast<HttpListener*>(cls);
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    auto conn = std::make_unique<Connection>();
    const MHD_ConnectionInfo* fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    conn->fd = fd != nullptr ? fd->connect_fd : -1;
    if (!self->settings_.over_tcp) conn->caller = UnixPeerCaller(conn->fd, self->settings_.admin_gid);
    conn->client = self->ClientOf(c, conn.get());
    std::lock_guard lock(self->mu_);
    conn->over_limit = ++self->per_client_[conn->client] > self->settings_.per_client;
    conn->waiting_since = Clock::now();
    // Its first request must arrive whole within the request timeout of its opening.
    conn->deadline = conn->waiting_since + std::chrono::seconds(self->settings_.request_timeout_s);
    self->connections_.insert(conn.get());
    ++self->open_;
    self->MakeRoom(conn.get());
    *socket_context = conn.release();
  } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
    std::unique_ptr<Connection> conn(static_cast<Connection*>(*socket_context));
    if (conn == nullptr) return;
    std::lock_guard lock(self->mu_);
    self->connections_.erase(conn.get());
    if (!conn->shut) --self->open_;
    if (--self->per_client_[conn->client] == 0) self->per_client_.erase(conn->client);
  }
}

void* HttpListener::OnRequestLine(void*, const char*, MHD_Connection* c) {
  // The request's context is the connection's: one request at a time, reset here. Its
  // deadline stays the one set when the connection opened or its last answer was sent.
  const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  auto* conn = info != nullptr ? static_cast<Connection*>(info->socket_context) : nullptr;
  if (conn != nullptr) conn->request = Request{};
  this_threads_connection = conn;
  return conn;
}

void HttpListener::OnLibraryLog(void* cls, const char* format, va_list args) {
  // The library answers some requests it cannot read with a page of its own: a
  // Content-Length that is not a number (400) or past 2^64 (413), a malformed chunk (400),
  // headers over its buffer (431). 0.9.75 sends the first two with their status line and
  // headers twice. So that every answer is the API's, the listener answers first, as the
  // library is about to, and ends its side of the connection: the library's page is never
  // sent (its send fails) and it closes the connection. Before the first request line the
  // thread has no connection yet, and the library's own page goes out (414: a request line
  // over its buffer).
  auto* conn = static_cast<Connection*>(this_threads_connection);
  if (conn == nullptr || std::strcmp(format, kLibraryRefusal) != 0) return;
  auto* self = static_cast<HttpListener*>(cls);
  va_list copy;
  va_copy(copy, args);
  const unsigned status = va_arg(copy, unsigned);
  std::string message = PageText(va_arg(copy, const char*));
  va_end(copy);
  if (message.empty()) message = "the request could not be read";
  if (status == 413) {
    message += " gsliced takes bodies of at most max_body_bytes (" + std::to_string(self->settings_.max_body) +
               " bytes).";
  }
  const ApiResponse r = ErrorResponse(static_cast<int>(status), message);
  self->router_->counters().Count(r.status);
  WriteAll(conn->fd, "HTTP/1.1 " + std::to_string(status) + " " + MHD_get_reason_phrase_for(status) +
                         "\r\nContent-Type: " + r.content_type +
                         "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: "
                         "close\r\nContent-Length: " + std::to_string(r.body.size()) + "\r\n\r\n" + r.body);
  shutdown(conn->fd, SHUT_WR);
}

void HttpListener::OnCompleted(void* cls, MHD_Connection*, void** con_cls,
                               MHD_RequestTerminationCode) {
  auto* self = static_cast<HttpListener*>(cls);
  auto* conn = static_cast<Connection*>(*con_cls);
  if (conn == nullptr) return;
  conn->request = Request{};
  std::lock_guard lock(self->mu_);
  conn->answering = false;
  conn->waiting_since = Clock::now();
  // Kept alive: its next request must arrive whole within the idle timeout.
  conn->deadline = conn->waiting_since + std::chrono::seconds(self->settings_.idle_timeout_s);
}

MHD_Result HttpListener::Answer(MHD_Connection* c, const ApiResponse& r, bool close) {
  MHD_Response* response = MHD_create_response_from_buffer(
      r.body.size(), const_cast<char*>(r.body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, "Content-Type", r.content_type.c_str());
  MHD_add_response_header(response, "Cache-Control", "no-store");
  MHD_add_response_header(response, "X-Content-Type-Options", "nosniff");
  if (!r.allow.empty()) MHD_add_response_header(response, "Allow", r.allow.c_str());
  if (r.content_type.rfind("text/html", 0) == 0) {
    MHD_add_response_header(response, "Content-Security-Policy",
                            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'");
  }
  if (close) MHD_add_response_header(response, "Connection", "close");
  MHD_Result queued = MHD_queue_response(c, static_cast<unsigned>(r.status), response);
  MHD_destroy_response(response);
  return queued;
}

// An answer the transport gives itself, before (or instead of) the router.
MHD_Result HttpListener::Refuse(MHD_Connection* c, int status, const std::string& message) {
  router_->counters().Count(status);
  return Answer(c, ErrorResponse(status, message), /*close=*/true);
}

MHD_Result HttpListener::OnRequest(void* cls, MHD_Connection* c, const char* url,
                                   const char* method, const char*, const char* upload,
                                   size_t* upload_size, void** con_cls) {
  auto* self = static_cast<HttpListener*>(cls);
  auto* conn = static_cast<Connection*>(*con_cls);
  if (conn == nullptr) return MHD_NO;
  Request& req = conn->request;
  if (!req.headers_seen) {
    req.headers_seen = true;
    return self->OnHeaders(c, conn, url, method);
  }
  if (*upload_size != 0) {
    // Whatever the transfer encoding, at most max_body bytes are kept; past that the rest
    // is read and dropped (the request deadline bounds how long) and the answer is 413.
    if (!req.too_large && req.body.size() + *upload_size > self->settings_.max_body) {
      req.too_large = true;
      std::string().swap(req.body);
    }
    if (!req.too_large) req.body.append(upload, *upload_size);
    *upload_size = 0;
    return MHD_YES;
  }
  return self->OnWholeRequest(c, conn, url, method);
}

MHD_Result HttpListener::OnHeaders(MHD_Connection* c, Connection* conn, const char* url, const char* method) {
  const Settings& cfg = settings_;
  if (conn->no_room) {
    return Refuse(c, 503, "gsliced is answering as many requests as it has threads for (api_threads = " +
                              std::to_string(cfg.max_connections) + "): ask again in a moment");
  }
  if (conn->over_limit) {
    return Refuse(c, 429, conn->client + " holds more than " + std::to_string(cfg.per_client) +
                              " connections to gsliced (api_connections_per_client): "
                              "reuse connections, or close some");
  }
  const char* auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
  if (cfg.over_tcp && !router_->Authorized(method, url, auth ? auth : "")) {
    return Refuse(c, 401, "missing or wrong bearer token: send `Authorization: Bearer "
                          "<token>` (the token is in gsliced's token_file)");
  }
  if (cfg.over_tcp && router_->HoldsToken(auth ? auth : "")) {
    std::lock_guard lock(mu_);
    conn->token_seen = true;
  }
  if (const char* length = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length")) {
    errno = 0;
    char* end = nullptr;
    unsigned long long n = std::strtoull(length, &end, 10);
    // Known too large: nothing of it is kept. It is read and dropped and answered 413
    // at its end (within the request timeout), so a client that sends its whole body
    // before reading reads the answer rather than a reset.
    if (errno == ERANGE || n > cfg.max_body) conn->request.too_large = true;
  }
  return MHD_YES;
}

MHD_Result HttpListener::OnWholeRequest(MHD_Connection* c, Connection* conn, const char* url,
                                        const char* method) {
  const Settings& cfg = settings_;
  {
    std::lock_guard lock(mu_);
    conn->answering = true;
    conn->deadline = Clock::time_point::max();  // answering: no deadline meanwhile
  }
  if (conn->request.too_large) {
    return Refuse(c, 413, "request body larger than max_body_bytes (" + std::to_string(cfg.max_body) + " bytes)");
  }
  const char* auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
  ApiRequest request;
  request.method = std::strcmp(method, "HEAD") == 0 ? "GET" : method;
  request.path = url;
  MHD_get_connection_values(
      c, MHD_GET_ARGUMENT_KIND,
      +[](void* out, MHD_ValueKind, const char* key, const char* value) -> MHD_Result {
        static_cast<ApiRequest*>(out)->query[key] = value ? value : "";
        return MHD_YES;
      },
      &request);
  request.body = std::move(conn->request.body);
  request.authorization = auth ? auth : "";
  request.over_tcp = cfg.over_tcp;
  const bool token = cfg.over_tcp && router_->HoldsToken(request.authorization);
  if (!cfg.over_tcp) {
    request.caller = conn->caller;
  } else if (token) {
    request.caller = TokenCaller();
  }
  // On TCP only the token's holder keeps a connection alive: one without it (the
  // dashboard's files) is answered and closed, so it never waits for a next request.
  return Answer(c, router_->Handle(request), /*close=*/cfg.over_tcp && !token);
}

}  // namespace gslice
