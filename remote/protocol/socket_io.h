// Frames and addresses on sockets, for both sides. libc only (the client lives inside
// applications); no call raises SIGPIPE.
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

// "unix:PATH" or "tcp://HOST:PORT".
struct Address {
  bool unix_socket = false;
  std::string path;  // unix
  std::string host;  // tcp
  std::string port;  // tcp
  std::string text;  // as given
};
// False, with a message naming what is wrong, when text is neither form.
bool ParseAddress(const std::string& text, Address* out, std::string* error);

// Asks for 4 MiB socket buffers each way (best effort).
void WidenBuffers(int fd);

// TCP_NODELAY, keepalive probes (2 s idle, 3 probes 1 s apart) and a 5 s limit on
// unacknowledged data: a peer that vanished without closing the connection is noticed
// within about 5 s, idle or not.
void TuneTcp(int fd);

// Connects (blocking). Returns the fd or -1 with *error. TCP connections get TuneTcp.
int Connect(const Address& a, std::string* error);

}  // namespace gslice::remote
