// Frames and addresses on sockets, for both sides. libc only (the client lives inside
// applications; TLS comes from libssl loaded with dlopen, tls.h); no call raises SIGPIPE.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wire.h"

namespace gslice::remote {

// Writes all of p (retrying on EINTR and short writes). False when the peer is gone.
bool WriteAll(int fd, const void* p, size_t n);
// Reads exactly n bytes. False on EOF or error.
bool ReadAll(int fd, void* p, size_t n);

// One frame: the header (its length set to n), then the payload, in one writev.
bool WriteFrame(int fd, const FrameHeader& h, const void* payload, size_t n);

enum class FrameRead { kOk, kClosed, kTooLarge };
// Reads a frame whose payload is at most max_length bytes into *payload.
FrameRead ReadFrame(int fd, uint32_t max_length, FrameHeader* h, std::vector<uint8_t>* payload);

// Frames from a plain socket through a buffer: one read() brings every frame that has
// arrived (a client's queued calls come dozens at a time), and HasFrame() tells whether the
// next is already here. Frames larger than the buffer are read into their payload directly.
class FrameReader {
 public:
  explicit FrameReader(int fd) : fd_(fd), buffer_(kBufferBytes) {}
  FrameRead Next(uint32_t max_length, FrameHeader* h, std::vector<uint8_t>* payload);
  // A whole frame is buffered: Next() will not block.
  bool HasFrame() const;

 private:
  static constexpr size_t kBufferBytes = 256 * 1024;
  // Reads until at least n bytes are buffered (n <= kBufferBytes). False on EOF or error.
  bool Fill(size_t n);
  int fd_;
  std::vector<uint8_t> buffer_;
  size_t begin_ = 0, end_ = 0;  // the buffered bytes are [begin_, end_)
};

struct TlsSession;
struct SharedRings;
// A connected stream: a socket, with TLS over it where tls is set (then every byte goes
// through the session; tls.h says which threads may use it at once), or shared-memory rings
// beside it where rings is set (then every frame goes through the rings and the socket only
// tells whether the peer lives: shm_ring.h).
struct Channel {
  int fd = -1;
  TlsSession* tls = nullptr;
  SharedRings* rings = nullptr;
};
bool WriteAll(const Channel& c, const void* p, size_t n);
bool ReadAll(const Channel& c, void* p, size_t n);
bool WriteFrame(const Channel& c, const FrameHeader& h, const void* payload, size_t n);
FrameRead ReadFrame(const Channel& c, uint32_t max_length, FrameHeader* h, std::vector<uint8_t>* payload);

// "unix:PATH", "tcp://HOST:PORT" or "tls://HOST:PORT" (TCP with TLS).
struct Address {
  bool unix_socket = false;
  bool tls = false;
  std::string path;  // unix
  std::string host;  // tcp, tls
  std::string port;  // tcp, tls
  std::string text;  // as given
};
inline constexpr const char* kAddressForms = "unix:PATH, tcp://HOST:PORT or tls://HOST:PORT";
// False, with a message naming what is wrong, when text is neither form.
bool ParseAddress(const std::string& text, Address* out, std::string* error);

// Asks for 4 MiB socket buffers each way (best effort).
void WidenBuffers(int fd);

// TCP_NODELAY, keepalive probes (2 s idle, 3 probes 1 s apart) and a 5 s limit on
// unacknowledged data: a peer that vanished without closing the connection is noticed
// within about 5 s, idle or not.
void TuneTcp(int fd);

// Connects (blocking). Returns the fd or -1 with *error. TCP connections get TuneTcp; a
// tls:// address is connected as TCP (the TLS handshake is the caller's, tls.h).
int Connect(const Address& a, std::string* error);

}  // namespace gslice::remote
