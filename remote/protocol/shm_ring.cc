#include "shm_ring.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <new>

#include "gslice/clock.h"
#include "socket_io.h"

namespace gslice::remote {

namespace {

// One ring's control words, each side's on a cache line of its own. Everything here is also
// the peer's to write (see the contract in shm_ring.h): read only as hints and checked.
struct RingControl {
  alignas(64) std::atomic<uint64_t> head;  // bytes the producer has published
  alignas(64) std::atomic<uint64_t> tail;  // bytes the consumer has taken
  alignas(64) std::atomic<uint32_t> data_seq;  // bumped after head moves (the consumer's futex)
  std::atomic<uint32_t> consumer_waiting;
  alignas(64) std::atomic<uint32_t> space_seq;  // bumped after tail moves (the producer's futex)
  std::atomic<uint32_t> producer_waiting;
};
static_assert(2 * sizeof(RingControl) <= kRingsHeader);
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && sizeof(std::atomic<uint64_t>) == sizeof(uint64_t));

// The ring each side writes: 0 carries requests (the client's), 1 replies (the worker's).
constexpr int kRequestRing = 0;
constexpr int kReplyRing = 1;

}  // namespace

// This process's view of the mapping. The positions are private: never read back from the
// shared memory.
struct SharedRings {
  uint8_t* base = nullptr;
  size_t map_bytes = 0;
  uint64_t ring_bytes = 0;  // a power of two, chosen (client) or checked (worker) here
  uint32_t spin_us = 0;
  int liveness_fd = -1;
  int wait_slice_ms = kClientWaitSliceMs;
  RingControl* out = nullptr;  // the ring this side writes
  uint8_t* out_data = nullptr;
  uint64_t out_pos = 0;  // bytes written; REQUIRES the one writer
  RingControl* in = nullptr;  // the ring this side reads
  uint8_t* in_data = nullptr;
  uint64_t in_pos = 0;  // bytes read; REQUIRES the one reader
  std::atomic<bool> closed{false};
  std::atomic<bool> broken{false};  // closed because the peer's counters failed their checks
  std::atomic<const char*> failure{nullptr};
};

namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

uint32_t* Word(std::atomic<uint32_t>* a) { return reinterpret_cast<uint32_t*>(a); }

// Shared (not private) futexes: the two sides are different processes.
void FutexWait(std::atomic<uint32_t>* word, uint32_t seen, int timeout_ms) {
  timespec t = {.tv_sec = timeout_ms / 1000, .tv_nsec = (timeout_ms % 1000) * 1000000L};
  syscall(SYS_futex, Word(word), FUTEX_WAIT, seen, &t, nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word) { syscall(SYS_futex, Word(word), FUTEX_WAKE, 0x7fffffff, nullptr, nullptr, 0); }

bool Fail(SharedRings* r, const char* why) {
  const char* none = nullptr;
  r->failure.compare_exchange_strong(none, why);
  r->closed.store(true);
  return false;
}

// The peer's counter failed its check: a protocol violation.
bool Broken(SharedRings* r, const char* why) {
  r->broken.store(true);
  return Fail(r, why);
}

// The peer's socket: closed (or broken) means the peer is gone.
bool PeerGone(const SharedRings* r) {
  if (r->liveness_fd < 0) return false;
  pollfd p = {r->liveness_fd, POLLRDHUP, 0};
  int rc;
  do {
    rc = poll(&p, 1, 0);
  } while (rc < 0 && errno == EINTR);
  return rc < 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

// The peer moved its counter: bumps the word and wakes the other side if it sleeps. The
// seq_cst order (counter store, bump, flag load here; flag store, counter load in Wait) means
// a sleeper either sees the counter or is woken.
void Notify(std::atomic<uint32_t>* word, std::atomic<uint32_t>* waiting) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  word->fetch_add(1);
  if (waiting->load() != 0) FutexWake(word);
}

// Waits until ready() (something to do, or a broken counter for the caller to find): a spin
// of at most spin_us, then futex sleeps of at most the side's wait slice, between which the socket
// and Close() are checked. False when the transport closed meanwhile.
template <typename Ready>
bool Wait(SharedRings* r, std::atomic<uint32_t>* word, std::atomic<uint32_t>* waiting, Ready ready) {
  if (r->spin_us > 0) {
    // Between short bursts of polling the spinner yields its core: a runnable thread there (the
    // peer itself, on a machine with few cores) runs instead of waiting for the spin to end.
    const int64_t until = MonotonicNs() + static_cast<int64_t>(r->spin_us) * 1000;
    do {
      for (int i = 0; i < 16; ++i) {
        if (ready()) return true;
        CpuRelax();
      }
      if (r->closed.load(std::memory_order_relaxed)) return false;
      sched_yield();
    } while (MonotonicNs() < until);
  }
  const int64_t slice_ns = static_cast<int64_t>(r->wait_slice_ms) * 1000000;
  int64_t next_check = MonotonicNs() + slice_ns;
  for (;;) {
    const uint32_t seen = word->load();
    waiting->store(1);
    // The flag before the counter (Notify: the counter before the flag): one side sees the other.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (ready()) {
      waiting->store(0, std::memory_order_relaxed);
      return true;
    }
    if (r->closed.load()) return false;
    FutexWait(word, seen, r->wait_slice_ms);
    waiting->store(0, std::memory_order_relaxed);
    if (ready()) return true;
    if (r->closed.load()) return false;
    if (const int64_t now = MonotonicNs(); now >= next_check) {
      if (PeerGone(r)) return Fail(r, "the peer closed its socket");
      next_check = now + slice_ns;
    }
  }
}

