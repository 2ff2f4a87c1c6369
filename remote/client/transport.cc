#include "transport.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <string>

#include "added_delay.h"
#include "calls.h"
#include "deferred_copies.h"
#include "gslice/clock.h"
#include "gslice/quiet_thread.h"
#include "gslice/options.h"
#include "log.h"
#include "shm_ring.h"

namespace gslice::remote {

using shim::Log;
using shim::LogLevel;

namespace transport_detail {
std::atomic<pid_t> g_pid{0};
std::atomic<pid_t> g_attached{0};
__thread uint32_t t_lane = 0;
}  // namespace transport_detail

using transport_detail::g_attached;
using transport_detail::t_lane;

namespace {

void KnowThisProcess() { transport_detail::g_pid.store(getpid(), std::memory_order_relaxed); }

// At the library's load, before any call: its fork handler is then registered before any the
// program registers later, so it runs first in a child.
__attribute__((constructor)) void KnowThisProcessAtLoad() {
  KnowThisProcess();
  pthread_atfork(nullptr, nullptr, KnowThisProcess);
}

// Queued async calls are sent with the next call that waits, or once this many bytes or
// frames wait, or once the oldest has waited kFlushAfterNs (checked as calls are queued, and
// by a flusher thread for a queue no further call comes to): the GPU gets launches in
// batches a few tens of microseconds apart, not only at the program's next synchronisation.
constexpr size_t kQueueBytes = 64 * 1024;
constexpr size_t kQueueFrames = 64;
constexpr int64_t kFlushAfterNs = 50'000;

// The process's one connection (the header's concurrency contract). It is made on the first
// call that needs a GPU (worker_attach.h).
struct Connection {
  Channel channel;
  pid_t pid = 0;        // the process that connected (a forked child connects anew)
  uint32_t seq = 0;     // REQUIRES g_send_mu
  std::vector<uint8_t> queued;  // frames of async calls not sent yet, in call order; REQUIRES g_send_mu
  size_t queued_frames = 0;     // REQUIRES g_send_mu
  int64_t queued_since = 0;     // MonotonicNs when the oldest queued frame was queued; REQUIRES g_send_mu
  std::vector<uint8_t> flushing;  // the queue the flusher took and writes; the flusher's own
  bool reading = false;         // a thread is reading answers; REQUIRES g_mu
  Waiter* waiters = nullptr;    // threads waiting for answers; REQUIRES g_mu
};

pthread_mutex_t g_send_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_answered = PTHREAD_COND_INITIALIZER;
// Never destroyed: calls still come after exit handlers have run (cudart's own destructors
// release their primary contexts, and the client returns the events it made ahead then), and
// a destroyed connection's queue would be written after it was freed.
Connection& g_conn = *new Connection;
// Sticky: kNoServerResult or kLostResult once the connection failed (read without a lock on
// the fast path, written under both locks).
std::atomic<CUresult> g_failed{CUDA_SUCCESS};

// The added delay (added_delay.h; GSLICE_REMOTE_ADDED_DELAY_US, benchmarks only). With it,
// whatever the transport would write on the connection goes on the delay line instead, and
// one wire thread per process writes each piece once it is due: from then on only that
// thread writes the connection (single producer, as the rings require). Lock order: g_send_mu,
// then g_wire_mu; the wire thread takes g_wire_mu alone, and g_mu (a failure) without it.
// A sender waits while the line holds kWireBytes (the real connection cannot take them).
constexpr size_t kWireBytes = 64u << 20;
// The wire thread sleeps until this long before a piece is due, then polls the clock: a
// sleep's wake-up is late by a few microseconds, which would add to every delay.
constexpr int64_t kWireSpinNs = 10'000;

pthread_mutex_t g_wire_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_wire_cv = PTHREAD_COND_INITIALIZER;  // with g_wire_mu: a piece on an empty line, or room
DelayLine* g_line = nullptr;                          // REQUIRES g_wire_mu; never freed (calls come during exit)
pid_t g_wire_pid = 0;                                 // the process whose wire thread runs; REQUIRES g_wire_mu

// The round trip the line adds (0: none), read once; a bad value is logged and adds none.
int64_t AddedDelayNs() {
  static const int64_t ns = [] {
    int64_t parsed = 0;
    std::string error;
    if (!ParseAddedDelay(OptionValue(Option::RemoteAddedDelayUs), &parsed, &error)) {
      Log(LogLevel::kError, "remote: %s; no delay is added", error.c_str());
      return int64_t{0};
    }
    if (parsed > 0) {
      Log(LogLevel::kWarn, "remote: every message to the worker is delayed by %lld us (GSLICE_REMOTE_ADDED_DELAY_US, "
          "for benchmarks)", static_cast<long long>(parsed / 1000));
    }
    return parsed;
  }();
  return ns;
}

// Sleeps until MonotonicNs() reaches until_ns (the last kWireSpinNs polled).
void WaitUntil(int64_t until_ns) {
  const int64_t sleep_until = until_ns - kWireSpinNs;
  if (MonotonicNs() < sleep_until) {
    const timespec at{.tv_sec = static_cast<time_t>(sleep_until / 1'000'000'000),
                      .tv_nsec = static_cast<long>(sleep_until % 1'000'000'000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, nullptr) == EINTR) {
    }
  }
  while (MonotonicNs() < until_ns) {
    __builtin_ia32_pause();
  }
}

// Writes one piece of the line on the connection: the descriptor it passes first (its
// frame's header, without the payload, on the socket), then its bytes.
bool WritePiece(DelayLine::Piece* piece) {
  bool ok = true;
  if (piece->pass_fd >= 0) {
    FrameHeader h;
    ok = DecodeHeader(piece->bytes.data(), UINT32_MAX, &h);
    h.length = 0;
    ok = ok && SendFrameWithFd(g_conn.channel.fd, h, nullptr, 0, piece->pass_fd);
    close(piece->pass_fd);
    piece->pass_fd = -1;
  }
  return ok && WriteAll(g_conn.channel, piece->bytes.data(), piece->bytes.size());
}

void* Wire(void*) {
  // Timer slack would make every sleep up to 50 us late.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  const pid_t self = ThisProcess();
  std::vector<DelayLine::Piece> due;
  pthread_mutex_lock(&g_wire_mu);
  while (g_wire_pid == self) {
    const int64_t next = g_line->NextDue();
    if (next < 0) {
      pthread_cond_wait(&g_wire_cv, &g_wire_mu);
      continue;
    }
    if (MonotonicNs() < next) {
      // Pieces are due in the order they were pushed: none pushed meanwhile is due earlier.
      pthread_mutex_unlock(&g_wire_mu);
      WaitUntil(next);
      pthread_mutex_lock(&g_wire_mu);
      continue;
    }
    g_line->TakeDue(MonotonicNs(), &due);
    pthread_cond_broadcast(&g_wire_cv);  // room for a waiting sender
    pthread_mutex_unlock(&g_wire_mu);
    bool ok = g_failed.load() == CUDA_SUCCESS;
    for (DelayLine::Piece& piece : due) {
      ok = ok && WritePiece(&piece);
      if (piece.pass_fd >= 0) close(piece.pass_fd);
    }
    due.clear();
    if (!ok && g_failed.load() == CUDA_SUCCESS) Fail(kLostResult, "lost the server while sending delayed requests");
    pthread_mutex_lock(&g_wire_mu);
    if (g_failed.load() != CUDA_SUCCESS) {
      g_line->Clear();  // nothing will take these
      pthread_cond_broadcast(&g_wire_cv);
    }
  }
  pthread_mutex_unlock(&g_wire_mu);
  return nullptr;
}

// Puts bytes (and a descriptor to pass before them, dup'ed) on the delay line, starting the
// wire thread on the process's first piece. REQUIRES g_send_mu. False when the connection
// failed or no wire thread could start (nothing would ever send them).
bool PushOnLine(const uint8_t* p, size_t n, int pass_fd) {
  pthread_mutex_lock(&g_wire_mu);
  if (g_line == nullptr) g_line = new DelayLine(AddedDelayNs());
  bool ok = true;
  if (g_wire_pid != ThisProcess()) {
    g_wire_pid = ThisProcess();
    if (StartQuietThread(Wire, nullptr) != 0) {
      g_wire_pid = 0;
      ok = false;
    }
  }
  while (ok && !g_line->empty() && g_line->bytes() >= kWireBytes && g_failed.load() == CUDA_SUCCESS) {
    pthread_cond_wait(&g_wire_cv, &g_wire_mu);
  }
  ok = ok && g_failed.load() == CUDA_SUCCESS;
  if (ok) {
    const bool was_empty = g_line->empty();
    DelayLine::Piece piece{.sent_ns = MonotonicNs(), .bytes = std::vector<uint8_t>(p, p + n),
                           .pass_fd = pass_fd >= 0 ? dup(pass_fd) : -1};
    ok = pass_fd < 0 || piece.pass_fd >= 0;
    if (ok) g_line->Push(std::move(piece));
    if (was_empty) pthread_cond_broadcast(&g_wire_cv);
  }
  pthread_mutex_unlock(&g_wire_mu);
  return ok;
}

// Writes on the connection happen under g_write_mu, in the order they were sent: a thread
// holding g_send_mu takes it to write (a call that waits, a full queue), and the flusher takes it
// before it lets go of g_send_mu with the queue it took, then writes that queue without
// g_send_mu (so calls keep being queued meanwhile). Lock order: g_send_mu, g_write_mu, then
// g_wire_mu; g_mu is never taken with g_write_mu held.
pthread_mutex_t g_write_mu = PTHREAD_MUTEX_INITIALIZER;

// Writes n bytes on the connection, or puts them on the delay line. REQUIRES g_write_mu.
bool Transmit(const uint8_t* p, size_t n) {
  return AddedDelayNs() == 0 ? WriteAll(g_conn.channel, p, n) : PushOnLine(p, n, -1);
}

// TransmitFrame's write. REQUIRES g_write_mu.
bool TransmitFrameWriting(const FrameHeader& h, const Writer& payload, int pass_fd) {
  if (AddedDelayNs() == 0) {
    return (pass_fd < 0 || SendFrameWithFd(g_conn.channel.fd, h, nullptr, 0, pass_fd)) &&
           WriteFrame(g_conn.channel, h, payload.buffer().data(), payload.size());
  }
  std::vector<uint8_t> frame(kHeaderSize + payload.size());
  FrameHeader sized = h;
  sized.length = static_cast<uint32_t>(payload.size());
  EncodeHeader(sized, frame.data());
  std::copy(payload.buffer().begin(), payload.buffer().end(), frame.begin() + kHeaderSize);
  return PushOnLine(frame.data(), frame.size(), pass_fd);
}

// Writes one frame (after passing pass_fd on the socket when >= 0: wire.h's kOpHostShare),
// or puts it on the delay line. REQUIRES g_send_mu; takes g_write_mu.
bool TransmitFrame(const FrameHeader& h, const Writer& payload, int pass_fd) {
  pthread_mutex_lock(&g_write_mu);
  const bool ok = TransmitFrameWriting(h, payload, pass_fd);
  pthread_mutex_unlock(&g_write_mu);
  return ok;
}
// Writes the queue now. REQUIRES g_send_mu; takes g_write_mu.
bool FlushLocked() {
  if (g_conn.queued.empty()) return true;
  pthread_mutex_lock(&g_write_mu);
  const bool ok = Transmit(g_conn.queued.data(), g_conn.queued.size());
  pthread_mutex_unlock(&g_write_mu);
  g_conn.queued.clear();
  g_conn.queued_frames = 0;
  g_conn.queued_since = 0;
  return ok;
}

// The flusher: sends a queue once its oldest frame has waited kFlushAfterNs. One per process
// that queued a call (a forked child starts its own). Queued calls are written by it, not by
// the threads that make them: a write on the rings wakes the worker's reading thread when it
// sleeps (a futex system call, microseconds under gVisor) and one on a socket is a system call
// itself, which a launch-bound step would otherwise pay a few hundred times.
pthread_cond_t g_queue_cv = PTHREAD_COND_INITIALIZER;  // with g_send_mu: the queue got its first frame
pid_t g_flusher_pid = 0;                               // REQUIRES g_send_mu
// The flusher waits for a queue to start (not for a due time): only then does a first frame
// wake it. A flusher waiting for a due time wakes by itself and looks at the queue then, so
// while calls keep coming no call pays a wake-up. REQUIRES g_send_mu.
bool g_flusher_idle = false;

void* Flusher(void*) {
  pthread_mutex_lock(&g_send_mu);
  const pid_t self = ThisProcess();
  while (g_flusher_pid == self) {
    if (g_conn.queued.empty()) {
      g_flusher_idle = true;
      pthread_cond_wait(&g_queue_cv, &g_send_mu);
      g_flusher_idle = false;
      continue;
    }
    const int64_t due = g_conn.queued_since + kFlushAfterNs;
    if (MonotonicNs() < due) {
      // The condition variable uses CLOCK_MONOTONIC (StartFlusher).
      timespec until{.tv_sec = static_cast<time_t>(due / 1'000'000'000),
                     .tv_nsec = static_cast<long>(due % 1'000'000'000)};
      pthread_cond_timedwait(&g_queue_cv, &g_send_mu, &until);
      continue;
    }
    if (g_failed.load() == CUDA_SUCCESS && g_conn.pid == self) {
      // Takes the queue, and the write order with it, then writes it without g_send_mu.
      // (Its buffer goes back to be the next queue's.)
      g_conn.flushing.swap(g_conn.queued);
      g_conn.queued_frames = 0;
      g_conn.queued_since = 0;
      pthread_mutex_lock(&g_write_mu);
      pthread_mutex_unlock(&g_send_mu);
      const bool ok = Transmit(g_conn.flushing.data(), g_conn.flushing.size());
      pthread_mutex_unlock(&g_write_mu);
      g_conn.flushing.clear();
      if (!ok) Fail(kLostResult, "lost the server while sending queued calls");
      pthread_mutex_lock(&g_send_mu);
    } else {
      // Nothing will send these (a failed connection, or a forked child's copy).
      g_conn.queued.clear();
      g_conn.queued_frames = 0;
      g_conn.queued_since = 0;
    }
  }
  pthread_mutex_unlock(&g_send_mu);
  return nullptr;
}

// REQUIRES g_send_mu. Without a flusher (none could start), queued calls go with the next
// call that waits or fills the queue, as before.
void StartFlusherLocked() {
  if (g_flusher_pid == ThisProcess()) return;
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, [] {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g_queue_cv, &attr);
    pthread_condattr_destroy(&attr);
  });
  g_flusher_pid = ThisProcess();
  g_flusher_idle = false;  // a forked child's copy speaks of its parent's flusher
  // The flusher never runs application code: no signal of the application's reaches it.
  if (StartQuietThread(Flusher, nullptr) != 0) g_flusher_pid = 0;
}

// Queues an async call's frame; sends the queue when it is full, or when its oldest frame has
// waited long enough and no flusher runs to send it. REQUIRES g_send_mu.
bool QueueLocked(const FrameHeader& h, const Writer& payload) {
  if (payload.size() + kHeaderSize > kQueueBytes) {
    return FlushLocked() && TransmitFrame(h, payload, -1);
  }
  uint8_t head[kHeaderSize];
  FrameHeader sized = h;
  sized.length = static_cast<uint32_t>(payload.size());
  EncodeHeader(sized, head);
  if (g_conn.queued.empty()) {
    g_conn.queued_since = MonotonicNs();
    StartFlusherLocked();
    if (g_flusher_idle) pthread_cond_signal(&g_queue_cv);
  }
  g_conn.queued.insert(g_conn.queued.end(), head, head + kHeaderSize);
  g_conn.queued.insert(g_conn.queued.end(), payload.buffer().begin(), payload.buffer().end());
  ++g_conn.queued_frames;
  const bool full = g_conn.queued.size() >= kQueueBytes || g_conn.queued_frames >= kQueueFrames;
  // With a flusher of this process running, it sends the queue in time: no clock read a call.
  const bool late = g_flusher_pid != ThisProcess() && MonotonicNs() - g_conn.queued_since >= kFlushAfterNs;
  return !(full || late) || FlushLocked();
}

// REQUIRES g_mu.
void RemoveWaiterLocked(Waiter* w) {
  for (Waiter** at = &g_conn.waiters; *at != nullptr; at = &(*at)->next) {
    if (*at == w) {
      *at = w->next;
      return;
    }
  }
}

// REQUIRES g_send_mu and g_mu. The connection the request goes on (attached by
// EnsureAttached; a process whose worker failed reports it).
CUresult ConnectLocked() {
  if (const CUresult failed = g_failed.load(); failed != CUDA_SUCCESS) return failed;
  if (g_conn.channel.fd >= 0 && g_conn.pid == ThisProcess()) return CUDA_SUCCESS;
  return FailLocked(kLostResult, "a request without a worker connection");
}

// Lanes: a number per client thread (its serving thread in the worker), reused after the
// thread exits. REQUIRES g_mu for the free list.
pthread_once_t g_lane_once = PTHREAD_ONCE_INIT;
pthread_key_t g_lane_key;
std::vector<uint32_t>* g_free_lanes = nullptr;
uint32_t g_next_lane = 0;

void ReleaseLane(void* value) {
  const uint32_t lane = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(value)) - 1;
  pthread_mutex_lock(&g_mu);
  if (g_free_lanes == nullptr) g_free_lanes = new std::vector<uint32_t>();
  g_free_lanes->push_back(lane);
  pthread_mutex_unlock(&g_mu);
}

void CreateLaneKey() { pthread_key_create(&g_lane_key, ReleaseLane); }

}  // namespace

uint32_t transport_detail::AssignLane() {
  pthread_once(&g_lane_once, CreateLaneKey);
  pthread_mutex_lock(&g_mu);
  uint32_t lane;
  bool own = true;
  if (g_free_lanes != nullptr && !g_free_lanes->empty()) {
    lane = g_free_lanes->back();
    g_free_lanes->pop_back();
  } else if (g_next_lane < kMaxLanes) {
    lane = g_next_lane++;
  } else {
    // More threads than lanes: this one shares a lane (its calls wait behind that lane's).
    lane = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(&t_lane) >> 12) % kMaxLanes;
    own = false;
  }
  pthread_mutex_unlock(&g_mu);
  if (own) pthread_setspecific(g_lane_key, reinterpret_cast<void*>(static_cast<uintptr_t>(lane) + 1));
  t_lane = lane + 1;
  return lane;
}

// A request's name for log lines (the timeline's requests are not calls).
const char* OpName(uint32_t op) {
  if (op < kOpCount) return kOpNames[op];
  switch (op) {
    case kOpTraceClock: return "the timeline's clock";
    case kOpTraceFetch: return "the timeline's fetch";
    case kOpHostShare: return "sharing page-locked memory";
    case kOpHostUnshare: return "unsharing page-locked memory";
    default: return "a request";
  }
}

CUresult ConnectionFailure() { return g_failed.load(); }

CUresult FailLocked(CUresult result, const std::string& why) {
  CUresult expected = CUDA_SUCCESS;
  if (!g_failed.compare_exchange_strong(expected, result)) return expected;
  if (g_conn.channel.fd >= 0) shutdown(g_conn.channel.fd, SHUT_RDWR);
  if (g_conn.channel.rings != nullptr) CloseRings(g_conn.channel.rings);  // wakes a thread waiting on them
  pthread_cond_broadcast(&g_answered);
  Log(LogLevel::kError, "remote: %s; every CUDA call now returns %s", why.c_str(),
      result == kLostResult ? "CUDA_ERROR_DEVICE_UNAVAILABLE" : "CUDA_ERROR_NO_DEVICE");
  return result;
}

CUresult Fail(CUresult result, const std::string& why) {
  pthread_mutex_lock(&g_mu);
  const CUresult r = FailLocked(result, why);
  pthread_mutex_unlock(&g_mu);
  return r;
}

void LockTransport() {
  pthread_mutex_lock(&g_send_mu);
  pthread_mutex_lock(&g_mu);
}

void UnlockTransport() {
  pthread_mutex_unlock(&g_mu);
  pthread_mutex_unlock(&g_send_mu);
}

bool ConnectedLocked() { return g_conn.channel.fd >= 0 && g_conn.pid == ThisProcess(); }

void ForgetInheritedLocked() {
  if (g_conn.channel.fd < 0 || g_conn.pid == ThisProcess()) return;
  // The parent's connection (and worker) stay the parent's.
  close(g_conn.channel.fd);
  if (g_conn.channel.rings != nullptr) ForgetInheritedRings(g_conn.channel.rings);
  g_conn = Connection{};
  g_failed = CUDA_SUCCESS;
  // The parent's delay line and its wire thread stay the parent's; the lock may have been
  // held by that thread at the fork (this process has one thread now).
  pthread_mutex_init(&g_wire_mu, nullptr);
  pthread_cond_init(&g_wire_cv, nullptr);
  pthread_mutex_init(&g_write_mu, nullptr);  // the parent's flusher may have held it
  if (g_line != nullptr) g_line->Clear();
}

void AdoptLocked(const Channel& channel) {
  g_conn.channel = channel;
  g_conn.pid = ThisProcess();
}

Channel* ChannelLocked() { return &g_conn.channel; }

uint32_t NextSeqLocked() { return ++g_conn.seq; }

void MarkAttachedLocked() { g_attached = ThisProcess(); }

CUresult Send(uint32_t op, const Writer& request, Waiter* waiter, uint32_t* sent_seq, uint32_t flags, int pass_fd) {
  pthread_mutex_lock(&g_send_mu);
  // The connection and its failure are written under both locks, so g_send_mu alone reads them;
  // g_mu is taken only to register a waiter or to fail (a queued call, the most frequent, takes
  // one lock).
  CUresult result = g_failed.load();
  const bool connected = g_conn.channel.fd >= 0 && g_conn.pid == ThisProcess();
  const uint32_t seq = ++g_conn.seq;
  if (waiter != nullptr || (result == CUDA_SUCCESS && !connected)) {
    pthread_mutex_lock(&g_mu);
    result = ConnectLocked();
    if (result == CUDA_SUCCESS && waiter != nullptr) {
      waiter->seq = seq;
      waiter->next = g_conn.waiters;
      g_conn.waiters = waiter;
    }
    pthread_mutex_unlock(&g_mu);
  }
  if (result == CUDA_SUCCESS) {
    if (sent_seq != nullptr) *sent_seq = seq;
    const FrameHeader h{.seq = seq, .op = op | flags};
    const bool sent = waiter == nullptr
                          ? QueueLocked(h, request)
                          : FlushLocked() && TransmitFrame(h, request, pass_fd);
    if (!sent) {
      pthread_mutex_lock(&g_mu);
      if (waiter != nullptr) RemoveWaiterLocked(waiter);
      result = FailLocked(kLostResult, std::string("lost the server while sending ") + OpName(op));
      pthread_mutex_unlock(&g_mu);
    }
  }
  pthread_mutex_unlock(&g_send_mu);
  return result;
}

// Waits for waiter's answer, reading answers for every waiting thread while no other thread
// does. Returns CUDA_SUCCESS once waiter->done, or the connection's failure.
CUresult Receive(uint32_t op, Waiter* waiter) {
  pthread_mutex_lock(&g_mu);
  while (!waiter->done && g_failed.load() == CUDA_SUCCESS) {
    if (g_conn.reading) {
      pthread_cond_wait(&g_answered, &g_mu);
      continue;
    }
    g_conn.reading = true;
    pthread_mutex_unlock(&g_mu);
    FrameHeader h;
    std::vector<uint8_t> frame;
    const FrameRead got = ReadFrame(g_conn.channel, kMaxFrame, &h, &frame);
    // The bytes of a deferred copy, which come before any answer that says the copy is done.
    const bool deferred = got == FrameRead::kOk && h.op == kOpDeferredData;
    const bool applied = deferred && ApplyDeferred(frame);
    pthread_mutex_lock(&g_mu);
    g_conn.reading = false;
    if (got != FrameRead::kOk) {
      FailLocked(kLostResult, std::string("lost the server during ") + OpName(op));
      break;
    }
    if (deferred) {
      if (!applied) {
        FailLocked(kLostResult, "the server sent the bytes of a copy this process did not make");
        break;
      }
      pthread_cond_broadcast(&g_answered);  // a next reader, should this thread's answer have come
      continue;
    }
    Waiter* owner = g_conn.waiters;
    while (owner != nullptr && owner->seq != h.seq) owner = owner->next;
    if (owner == nullptr) {
      FailLocked(kLostResult, "the server answered a request that was not made (seq " + std::to_string(h.seq) + ")");
      break;
    }
    owner->header = h;
    *owner->reply = std::move(frame);
    owner->done = true;
    RemoveWaiterLocked(owner);
    pthread_cond_broadcast(&g_answered);  // the owner, and a next reader
  }
  if (!waiter->done) RemoveWaiterLocked(waiter);
  const CUresult result = waiter->done ? CUDA_SUCCESS : g_failed.load();
  pthread_mutex_unlock(&g_mu);
  return result;
}

CUresult Exchange(uint32_t op, const Writer& request, std::vector<uint8_t>* reply, int pass_fd) {
  Waiter waiter;
  waiter.reply = reply;
  CUresult result = Send(op, request, &waiter, nullptr, 0, pass_fd);
  if (result == CUDA_SUCCESS) result = Receive(op, &waiter);
  if (result == CUDA_SUCCESS && waiter.header.op != (op | kReplyBit)) {
    result = Fail(kLostResult, std::string("the server's answer to ") + OpName(op) + " is not for it");
  }
  return result;
}

CUresult TraceExchange(uint32_t op, std::vector<uint8_t>* reply) {
  if (!HoldsWorker()) return CUDA_ERROR_NOT_INITIALIZED;
  Writer request;
  EncodeRequestPrefix(RequestPrefix{.context = 0, .lane = Lane()}, &request);
  return Exchange(op, request, reply);
}

DelayLineStats AddedDelayStats() {
  pthread_mutex_lock(&g_wire_mu);
  DelayLineStats stats = g_line != nullptr ? g_line->stats() : DelayLineStats{.round_trip_ns = AddedDelayNs()};
  pthread_mutex_unlock(&g_wire_mu);
  return stats;
}

bool WorkerSharesMemory() {
  return HoldsWorker() && g_conn.channel.rings != nullptr && g_failed.load(std::memory_order_relaxed) == CUDA_SUCCESS;
}

}  // namespace gslice::remote
