// TLS for remote GPUs served to other machines (docs/remote.md, Security), on OpenSSL's libssl.so.3
// loaded with dlopen at the first use: the forwarding client stays loadable with libc only and
// loads libssl only for a tls:// address; gslice-remoted loads it only for a tls:// listener.
//
// A TlsSession is one connection after its handshake. Its socket is non-blocking from then on;
// TlsRead and TlsWriteAll block the calling thread (poll) but never while holding the session's
// lock, so that one thread may wait in TlsRead while others write (OpenSSL forbids concurrent
// use of one SSL object; the lock serialises every use). No call raises SIGPIPE.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace gslice::remote {

struct TlsSession;
struct TlsServer;

// Loads libssl once (thread-safe). False, with a message naming the package, when it is missing.
bool LoadTls(std::string* error);

// The client's handshake over the connected socket fd: TLS 1.2 or newer, the server's
// certificate verified against ca_file (PEM; "" : the system's trusted roots) and against host
// (a DNS name or an IP address in its subjectAltName). nullptr, with the reason, when any of it
// fails. The socket stays the caller's to close.
TlsSession* TlsConnect(int fd, const std::string& host, const std::string& ca_file, int timeout_ms,
                       std::string* error);

// The server's certificate chain and key (PEM files). nullptr, with the reason, when they do not
// load or do not match.
TlsServer* TlsServerLoad(const std::string& cert_file, const std::string& key_file, std::string* error);
void TlsServerFree(TlsServer* server);
// The server's handshake on an accepted socket, within timeout_ms.
TlsSession* TlsAccept(TlsServer* server, int fd, int timeout_ms, std::string* error);

// Reads up to n bytes, waiting for at least one. >0: bytes read; 0: the peer closed; -1: error,
// or nothing came within the read timeout.
ssize_t TlsRead(TlsSession* s, void* p, size_t n);
// How long TlsRead waits for data before it fails (ms; 0: for ever, the default). Set it while
// no other thread reads.
void TlsSetReadTimeout(TlsSession* s, int timeout_ms);
// Writes all of p. False when the peer is gone.
bool TlsWriteAll(TlsSession* s, const void* p, size_t n);
// The session's socket.
int TlsFd(const TlsSession* s);
// Frees the session (not its socket).
void TlsFree(TlsSession* s);

// The SHA-256 digest of p (libcrypto's, through the libssl this file loads). False, with the
// reason, when libssl cannot be loaded.
bool TlsSha256(const void* p, size_t n, unsigned char digest[32], std::string* error);

}  // namespace gslice::remote