void CopyIn(SharedRings* r, uint64_t pos, const uint8_t* src, uint64_t n) {
  const uint64_t at = pos & (r->ring_bytes - 1);
  const uint64_t first = std::min(n, r->ring_bytes - at);
  std::memcpy(r->out_data + at, src, first);
  if (n > first) std::memcpy(r->out_data, src + first, n - first);
}

void CopyOut(SharedRings* r, uint64_t pos, uint8_t* dst, uint64_t n) {
  const uint64_t at = pos & (r->ring_bytes - 1);
  const uint64_t first = std::min(n, r->ring_bytes - at);
  std::memcpy(dst, r->in_data + at, first);
  if (n > first) std::memcpy(dst + first, r->in_data, n - first);
}

void Publish(SharedRings* r) {
  r->out->head.store(r->out_pos);
  Notify(&r->out->data_seq, &r->out->consumer_waiting);
}

SharedRings* Map(int fd, uint64_t ring_bytes, uint32_t spin_us, std::string* error) {
  const size_t bytes = static_cast<size_t>(kRingsHeader + 2 * ring_bytes);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *error = std::string("mmap: ") + strerror(errno);
    return nullptr;
  }
  // A forked child neither inherits nor can scribble on its parent's rings.
  madvise(p, bytes, MADV_DONTFORK);
  SharedRings* r = new (std::nothrow) SharedRings();
  if (r == nullptr) {
    munmap(p, bytes);
    *error = "out of memory";
    return nullptr;
  }
  r->base = static_cast<uint8_t*>(p);
  r->map_bytes = bytes;
  r->ring_bytes = ring_bytes;
  r->spin_us = spin_us;
  return r;
}

}  // namespace

