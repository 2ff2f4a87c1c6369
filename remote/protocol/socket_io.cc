#include "socket_io.h"

#include "shm_ring.h"
#include "tls.h"

#include <errno.h>
#include <stdint.h>
#include <netdb.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace gslice::remote {

bool WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool WriteFrame(int fd, const FrameHeader& h, const void* payload, size_t n) {
  uint8_t head[kHeaderSize];
  FrameHeader sized = h;
  sized.length = static_cast<uint32_t>(n);
  EncodeHeader(sized, head);
  iovec iov[2] = {{head, kHeaderSize}, {const_cast<void*>(payload), n}};
  size_t total = kHeaderSize + n;
  int first = 0;
  while (total > 0) {
    msghdr msg = {};
    msg.msg_iov = iov + first;
    msg.msg_iovlen = static_cast<size_t>(2 - first);
    ssize_t w = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    total -= static_cast<size_t>(w);
    size_t done = static_cast<size_t>(w);
    while (first < 2 && done >= iov[first].iov_len) {
      done -= iov[first].iov_len;
      ++first;
    }
    if (first < 2) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + done;
      iov[first].iov_len -= done;
    }
  }
  return true;
}

FrameRead ReadFrame(int fd, uint32_t max_length, FrameHeader* h, std::vector<uint8_t>* payload) {
  uint8_t head[kHeaderSize];
  if (!ReadAll(fd, head, kHeaderSize)) return FrameRead::kClosed;
  if (!DecodeHeader(head, max_length, h)) return FrameRead::kTooLarge;
  payload->resize(h->length);
  if (h->length != 0 && !ReadAll(fd, payload->data(), h->length)) return FrameRead::kClosed;
  return FrameRead::kOk;
}

