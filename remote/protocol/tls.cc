#include "tls.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "gslice/clock.h"

namespace gslice::remote {

struct TlsSession {
  SSL* ssl = nullptr;
  int fd = -1;
  int read_timeout_ms = 0;  // 0: none
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
};

struct TlsServer {
  SSL_CTX* ctx = nullptr;
};

namespace {

// The libssl functions used, resolved once (types from OpenSSL's headers, so that a mismatch
// is a compile error, not a crash).
struct Ssl {
#define GSLICE_SSL_FN(name) decltype(&::name) name = nullptr;
#include "tls_functions.inc"
#undef GSLICE_SSL_FN
};

Ssl g_ssl;
pthread_once_t g_once = PTHREAD_ONCE_INIT;
std::string* g_load_error = nullptr;

void Load() {
  static std::string error;
  void* h = dlopen("libssl.so.3", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    error = std::string("cannot load libssl.so.3 for tls:// (install the libssl3 package): ") +
            (why != nullptr ? why : "?");
    g_load_error = &error;
    return;
  }
#define GSLICE_SSL_FN(name)                                                          \
  g_ssl.name = reinterpret_cast<decltype(&::name)>(dlsym(h, #name));                 \
  if (g_ssl.name == nullptr) {                                                       \
    error = "libssl.so.3 lacks " #name " (OpenSSL 3 is needed for tls://)";          \
    g_load_error = &error;                                                           \
    return;                                                                          \
  }
#include "tls_functions.inc"
#undef GSLICE_SSL_FN
}

// OpenSSL's queued errors, as one line (and the queue emptied).
std::string Errors() {
  std::string out;
  for (unsigned long e; (e = g_ssl.ERR_get_error()) != 0;) {
    char buf[256];
    g_ssl.ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no detail from OpenSSL" : out;
}

// Waits for fd to become readable or writable. False on a timeout (timeout_ms < 0: none).
bool Wait(int fd, short events, int timeout_ms) {
  pollfd p = {fd, events, 0};
  int rc;
  do {
    rc = poll(&p, 1, timeout_ms);
  } while (rc < 0 && errno == EINTR);
  return rc > 0;
}

// OpenSSL writes to its socket with write(), which raises SIGPIPE once the peer is gone; inside
// an application (the client) that would kill it. While a guard lives, SIGPIPE is blocked on
// the calling thread, and one that the guarded calls raised is taken back before unblocking
// (one that was pending before is left alone).
class NoSigpipe {
 public:
  NoSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~NoSigpipe() {
    const int saved = errno;
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero = {0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    errno = saved;
  }
  NoSigpipe(const NoSigpipe&) = delete;
  NoSigpipe& operator=(const NoSigpipe&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Runs a handshake step (SSL_connect or SSL_accept) on a non-blocking socket until done.
bool Handshake(SSL* ssl, int fd, bool client, int timeout_ms, std::string* error) {
  const long long deadline = MonotonicMs() + timeout_ms;
  for (;;) {
    int rc, why;
    {
      NoSigpipe guard;
      rc = client ? g_ssl.SSL_connect(ssl) : g_ssl.SSL_accept(ssl);
      why = rc == 1 ? SSL_ERROR_NONE : g_ssl.SSL_get_error(ssl, rc);
    }
    if (rc == 1) return true;
    const long long left = deadline - MonotonicMs();
    if ((why == SSL_ERROR_WANT_READ || why == SSL_ERROR_WANT_WRITE) && left > 0) {
      if (!Wait(fd, why == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, static_cast<int>(left))) {
        *error = "TLS handshake: no answer within " + std::to_string(timeout_ms / 1000) + " s";
        return false;
      }
      continue;
    }
    if (why == SSL_ERROR_WANT_READ || why == SSL_ERROR_WANT_WRITE) {
      *error = "TLS handshake: no answer within " + std::to_string(timeout_ms / 1000) + " s";
    } else if (client && g_ssl.SSL_get_verify_result(ssl) != X509_V_OK) {
      *error = std::string("TLS handshake: the server's certificate is not trusted: ") +
               g_ssl.X509_verify_cert_error_string(g_ssl.SSL_get_verify_result(ssl));
    } else if (why == SSL_ERROR_SYSCALL || why == SSL_ERROR_ZERO_RETURN) {
      *error = "TLS handshake: the peer closed the connection (" + Errors() + ")";
    } else {
      *error = "TLS handshake failed: " + Errors();
    }
    return false;
  }
}

TlsSession* NewSession(SSL_CTX* ctx, int fd) {
  SSL* ssl = g_ssl.SSL_new(ctx);
  if (ssl == nullptr || g_ssl.SSL_set_fd(ssl, fd) != 1) {
    if (ssl != nullptr) g_ssl.SSL_free(ssl);
    return nullptr;
  }
  g_ssl.SSL_ctrl(ssl, SSL_CTRL_MODE, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER, nullptr);
  auto* s = new TlsSession;
  s->ssl = ssl;
  s->fd = fd;
  return s;
}

}  // namespace

bool LoadTls(std::string* error) {
  pthread_once(&g_once, Load);
  if (g_load_error != nullptr) {
    *error = *g_load_error;
    return false;
  }
  return true;
}

TlsSession* TlsConnect(int fd, const std::string& host, const std::string& ca_file, int timeout_ms,
                       std::string* error) {
  if (!LoadTls(error)) return nullptr;
  // One context per connection: a client makes one connection per process.
  SSL_CTX* ctx = g_ssl.SSL_CTX_new(g_ssl.TLS_client_method());
  if (ctx == nullptr) {
    *error = "TLS: " + Errors();
    return nullptr;
  }
  g_ssl.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, nullptr);
  g_ssl.SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  const int loaded = ca_file.empty() ? g_ssl.SSL_CTX_set_default_verify_paths(ctx)
                                     : g_ssl.SSL_CTX_load_verify_locations(ctx, ca_file.c_str(), nullptr);
  if (loaded != 1) {
    *error = "TLS: cannot load the trusted certificates " + (ca_file.empty() ? "of the system" : ca_file) + ": " +
             Errors();
    g_ssl.SSL_CTX_free(ctx);
    return nullptr;
  }
  TlsSession* s = NewSession(ctx, fd);
  g_ssl.SSL_CTX_free(ctx);  // the session holds its own reference
  if (s == nullptr) {
    *error = "TLS: " + Errors();
    return nullptr;
  }
  unsigned char ip[16];
  const bool is_ip = inet_pton(AF_INET, host.c_str(), ip) == 1 || inet_pton(AF_INET6, host.c_str(), ip) == 1;
  const int named = is_ip ? g_ssl.X509_VERIFY_PARAM_set1_ip_asc(g_ssl.SSL_get0_param(s->ssl), host.c_str())
                          : g_ssl.SSL_set1_host(s->ssl, host.c_str());
  if (!is_ip) {
    g_ssl.SSL_ctrl(s->ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name, const_cast<char*>(host.c_str()));
  }
  if (named != 1) {
    *error = "TLS: cannot check the server's certificate against " + host;
    TlsFree(s);
    return nullptr;
  }
  SetNonBlocking(fd);
  if (!Handshake(s->ssl, fd, true, timeout_ms, error)) {
    TlsFree(s);
    return nullptr;
  }
  return s;
}

TlsServer* TlsServerLoad(const std::string& cert_file, const std::string& key_file, std::string* error) {
  if (!LoadTls(error)) return nullptr;
  SSL_CTX* ctx = g_ssl.SSL_CTX_new(g_ssl.TLS_server_method());
  if (ctx == nullptr) {
    *error = "TLS: " + Errors();
    return nullptr;
  }
  g_ssl.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, nullptr);
  if (g_ssl.SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1) {
    *error = "--cert " + cert_file + ": not a PEM certificate chain (" + Errors() + ")";
  } else if (g_ssl.SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    *error = "--key " + key_file + ": not a PEM private key (" + Errors() + ")";
  } else if (g_ssl.SSL_CTX_check_private_key(ctx) != 1) {
    *error = "--key " + key_file + " does not belong to the certificate of --cert " + cert_file;
  } else {
    return new TlsServer{.ctx = ctx};
  }
  g_ssl.SSL_CTX_free(ctx);
  return nullptr;
}

void TlsServerFree(TlsServer* server) {
  if (server == nullptr) return;
  g_ssl.SSL_CTX_free(server->ctx);
  delete server;
}

TlsSession* TlsAccept(TlsServer* server, int fd, int timeout_ms, std::string* error) {
  TlsSession* s = NewSession(server->ctx, fd);
  if (s == nullptr) {
    *error = "TLS: " + Errors();
    return nullptr;
  }
  SetNonBlocking(fd);
  if (!Handshake(s->ssl, fd, false, timeout_ms, error)) {
    TlsFree(s);
    return nullptr;
  }
  return s;
}

void TlsSetReadTimeout(TlsSession* s, int timeout_ms) { s->read_timeout_ms = timeout_ms; }

ssize_t TlsRead(TlsSession* s, void* p, size_t n) {
  if (n == 0) return 0;
  const long long deadline = s->read_timeout_ms > 0 ? MonotonicMs() + s->read_timeout_ms : 0;
  for (;;) {
    if (deadline != 0 && MonotonicMs() >= deadline) return -1;
    pthread_mutex_lock(&s->mu);
    int rc, why;
    {
      NoSigpipe guard;  // reading may write (alerts, key updates)
      rc = g_ssl.SSL_read(s->ssl, p, static_cast<int>(n > (1u << 30) ? (1u << 30) : n));
      why = rc > 0 ? SSL_ERROR_NONE : g_ssl.SSL_get_error(s->ssl, rc);
    }
    pthread_mutex_unlock(&s->mu);
    if (rc > 0) return rc;
    if (why == SSL_ERROR_ZERO_RETURN) return 0;
    if (why == SSL_ERROR_WANT_READ || why == SSL_ERROR_WANT_WRITE) {
      // Waits without the lock; a writer meanwhile may move the session on, so a short poll.
      Wait(s->fd, why == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, why == SSL_ERROR_WANT_READ ? 1000 : 100);
      continue;
    }
    return why == SSL_ERROR_SYSCALL && errno == 0 ? 0 : -1;
  }
}

bool TlsWriteAll(TlsSession* s, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    pthread_mutex_lock(&s->mu);
    int rc, why;
    {
      NoSigpipe guard;
      rc = g_ssl.SSL_write(s->ssl, c, static_cast<int>(n > (1u << 30) ? (1u << 30) : n));
      why = rc > 0 ? SSL_ERROR_NONE : g_ssl.SSL_get_error(s->ssl, rc);
    }
    pthread_mutex_unlock(&s->mu);
    if (rc > 0) {
      c += rc;
      n -= static_cast<size_t>(rc);
      continue;
    }
    if (why == SSL_ERROR_WANT_READ || why == SSL_ERROR_WANT_WRITE) {
      Wait(s->fd, why == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, 100);
      continue;
    }
    return false;
  }
  return true;
}

int TlsFd(const TlsSession* s) { return s->fd; }

void TlsFree(TlsSession* s) {
  if (s == nullptr) return;
  g_ssl.SSL_free(s->ssl);
  pthread_mutex_destroy(&s->mu);
  delete s;
}

bool TlsSha256(const void* p, size_t n, unsigned char digest[32], std::string* error) {
  if (!LoadTls(error)) return false;
  unsigned int size = 0;
  if (g_ssl.EVP_Digest(p, n, digest, &size, g_ssl.EVP_sha256(), nullptr) != 1 || size != 32) {
    *error = "SHA-256: " + Errors();
    return false;
  }
  return true;
}

}  // namespace gslice::remote