SharedRings* CreateRings(const RingsOptions& options, int* fd, std::string* error) {
  *fd = -1;
  const uint64_t ring_bytes = options.ring_bytes;
  if (ring_bytes < kMinRingBytes || ring_bytes > kMaxRingBytes || (ring_bytes & (ring_bytes - 1)) != 0) {
    *error = "ring size not a power of two between 64 KiB and 64 MiB";
    return nullptr;
  }
  const int m = memfd_create("gslice-remote-rings", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (m < 0) {
    *error = std::string("memfd_create: ") + strerror(errno);
    return nullptr;
  }
  auto fail = [&](const char* what) -> SharedRings* {
    *error = std::string(what) + ": " + strerror(errno);
    close(m);
    return nullptr;
  };
  if (ftruncate(m, static_cast<off_t>(kRingsHeader + 2 * ring_bytes)) != 0) return fail("ftruncate");
  if (fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) return fail("sealing the rings");
  SharedRings* r = Map(m, ring_bytes, std::min(options.spin_us, kMaxSpinUs), error);
  if (r == nullptr) {
    close(m);
    return nullptr;
  }
  *fd = m;
  return r;
}

SharedRings* AcceptRings(int fd, uint64_t ring_bytes, uint32_t spin_us, std::string* error) {
  if (ring_bytes < kMinRingBytes || ring_bytes > kMaxRingBytes || (ring_bytes & (ring_bytes - 1)) != 0) {
    *error = "ring size " + std::to_string(ring_bytes) + " is not a power of two between 64 KiB and 64 MiB";
    return nullptr;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *error = "the descriptor is not a shared-memory file";
    return nullptr;
  }
  if (static_cast<uint64_t>(st.st_size) != kRingsHeader + 2 * ring_bytes) {
    *error = "the shared-memory file has " + std::to_string(st.st_size) + " bytes, not " +
             std::to_string(kRingsHeader + 2 * ring_bytes);
    return nullptr;
  }
  // Unsealed, the client could shrink the file under the mapping: the worker would fault.
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
    *error = "the shared-memory file is not sealed against resizing";
    return nullptr;
  }
  return Map(fd, ring_bytes, std::min(spin_us, kMaxSpinUs), error);
}

void BindRings(SharedRings* r, RingSide side, int liveness_fd) {
  RingControl* control = reinterpret_cast<RingControl*>(r->base);
  uint8_t* data[2] = {r->base + kRingsHeader, r->base + kRingsHeader + r->ring_bytes};
  const int out = side == RingSide::kClient ? kRequestRing : kReplyRing;
  const int in = 1 - out;
  r->out = &control[out];
  r->out_data = data[out];
  r->in = &control[in];
  r->in_data = data[in];
  r->liveness_fd = liveness_fd;
  r->wait_slice_ms = side == RingSide::kClient ? kClientWaitSliceMs : kWorkerWaitSliceMs;
}

bool RingWrite(SharedRings* r, const iovec* pieces, int count) {
  if (r->closed.load(std::memory_order_relaxed)) return false;
  const uint64_t size = r->ring_bytes;
  for (int i = 0; i < count; ++i) {
    const uint8_t* src = static_cast<const uint8_t*>(pieces[i].iov_base);
    uint64_t left = pieces[i].iov_len;
    while (left > 0) {
      const uint64_t used = r->out_pos - r->out->tail.load(std::memory_order_acquire);
      if (used > size) return Broken(r, "the peer broke the shared-memory ring (its read position)");
      if (used == size) {
        // Full: what is in goes out first, then wait for the reader.
        Publish(r);
        const uint64_t pos = r->out_pos;
        if (!Wait(r, &r->out->space_seq, &r->out->producer_waiting,
                  [&] { return pos - r->out->tail.load(std::memory_order_acquire) != size; })) {
          return false;
        }
        continue;
      }
      const uint64_t n = std::min(left, size - used);
      CopyIn(r, r->out_pos, src, n);
      r->out_pos += n;
      src += n;
      left -= n;
    }
  }
  Publish(r);
  return !r->closed.load(std::memory_order_relaxed);
}

bool RingWriteAll(SharedRings* r, const void* p, size_t n) {
  iovec piece = {const_cast<void*>(p), n};
  return RingWrite(r, &piece, 1);
}