bool FrameReader::Fill(size_t n) {
  if (end_ - begin_ >= n) return true;
  if (begin_ + n > buffer_.size()) {
    // Move what is left to the front to make room.
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  while (end_ - begin_ < n) {
    const ssize_t r = read(fd_, buffer_.data() + end_, buffer_.size() - end_);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    end_ += static_cast<size_t>(r);
  }
  return true;
}

bool FrameReader::HasFrame() const {
  if (end_ - begin_ < kHeaderSize) return false;
  FrameHeader h;
  // A header that does not decode is "here" too: Next() reports it without blocking.
  if (!DecodeHeader(buffer_.data() + begin_, UINT32_MAX, &h)) return true;
  return end_ - begin_ >= kHeaderSize + static_cast<size_t>(h.length);
}

FrameRead FrameReader::Next(uint32_t max_length, FrameHeader* h, std::vector<uint8_t>* payload) {
  if (!Fill(kHeaderSize)) return FrameRead::kClosed;
  if (!DecodeHeader(buffer_.data() + begin_, max_length, h)) return FrameRead::kTooLarge;
  begin_ += kHeaderSize;
  payload->resize(h->length);
  const size_t buffered = std::min<size_t>(end_ - begin_, h->length);
  std::memcpy(payload->data(), buffer_.data() + begin_, buffered);
  begin_ += buffered;
  if (buffered < h->length) {
    // The rest straight into the payload (the buffer is empty now).
    begin_ = end_ = 0;
    if (!ReadAll(fd_, payload->data() + buffered, h->length - buffered)) return FrameRead::kClosed;
  }
  if (begin_ == end_) begin_ = end_ = 0;
  return FrameRead::kOk;
}

bool WriteAll(const Channel& c, const void* p, size_t n) {
  if (c.rings != nullptr) return RingWriteAll(c.rings, p, n);
  return c.tls != nullptr ? TlsWriteAll(c.tls, p, n) : WriteAll(c.fd, p, n);
}

bool ReadAll(const Channel& c, void* p, size_t n) {
  if (c.rings != nullptr) return RingReadAll(c.rings, p, n);
  if (c.tls == nullptr) return ReadAll(c.fd, p, n);
  char* at = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = TlsRead(c.tls, at, n);
    if (r <= 0) return false;
    at += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool WriteFrame(const Channel& c, const FrameHeader& h, const void* payload, size_t n) {
  if (c.tls == nullptr && c.rings == nullptr) return WriteFrame(c.fd, h, payload, n);
  uint8_t head[kHeaderSize];
  FrameHeader sized = h;
  sized.length = static_cast<uint32_t>(n);
  EncodeHeader(sized, head);
  if (c.rings != nullptr) {
    const iovec pieces[2] = {{head, kHeaderSize}, {const_cast<void*>(payload), n}};
    return RingWrite(c.rings, pieces, 2);
  }
  return TlsWriteAll(c.tls, head, kHeaderSize) && (n == 0 || TlsWriteAll(c.tls, payload, n));
}

FrameRead ReadFrame(const Channel& c, uint32_t max_length, FrameHeader* h, std::vector<uint8_t>* payload) {
  if (c.tls == nullptr && c.rings == nullptr) return ReadFrame(c.fd, max_length, h, payload);
  uint8_t head[kHeaderSize];
  if (!ReadAll(c, head, kHeaderSize)) return FrameRead::kClosed;
  if (!DecodeHeader(head, max_length, h)) return FrameRead::kTooLarge;
  payload->resize(h->length);
  if (h->length != 0 && !ReadAll(c, payload->data(), h->length)) return FrameRead::kClosed;
  return FrameRead::kOk;
}

bool ParseAddress(const std::string& text, Address* out, std::string* error) {
  *out = Address{};
  out->text = text;
  if (text.rfind("unix:", 0) == 0) {
    out->unix_socket = true;
    out->path = text.substr(5);
    if (out->path.empty() || out->path.size() >= sizeof(sockaddr_un{}.sun_path)) {
      *error = text + ": a unix socket path of 1 to 107 characters";
      return false;
    }
    return true;
  }
  if (text.rfind("tcp://", 0) == 0 || text.rfind("tls://", 0) == 0) {
    out->tls = text[1] == 'l';
    std::string rest = text.substr(6);
    size_t colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size()) {
      *error = text + (out->tls ? ": expected tls://HOST:PORT" : ": expected tcp://HOST:PORT");
      return false;
    }
    out->host = rest.substr(0, colon);
    out->port = rest.substr(colon + 1);
    if (out->host.size() > 2 && out->host.front() == '[' && out->host.back() == ']') {
      out->host = out->host.substr(1, out->host.size() - 2);
    }
    for (char c : out->port) {
      if (c < '0' || c > '9') {
        *error = text + ": the port must be a number";
        return false;
      }
    }
    if (out->port.size() > 5 || strtoul(out->port.c_str(), nullptr, 10) > 65535) {
      *error = text + ": the port must be at most 65535";
      return false;
    }
    return true;
  }
  *error = text + ": expected " + kAddressForms;
  return false;
}

void WidenBuffers(int fd) {
  // Large copies move in a few big writes instead of many 200 KiB ones (each a context switch
  // between the two processes). Beyond the system's limit only with CAP_NET_ADMIN.
  int bytes = 4 << 20;
  for (int opt : {SO_SNDBUF, SO_RCVBUF}) {
    if (setsockopt(fd, SOL_SOCKET, opt == SO_SNDBUF ? SO_SNDBUFFORCE : SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0) {
      setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof bytes);
    }
  }
}

int Connect(const Address& a, std::string* error) {
  if (a.unix_socket) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *error = std::string("socket: ") + strerror(errno);
      return -1;
    }
    sockaddr_un sa = {};
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, a.path.c_str(), a.path.size());
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      *error = "connect " + a.text + ": " + strerror(errno);
      close(fd);
      return -1;
    }
    WidenBuffers(fd);
    return fd;
  }
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(a.host.c_str(), a.port.c_str(), &hints, &res);
  if (rc != 0) {
    *error = a.text + ": " + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  std::string last = "no address";
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      last = strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    *error = "connect " + a.text + ": " + last;
    return -1;
  }
  WidenBuffers(fd);
  TuneTcp(fd);
  return fd;
}

void TuneTcp(int fd) {
  int one = 1, idle = 2, interval = 1, count = 3;
  unsigned int unacknowledged_ms = 5000;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &unacknowledged_ms, sizeof unacknowledged_ms);
}

}  // namespace gslice::remote