bool RingReadAll(SharedRings* r, void* p, size_t n) {
  if (r->closed.load(std::memory_order_relaxed)) return false;
  uint8_t* dst = static_cast<uint8_t*>(p);
  const uint64_t size = r->ring_bytes;
  while (n > 0) {
    const uint64_t avail = r->in->head.load(std::memory_order_acquire) - r->in_pos;
    if (avail > size) return Broken(r, "the peer broke the shared-memory ring (its write position)");
    if (avail == 0) {
      const uint64_t pos = r->in_pos;
      if (!Wait(r, &r->in->data_seq, &r->in->consumer_waiting,
                [&] { return r->in->head.load(std::memory_order_acquire) != pos; })) {
        return false;
      }
      continue;
    }
    const uint64_t take = std::min<uint64_t>(n, avail);
    CopyOut(r, r->in_pos, dst, take);
    r->in_pos += take;
    dst += take;
    n -= take;
    r->in->tail.store(r->in_pos);
    Notify(&r->in->space_seq, &r->in->producer_waiting);
  }
  return true;
}

void CloseRings(SharedRings* r) {
  Fail(r, "closed");
  if (r->in != nullptr) FutexWake(&r->in->data_seq);
  if (r->out != nullptr) FutexWake(&r->out->space_seq);
}

void FreeRings(SharedRings* r) {
  if (r == nullptr) return;
  munmap(r->base, r->map_bytes);
  delete r;
}

void ForgetInheritedRings(SharedRings* r) { delete r; }

bool RingsBrokenByPeer(const SharedRings* r) { return r->broken.load(); }

std::string RingsFailure(const SharedRings* r) {
  const char* why = r->failure.load();
  return why != nullptr ? why : "";
}

void EncodeRingsRequest(const RingsRequest& q, Writer* w) {
  w->Put<uint64_t>(q.ring_bytes);
  w->Put<uint32_t>(q.spin_us);
  w->Put<uint32_t>(0);
}

bool DecodeRingsRequest(Reader* r, RingsRequest* out) {
  uint32_t zero = 1;
  return r->Get(&out->ring_bytes) && r->Get(&out->spin_us) && r->Get(&zero) && zero == 0 && r->AtEnd();
}

bool SendFrameWithFd(int socket, const FrameHeader& h, const void* payload, size_t n, int fd) {
  uint8_t head[kHeaderSize];
  FrameHeader sized = h;
  sized.length = static_cast<uint32_t>(n);
  EncodeHeader(sized, head);
  // The descriptor goes with the header's first byte; the rest may follow in later writes.
  iovec iov = {head, kHeaderSize};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  ssize_t w;
  do {
    w = sendmsg(socket, &msg, MSG_NOSIGNAL);
  } while (w < 0 && errno == EINTR);
  if (w <= 0) return false;
  return WriteAll(socket, head + w, kHeaderSize - static_cast<size_t>(w)) && (n == 0 || WriteAll(socket, payload, n));
}

FrameRead ReadFrameWithFd(int socket, uint32_t max_length, FrameHeader* h, std::vector<uint8_t>* payload,
                          int* passed) {
  *passed = -1;
  uint8_t head[kHeaderSize];
  size_t got = 0;
  while (got < kHeaderSize) {
    iovec iov = {head + got, kHeaderSize - got};
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
    msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t r = recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (*passed >= 0) close(*passed);
      *passed = -1;
      return FrameRead::kClosed;
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        if (*passed < 0) {
          *passed = fd;
        } else {
          close(fd);
        }
      }
    }
    got += static_cast<size_t>(r);
  }
  auto closed = [&](FrameRead why) {
    if (*passed >= 0) close(*passed);
    *passed = -1;
    return why;
  };
  if (!DecodeHeader(head, max_length, h)) return closed(FrameRead::kTooLarge);
  payload->resize(h->length);
  if (h->length != 0 && !ReadAll(socket, payload->data(), h->length)) return closed(FrameRead::kClosed);
  return FrameRead::kOk;
}

RingsOffer OfferRings(Channel* channel, const RingsOptions& options, int timeout_ms, std::string* why) {
  int domain = 0;
  socklen_t len = sizeof domain;
  if (channel->tls != nullptr || channel->rings != nullptr ||
      getsockopt(channel->fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_UNIX) {
    *why = "not a unix socket";
    return RingsOffer::kRefused;
  }
  int fd = -1;
  SharedRings* rings = CreateRings(options, &fd, why);
  if (rings == nullptr) return RingsOffer::kRefused;
  Writer w;
  EncodeRingsRequest(RingsRequest{.ring_bytes = options.ring_bytes, .spin_us = rings->spin_us}, &w);
  const bool sent = SendFrameWithFd(channel->fd, FrameHeader{.seq = 0, .op = kOpRings}, w.buffer().data(), w.size(), fd);
  close(fd);
  pollfd p = {channel->fd, POLLIN, 0};
  int rc = 0;
  if (sent) {
    do {
      rc = poll(&p, 1, timeout_ms);
    } while (rc < 0 && errno == EINTR);
  }
  FrameHeader h;
  std::vector<uint8_t> payload;
  if (!sent || rc <= 0 || ReadFrame(channel->fd, kMaxString + 64, &h, &payload) != FrameRead::kOk ||
      h.op != (kOpRings | kReplyBit)) {
    FreeRings(rings);
    *why = "the worker did not answer the shared-memory set-up";
    return RingsOffer::kLost;
  }
  Reader r(payload.data(), payload.size());
  int32_t status = 1;
  std::string message;
  if (!r.Get(&status) || !r.GetString(kMaxString, &message) || !r.AtEnd()) {
    FreeRings(rings);
    *why = "the worker's answer to the shared-memory set-up is malformed";
    return RingsOffer::kLost;
  }
  if (status != 0) {
    FreeRings(rings);
    *why = "the worker refused: " + message;
    return RingsOffer::kRefused;
  }
  BindRings(rings, RingSide::kClient, channel->fd);
  channel->rings = rings;
  return RingsOffer::kOn;
}

bool AnswerRings(int socket, const FrameHeader& h, const std::vector<uint8_t>& payload, int passed, bool first,
                 SharedRings** rings, std::string* why) {
  *rings = nullptr;
  Reader r(payload.data(), payload.size());
  RingsRequest request;
  int domain = 0;
  socklen_t len = sizeof domain;
  if (getsockopt(socket, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_UNIX) {
    *why = "not a unix socket";
  } else if (!first) {
    *why = "only the first request may set up shared memory";
  } else if (passed < 0) {
    *why = "no shared-memory file came with the request";
  } else if (!DecodeRingsRequest(&r, &request)) {
    *why = "a malformed shared-memory set-up";
  } else {
    *rings = AcceptRings(passed, request.ring_bytes, request.spin_us, why);
  }
  if (passed >= 0) close(passed);  // the mapping stays
  Writer w;
  w.Put<int32_t>(*rings != nullptr ? 0 : 1);
  w.PutString(*rings != nullptr ? std::string() : *why);
  if (!WriteFrame(socket, FrameHeader{.seq = h.seq, .op = kOpRings | kReplyBit}, w.buffer().data(), w.size())) {
    FreeRings(*rings);
    *rings = nullptr;
    return false;
  }
  if (*rings != nullptr) BindRings(*rings, RingSide::kWorker, socket);
  return true;
}

RingView ViewRing(SharedRings* r, RingSide writer) {
  RingControl* control = reinterpret_cast<RingControl*>(r->base);
  const int ring = writer == RingSide::kClient ? kRequestRing : kReplyRing;
  RingControl& c = control[ring];
  return RingView{.head = reinterpret_cast<uint64_t*>(&c.head),
                  .tail = reinterpret_cast<uint64_t*>(&c.tail),
                  .data_seq = Word(&c.data_seq),
                  .consumer_waiting = Word(&c.consumer_waiting),
                  .data = r->base + kRingsHeader + static_cast<uint64_t>(ring) * r->ring_bytes,
                  .bytes = r->ring_bytes};
}

}  // namespace gslice::remote
