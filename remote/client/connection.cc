#include "connection.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <cstring>
#include <cstdio>
#include <string>
#include <unordered_map>

#include "attach.h"
#include "client_trace.h"
#include "gslice/options.h"
#include "gslice/quiet_thread.h"
#include "kept_answers.h"
#include "log.h"
#include "shm_ring.h"
#include "socket_io.h"
#include "tls.h"
#include "token.h"

namespace gslice::remote {

using shim::Log;
using shim::LogLevel;

namespace {

// Queued async calls are sent with the next call that waits, or once this many bytes or
// frames wait, or once the oldest has waited kFlushAfterNs (checked as calls are queued, and
// by a flusher thread for a queue no further call comes to): the GPU gets launches in
// batches a few tens of microseconds apart, not only at the program's next synchronisation.
constexpr size_t kQueueBytes = 64 * 1024;
constexpr size_t kQueueFrames = 64;
constexpr uint64_t kFlushAfterNs = 50'000;

// How long the server may take to start a worker (it runs `gslice run`, which loads the
// driver) before the handshake counts as failed.
constexpr int kHelloTimeoutMs = 30000;

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

// A thread waiting for the answer to its request.
struct Waiter {
  uint32_t seq = 0;
  bool done = false;
  FrameHeader header;
  std::vector<uint8_t>* reply = nullptr;
  Waiter* next = nullptr;
};

// The process's one connection, shared by its threads. Requests of all threads go out in
// the order the calls were made (g_send_mu), so the worker sees every async call a thread has
// already returned from before any later call of another thread. Answers come back in any
// order across threads: one waiting thread at a time reads them (the reader) and hands each to
// the thread whose seq it carries, so a thread waiting for a long synchronisation holds up no
// other. The worker connection is made on the first call that needs a GPU (EnsureAttached).
// Lock order: g_probe_mu, g_send_mu, then g_mu.
struct Connection {
  Channel channel;
  pid_t pid = 0;        // the process that connected (a forked child connects anew)
  uint32_t seq = 0;     // REQUIRES g_send_mu
  std::vector<uint8_t> queued;  // frames of async calls not sent yet, in call order; REQUIRES g_send_mu
  size_t queued_frames = 0;     // REQUIRES g_send_mu
  uint64_t queued_since = 0;    // CLOCK_MONOTONIC ns when the oldest queued frame was queued; REQUIRES g_send_mu
  bool reading = false;         // a thread is reading answers; REQUIRES g_mu
  Waiter* waiters = nullptr;    // threads waiting for answers; REQUIRES g_mu
};

pthread_mutex_t g_send_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_answered = PTHREAD_COND_INITIALIZER;
Connection g_conn;
// Sticky: kNoServerResult or kLostResult once the connection failed (read without a lock on
// the fast path, written under both locks).
std::atomic<CUresult> g_failed{CUDA_SUCCESS};
// The pid of the process whose worker g_conn is (0: none yet): the fast path's "attached".
std::atomic<pid_t> g_attached{0};

// Until the process's first call that needs a GPU (attach.h), device queries go to a probe: a
// connection of its own (wire.h: kOpProbe) that holds no slice. Its round trips are one at a
// time under g_probe_mu, which comes before g_send_mu and g_mu; it is closed at attach (under
// all three), so the two are never both open once attached.
struct Probe {
  Channel channel;
  pid_t pid = 0;
  uint32_t seq = 0;
};
pthread_mutex_t g_probe_mu = PTHREAD_MUTEX_INITIALIZER;
Probe g_probe;  // REQUIRES g_probe_mu
// cuInit's flags once it succeeded on the probe: the worker's driver gets the same call at
// attach, before anything else, so that it is initialised as the program believes it is.
// REQUIRES g_probe_mu.
bool g_init_replay = false;
unsigned int g_init_flags = 0;

// Answers the client keeps (calls.def: cached, cached=GROUP, cached=GROUP(PARAM)), keyed by
// opcode and arguments (the request without its prefix) and, for a group's calls, the current
// context; indexed by the handle PARAM names (kept_answers.h). Slot 0 holds the answers of
// `cached` calls for the process's life, slot 1 + g those of group g until a call that drops
// them (calls.def: drops=GROUP, drops=GROUP(PARAM)). Never freed: calls may come during exit.
// More answers than kMaxCached in one slot: the slot is emptied; more related kernels and
// functions than that: every per-handle drop drops its group.
constexpr size_t kMaxCached = 1 << 16;

KeptAnswers& AnswerStore() {
  static KeptAnswers* const kept = new KeptAnswers(kCacheGroupCount, kMaxCached, kMaxCached);
  return *kept;
}

size_t CacheSlot(uint32_t op) {
  const uint32_t group = kOpCacheGroup[op];
  return group == 0 ? 0 : 1 + static_cast<size_t>(__builtin_ctz(group));
}

std::string CacheKey(uint32_t op, const Writer& request) {
  // The prefix is the context and the lane; a group's answers depend on the context.
  const size_t skip = kOpCacheGroup[op] != 0 ? sizeof(uint64_t) : kRequestPrefixSize;
  std::string key(reinterpret_cast<const char*>(&op), sizeof op);
  key.append(reinterpret_cast<const char*>(request.buffer().data()) + (kRequestPrefixSize - skip),
             request.size() - (kRequestPrefixSize - skip));
  return key;
}

// Forgets what op may change (calls.def: drops=): whole groups, and its handle's answers in
// the groups it drops per handle.
void DropCached(uint32_t op, uint64_t handle) {
  if (kOpDrops[op] != 0) AnswerStore().DropGroups(kOpDrops[op]);
  if (kOpDropsByHandle[op] != 0) AnswerStore().DropHandle(kOpDropsByHandle[op], handle);
}

// Fails the connection for good, with one log line (the first failure's). REQUIRES g_mu.
// The socket is shut down, not closed: another thread may be reading it.
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

bool ReadWithin(int fd, int timeout_ms) {
  pollfd p = {fd, POLLIN, 0};
  int rc;
  do {
    rc = poll(&p, 1, timeout_ms);
  } while (rc < 0 && errno == EINTR);
  return rc > 0;
}

uint64_t NowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(t.tv_nsec);
}

// REQUIRES g_send_mu.
bool FlushLocked() {
  if (g_conn.queued.empty()) return true;
  const bool ok = WriteAll(g_conn.channel, g_conn.queued.data(), g_conn.queued.size());
  g_conn.queued.clear();
  g_conn.queued_frames = 0;
  g_conn.queued_since = 0;
  return ok;
}

// The flusher: sends a queue whose oldest frame has waited kFlushAfterNs when no call came to
// send it. One per process that queued a call (a forked child starts its own).
pthread_cond_t g_queue_cv = PTHREAD_COND_INITIALIZER;  // with g_send_mu: the queue got its first frame
pid_t g_flusher_pid = 0;                               // REQUIRES g_send_mu

void* Flusher(void*) {
  pthread_mutex_lock(&g_send_mu);
  const pid_t self = getpid();
  while (g_flusher_pid == self) {
    if (g_conn.queued.empty()) {
      pthread_cond_wait(&g_queue_cv, &g_send_mu);
      continue;
    }
    const uint64_t due = g_conn.queued_since + kFlushAfterNs;
    if (NowNs() < due) {
      // The condition variable uses CLOCK_MONOTONIC (StartFlusher).
      timespec until{.tv_sec = static_cast<time_t>(due / 1'000'000'000ull),
                     .tv_nsec = static_cast<long>(due % 1'000'000'000ull)};
      pthread_cond_timedwait(&g_queue_cv, &g_send_mu, &until);
      continue;
    }
    if (g_failed.load() == CUDA_SUCCESS && g_conn.pid == self) {
      if (!FlushLocked()) {
        pthread_mutex_lock(&g_mu);
        FailLocked(kLostResult, "lost the server while sending queued calls");
        pthread_mutex_unlock(&g_mu);
      }
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
  if (g_flusher_pid == getpid()) return;
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, [] {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g_queue_cv, &attr);
    pthread_condattr_destroy(&attr);
  });
  g_flusher_pid = getpid();
  // The flusher never runs application code: no signal of the application's reaches it.
  if (StartQuietThread(Flusher, nullptr) != 0) g_flusher_pid = 0;
}

// Queues an async call's frame; sends the queue when it is full or its oldest frame has
// waited long enough. REQUIRES g_send_mu.
bool QueueLocked(const FrameHeader& h, const Writer& payload) {
  if (payload.size() + kHeaderSize > kQueueBytes) {
    return FlushLocked() && WriteFrame(g_conn.channel, h, payload.buffer().data(), payload.size());
  }
  uint8_t head[kHeaderSize];
  FrameHeader sized = h;
  sized.length = static_cast<uint32_t>(payload.size());
  EncodeHeader(sized, head);
  const uint64_t now = NowNs();
  if (g_conn.queued.empty()) {
    g_conn.queued_since = now;
    StartFlusherLocked();
    pthread_cond_signal(&g_queue_cv);
  }
  g_conn.queued.insert(g_conn.queued.end(), head, head + kHeaderSize);
  g_conn.queued.insert(g_conn.queued.end(), payload.buffer().begin(), payload.buffer().end());
  ++g_conn.queued_frames;
  const bool due = g_conn.queued.size() >= kQueueBytes || g_conn.queued_frames >= kQueueFrames ||
                   now - g_conn.queued_since >= kFlushAfterNs;
  return !due || FlushLocked();
}

// The token for a tls:// server (GSLICE_REMOTE_TOKEN_FILE), read before connecting.
bool ReadToken(std::string* token, std::string* error) {
  const char* path = OptionValue(Option::RemoteTokenFile);
  if (path[0] == '\0') {
    *error = std::string(OptionEnv(Option::RemoteTokenFile)) + " is not set: a tls:// server wants its token";
    return false;
  }
  return ReadTokenFile(path, token, error);
}

uint32_t Lane();

// Closes a connection that is no longer used (its TLS session first).
void CloseChannel(Channel* c) {
  if (c->tls != nullptr) TlsFree(c->tls);
  if (c->fd >= 0) close(c->fd);
  *c = Channel{};
}

// Connects to GSLICE_REMOTE and says hello with op: kOpHello (the server starts a worker in a
// slice) or kOpProbe (device queries only, attach.h). A tls:// server gets the TLS handshake
// and then the token as the first frame, for either. False, with *why, when there is no
// server or it refused (the caller fails with kNoServerResult); nothing is left open then.
bool Handshake(uint32_t op, Channel* out, uint32_t* worker_pid, std::string* shown, std::string* why) {
  shim::InitLog();
  const char* text = OptionValue(Option::Remote);
  if (text[0] == '\0') {
    *why = std::string(OptionEnv(Option::Remote)) +
           " is not set: this libcuda.so.1 forwards to a gslice-remoted "
           "(run the program with gslice run --remote ADDR)";
    return false;
  }
  Address address;
  std::string error;
  if (!ParseAddress(text, &address, why)) return false;
  *shown = address.text;
  std::string token;
  if (address.tls && !ReadToken(&token, &error)) {
    *why = address.text + ": " + error;
    return false;
  }
  const int fd = Connect(address, why);
  if (fd < 0) return false;
  Channel channel{.fd = fd};
  auto refuse = [&](const std::string& reason) {
    CloseChannel(&channel);
    *why = reason;
    return false;
  };
  if (address.tls) {
    // TLS, then the token as the first frame inside it.
    channel.tls = TlsConnect(fd, address.host, OptionValue(Option::RemoteCa), kHelloTimeoutMs, &error);
    const bool sent = channel.tls != nullptr &&
                      WriteFrame(channel, FrameHeader{.seq = 0, .op = kOpToken}, token.data(), token.size());
    std::fill(token.begin(), token.end(), '\0');
    if (!sent) {
      return refuse(address.text + ": " + (channel.tls != nullptr ? "the server closed the connection" : error));
    }
  }
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  Hello hello{.calls_hash = kCallsHash,
              .memory = OptionValue(Option::Memory),
              .compute = OptionValue(Option::Compute),
              .share = OptionValue(Option::Share),
              .slice_class = OptionIsSet(Option::Class) ? OptionValue(Option::Class) : "",
              .idle_timeout = OptionValue(Option::IdleTimeout),
              .host = std::string(host).substr(0, kMaxHelloString),
              .trace = ClientTracing()};
  Writer w;
  EncodeHello(hello, &w);
  if (!WriteFrame(channel, FrameHeader{.seq = 0, .op = op}, w.buffer().data(), w.size())) {
    return refuse("handshake with " + address.text + ": the server closed the connection");
  }
  FrameHeader h;
  std::vector<uint8_t> payload;
  if (channel.tls == nullptr && !ReadWithin(fd, kHelloTimeoutMs)) {
    return refuse("handshake with " + address.text + ": no answer within 30 s");
  }
  if (channel.tls != nullptr) TlsSetReadTimeout(channel.tls, kHelloTimeoutMs);
  const FrameRead got = ReadFrame(channel, kMaxString + 64, &h, &payload);
  if (channel.tls != nullptr) TlsSetReadTimeout(channel.tls, 0);
  // A refusal before the server read which handshake this is (a wrong token) answers kOpHello.
  if (got != FrameRead::kOk || (h.op != (op | kReplyBit) && h.op != (kOpHello | kReplyBit))) {
    return refuse("handshake with " + address.text +
                  ": the server closed the connection or gave no answer within 30 s (see its log)");
  }
  Reader r(payload.data(), payload.size());
  HelloReply reply;
  if (!DecodeHelloReply(&r, &reply, &error)) return refuse(address.text + ": " + error);
  if (reply.status != 0) return refuse(address.text + " refused this client: " + reply.message);
  if (h.op != (op | kReplyBit)) return refuse("handshake with " + address.text + ": the answer is not for it");
  *worker_pid = reply.worker_pid;
  *out = channel;
  return true;
}

// The same-host fast path (shm_ring.h): over a unix socket, unless GSLICE_REMOTE_SHM is off,
// the worker connection's frames move to shared-memory rings right after the handshake. A
// refusal leaves them on the socket, with one log line. REQUIRES g_send_mu and g_mu, nothing
// sent on the connection yet.
CUresult MoveToSharedMemoryLocked() {
  const std::string wanted = OptionValue(Option::RemoteShm);
  if (wanted == "off" || wanted == "0" || wanted == "no" || wanted == "false") return CUDA_SUCCESS;
  int domain = 0;
  socklen_t len = sizeof domain;
  if (g_conn.channel.tls != nullptr || getsockopt(g_conn.channel.fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 ||
      domain != AF_UNIX) {
    return CUDA_SUCCESS;  // tcp:// and tls:// stay as they are
  }
  const unsigned long spin = strtoul(OptionValue(Option::RemoteShmSpin), nullptr, 10);
  const RingsOptions options{.ring_bytes = kDefaultRingBytes,
                             .spin_us = static_cast<uint32_t>(std::min<unsigned long>(spin, kMaxSpinUs))};
  std::string why;
  switch (OfferRings(&g_conn.channel, options, kHelloTimeoutMs, &why)) {
    case RingsOffer::kOn:
      Log(LogLevel::kInfo, "remote: calls go through shared memory (%llu KiB rings, %u us spin)",
          static_cast<unsigned long long>(options.ring_bytes >> 10), options.spin_us);
      return CUDA_SUCCESS;
    case RingsOffer::kRefused:
      Log(LogLevel::kWarn, "remote: no shared-memory rings with the worker (%s): calls go on the socket", why.c_str());
      return CUDA_SUCCESS;
    case RingsOffer::kLost:
      break;
  }
  return FailLocked(kLostResult, "lost the server while setting up shared memory: " + why);
}

// Makes sure the process holds its worker (attach on use, attach.h): connects with kOpHello,
// replays the cuInit the probe accepted before any other request, and closes the probe.
// The replay goes on `lane` (the attaching thread's, taken before the locks: Lane() takes
// g_mu). REQUIRES g_probe_mu, g_send_mu and g_mu (held while attaching: no thread sends,
// reads or asks the probe meanwhile).
CUresult AttachLocked(uint32_t lane) {
  if (g_conn.channel.fd >= 0 && g_conn.pid == getpid()) return CUDA_SUCCESS;
  if (g_conn.channel.fd >= 0) {
    // A forked child: the parent's connection (and worker) stay the parent's.
    close(g_conn.channel.fd);
    if (g_conn.channel.rings != nullptr) ForgetInheritedRings(g_conn.channel.rings);
    g_conn = Connection{};
    g_failed = CUDA_SUCCESS;
  }
  if (g_probe.channel.fd >= 0 && g_probe.pid != getpid()) {
    close(g_probe.channel.fd);
    g_probe = Probe{};
  }
  if (const CUresult failed = g_failed.load(); failed != CUDA_SUCCESS) return failed;
  Channel channel;
  uint32_t worker_pid = 0;
  std::string shown, why;
  if (!Handshake(kOpHello, &channel, &worker_pid, &shown, &why)) return FailLocked(kNoServerResult, why);
  g_conn.channel = channel;
  g_conn.pid = getpid();
  if (g_probe.channel.fd >= 0) CloseChannel(&g_probe.channel);  // the probe process ends with it
  Log(LogLevel::kInfo, "remote: connected to %s%s, worker pid %u", shown.c_str(),
      channel.tls != nullptr ? " (TLS)" : "", worker_pid);
  if (const CUresult moved = MoveToSharedMemoryLocked(); moved != CUDA_SUCCESS) return moved;
  channel = g_conn.channel;  // the rings, when they were set up
  if (g_init_replay) {
    // Nothing else is in flight on the new connection: its answer is read here directly.
    Writer init;
    EncodeRequestPrefix(RequestPrefix{.context = 0, .lane = lane}, &init);
    init.Put(g_init_flags);
    const uint32_t seq = ++g_conn.seq;
    FrameHeader h;
    std::vector<uint8_t> reply;
    if (!WriteFrame(channel, FrameHeader{.seq = seq, .op = kOp_cuInit}, init.buffer().data(), init.size()) ||
        ReadFrame(channel, kMaxFrame, &h, &reply) != FrameRead::kOk) {
      return FailLocked(kLostResult, "lost the server while replaying cuInit on the worker");
    }
    Reader in(reply.data(), reply.size());
    int32_t value = 0;
    if (h.seq != seq || h.op != (kOp_cuInit | kReplyBit) || !in.Get(&value) || value != CUDA_SUCCESS) {
      return FailLocked(kNoServerResult, "the worker's driver refused cuInit, which the probe accepted (" +
                                             std::to_string(value) + ")");
    }
  }
  g_attached = getpid();
  return CUDA_SUCCESS;
}

// Attaches unless this process already holds its worker (the fast path takes no lock).
CUresult EnsureAttached() {
  if (g_attached.load(std::memory_order_acquire) == getpid()) return CUDA_SUCCESS;
  const uint32_t lane = Lane();
  pthread_mutex_lock(&g_probe_mu);
  pthread_mutex_lock(&g_send_mu);
  pthread_mutex_lock(&g_mu);
  const bool held = g_conn.channel.fd >= 0 && g_conn.pid == getpid();
  const CUresult result = AttachLocked(lane);
  pthread_mutex_unlock(&g_mu);
  pthread_mutex_unlock(&g_send_mu);
  pthread_mutex_unlock(&g_probe_mu);
  if (result == CUDA_SUCCESS && !held && ClientTracing()) ClientTraceAttached();
  return result;
}

// REQUIRES g_send_mu and g_mu. The connection the request goes on (attached by
// EnsureAttached; a process whose worker failed reports it).
CUresult ConnectLocked() {
  if (const CUresult failed = g_failed.load(); failed != CUDA_SUCCESS) return failed;
  if (g_conn.channel.fd >= 0 && g_conn.pid == getpid()) return CUDA_SUCCESS;
  return FailLocked(kLostResult, "a request without a worker connection");
}

// What a probe round trip came to.
enum class ProbeAsked { kAnswered, kAttached, kFailed };

// Asks the probe (connecting it first) when the process holds no worker yet; kAttached when
// it does (the caller sends on the worker's connection instead). On kFailed, *result holds the
// connection's failure.
ProbeAsked AskProbe(uint32_t op, const Writer& request, std::vector<uint8_t>* reply, CUresult* result) {
  if (g_attached.load(std::memory_order_acquire) == getpid()) return ProbeAsked::kAttached;
  pthread_mutex_lock(&g_probe_mu);
  ProbeAsked asked = ProbeAsked::kFailed;
  if (g_attached.load() == getpid()) {
    asked = ProbeAsked::kAttached;
  } else if (*result = g_failed.load(); *result == CUDA_SUCCESS) {
    if (g_probe.channel.fd >= 0 && g_probe.pid != getpid()) {
      close(g_probe.channel.fd);  // a forked child's: the parent's probe stays the parent's
      g_probe = Probe{};
    }
    if (g_probe.channel.fd < 0) {
      uint32_t ignored = 0;
      std::string shown, why;
      if (!Handshake(kOpProbe, &g_probe.channel, &ignored, &shown, &why)) {
        *result = Fail(kNoServerResult, why);
      } else {
        g_probe.pid = getpid();
        Log(LogLevel::kDebug,
            "remote: asking %s about its devices; no slice is held until the first call that needs a GPU",
            shown.c_str());
      }
    }
    if (*result == CUDA_SUCCESS) {
      const uint32_t seq = ++g_probe.seq;
      FrameHeader h;
      if (!WriteFrame(g_probe.channel, FrameHeader{.seq = seq, .op = op}, request.buffer().data(), request.size())) {
        *result = Fail(kLostResult, std::string("lost the server while sending ") + kOpNames[op]);
      } else if (ReadFrame(g_probe.channel, kMaxFrame, &h, reply) != FrameRead::kOk) {
        *result = Fail(kLostResult, std::string("lost the server during ") + kOpNames[op]);
      } else if (h.seq != seq || h.op != (op | kReplyBit)) {
        *result = Fail(kLostResult, std::string("the server's answer to ") + kOpNames[op] + " is not for it");
      } else {
        asked = ProbeAsked::kAnswered;
        int32_t value = 0;
        if (op == kOp_cuInit && reply->size() >= sizeof value) std::memcpy(&value, reply->data(), sizeof value);
        if (op == kOp_cuInit && value == CUDA_SUCCESS && reply->size() >= sizeof value && !g_init_replay) {
          // The request: the prefix, then u32 Flags.
          uint32_t flags = 0;
          if (request.size() >= kRequestPrefixSize + sizeof flags) {
            std::memcpy(&flags, request.buffer().data() + kRequestPrefixSize, sizeof flags);
          }
          g_init_replay = true;
          g_init_flags = flags;
        }
      }
    }
  }
  pthread_mutex_unlock(&g_probe_mu);
  return asked;
}

// Deferred copies (wire.h: kOpDeferredData): where each token's bytes go. Never freed (frames
// may come during exit).
struct DeferredTarget {
  void* p;
  uint64_t bytes;
};
pthread_mutex_t g_deferred_mu = PTHREAD_MUTEX_INITIALIZER;
std::unordered_map<uint64_t, DeferredTarget>* g_deferred = nullptr;  // REQUIRES g_deferred_mu
uint64_t g_next_token = 0;                                           // REQUIRES g_deferred_mu

// Writes a kOpDeferredData frame's bytes where its token says. False for a token this process
// did not give out or bytes of another length (the server broke the protocol).
bool ApplyDeferred(const std::vector<uint8_t>& frame) {
  uint64_t token = 0;
  if (frame.size() < sizeof token) return false;
  std::memcpy(&token, frame.data(), sizeof token);
  pthread_mutex_lock(&g_deferred_mu);
  DeferredTarget target{nullptr, 0};
  bool known = false;
  if (g_deferred != nullptr) {
    if (auto it = g_deferred->find(token); it != g_deferred->end()) {
      target = it->second;
      known = true;
      g_deferred->erase(it);
    }
  }
  pthread_mutex_unlock(&g_deferred_mu);
  if (!known || frame.size() - sizeof token != target.bytes) return false;
  if (target.bytes != 0) std::memcpy(target.p, frame.data() + sizeof token, target.bytes);
  return true;
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

// Sends one request (queued when async). On success, a synchronous request's waiter is
// registered before its frame leaves, so that no answer finds nobody. *sent_seq (when not
// null) gets the request's seq; flags: kWaitBit for an async call the client waits for
// (GSLICE_REMOTE_WAIT). pass_fd >= 0 (a synchronous request on the rings only): the
// descriptor goes first, on the socket, in a frame of the same op and seq (wire.h:
// kOpHostShare).
CUresult Send(uint32_t op, const Writer& request, Waiter* waiter, uint32_t* sent_seq = nullptr, uint32_t flags = 0,
              int pass_fd = -1) {
  pthread_mutex_lock(&g_send_mu);
  pthread_mutex_lock(&g_mu);
  CUresult result = ConnectLocked();
  const uint32_t seq = ++g_conn.seq;
  if (result == CUDA_SUCCESS && waiter != nullptr) {
    waiter->seq = seq;
    waiter->next = g_conn.waiters;
    g_conn.waiters = waiter;
  }
  pthread_mutex_unlock(&g_mu);
  if (result == CUDA_SUCCESS) {
    if (sent_seq != nullptr) *sent_seq = seq;
    const FrameHeader h{.seq = seq, .op = op | flags};
    const bool sent = waiter == nullptr
                          ? QueueLocked(h, request)
                          : FlushLocked() && (pass_fd < 0 || SendFrameWithFd(g_conn.channel.fd, h, nullptr, 0, pass_fd)) &&
                                WriteFrame(g_conn.channel, h, request.buffer().data(), request.size());
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

// Lanes: a number per client thread (its serving thread in the worker), reused after the
// thread exits. REQUIRES g_mu for the free list.
pthread_once_t g_lane_once = PTHREAD_ONCE_INIT;
pthread_key_t g_lane_key;
std::vector<uint32_t>* g_free_lanes = nullptr;
uint32_t g_next_lane = 0;
thread_local uint32_t t_lane = 0;  // lane + 1; 0: none yet

void ReleaseLane(void* value) {
  const uint32_t lane = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(value)) - 1;
  pthread_mutex_lock(&g_mu);
  if (g_free_lanes == nullptr) g_free_lanes = new std::vector<uint32_t>();
  g_free_lanes->push_back(lane);
  pthread_mutex_unlock(&g_mu);
}

void CreateLaneKey() { pthread_key_create(&g_lane_key, ReleaseLane); }

uint32_t Lane() {
  if (t_lane != 0) return t_lane - 1;
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

// The calling thread's context stack.
constexpr int kStackDepth = 32;
thread_local CUcontext t_stack[kStackDepth];
thread_local int t_depth = 0;

}  // namespace

Call::Call(uint32_t op) : op_(op) {
  EncodeRequestPrefix(RequestPrefix{.context = reinterpret_cast<uintptr_t>(CurrentContext()), .lane = Lane()},
                      &request_);
}

namespace {
// What the process's calls cost (gslice_remote_stats): answered from the cache, sent without
// waiting, and round trips.
std::atomic<uint64_t> g_cached_calls{0};
std::atomic<uint64_t> g_async_calls{0};
std::atomic<uint64_t> g_round_trips{0};
// The same per call (op), for gslice_remote_write_call_counts.
std::atomic<uint64_t> g_op_cached[kOpCount];
std::atomic<uint64_t> g_op_async[kOpCount];
std::atomic<uint64_t> g_op_trips[kOpCount];
}  // namespace

// GSLICE_REMOTE_WAIT=1: async calls are waited for like the others (their errors then come
// from the call itself).
bool WaitForEveryCall() {
  static const bool wait = [] {
    const char* v = OptionValue(Option::RemoteWait);
    return v[0] != '\0' && strcmp(v, "0") != 0;
  }();
  return wait;
}

bool Call::AnsweredFromCache() {
  Kept kept;
  return FromCache(&kept);
}

bool Call::FromCache(Kept* kept) {
  if (!kOpCached[op_] && kOpCacheGroup[op_] == 0) return false;
  kept->slot = CacheSlot(op_);
  kept->key = CacheKey(op_, request_);
  if (!AnswerStore().LookUp(kept->slot, cache_handle_, kept->key, &reply_buffer_, &kept->generation)) return false;
  Log(LogLevel::kDebug, "remote: %s answered from the client's cache", kOpNames[op_]);
  reader_ = Reader(reply_buffer_.data(), reply_buffer_.size());
  int32_t value = 0;
  reader_.Get(&value);  // kept only when it held CUDA_SUCCESS
  answered_ = true;
  g_cached_calls.fetch_add(1, std::memory_order_relaxed);
  g_op_cached[op_].fetch_add(1, std::memory_order_relaxed);
  mode_ = static_cast<uint8_t>(CallMode::kCached);
  return true;
}

CUresult Call::Run() {
  if (!ClientTracing()) return Forward();
  const int64_t start = ClientTraceNow();
  const CUresult result = Forward();
  RecordCall(op_, static_cast<CallMode>(mode_), seq_, Lane(), start, ClientTraceNow());
  return result;
}

CUresult Call::Forward() {
  // One key and one look: a miss leaves the key and the generation for keeping the answer.
  const bool keeps = kOpCached[op_] || kOpCacheGroup[op_] != 0;
  Kept kept;
  if (keeps && FromCache(&kept)) return CUDA_SUCCESS;
  if (AnswersWithoutSlice(op_)) {
    // Before the process holds its worker, the probe answers (attach.h).
    CUresult failed = CUDA_SUCCESS;
    switch (AskProbe(op_, request_, &reply_buffer_, &failed)) {
      case ProbeAsked::kFailed: return failed;
      case ProbeAsked::kAnswered:
        mode_ = static_cast<uint8_t>(CallMode::kProbe);
        return Answered(keeps ? &kept : nullptr);
      case ProbeAsked::kAttached: break;
    }
  }
  if (const CUresult attached = EnsureAttached(); attached != CUDA_SUCCESS) return attached;
  // Before it leaves and again once answered: an answer of the group read in between would
  // be stale (the generation keeps it from being kept).
  DropCached(op_, cache_handle_);
  if (kOpAsync[op_] && !wait_ && !WaitForEveryCall()) {
    // Not waited for: its driver error, if any, comes with the next synchronisation.
    const CUresult result = Send(op_, request_, nullptr, &seq_);
    g_async_calls.fetch_add(1, std::memory_order_relaxed);
    g_op_async[op_].fetch_add(1, std::memory_order_relaxed);
    if (result == CUDA_SUCCESS) {
      reader_ = Reader();
      answered_ = true;
      mode_ = static_cast<uint8_t>(CallMode::kAsync);
    }
    return result;
  }
  Waiter waiter;
  waiter.reply = &reply_buffer_;
  g_round_trips.fetch_add(1, std::memory_order_relaxed);
  g_op_trips[op_].fetch_add(1, std::memory_order_relaxed);
  CUresult result = Send(op_, request_, &waiter, &seq_, kOpAsync[op_] ? kWaitBit : 0);
  if (result == CUDA_SUCCESS) result = Receive(op_, &waiter);
  DropCached(op_, cache_handle_);
  if (result != CUDA_SUCCESS) return result;
  if (waiter.header.op != (op_ | kReplyBit)) {
    return Fail(kLostResult, std::string("the server's answer to ") + kOpNames[op_] + " is not for it");
  }
  mode_ = static_cast<uint8_t>(CallMode::kRoundTrip);
  return Answered(keeps ? &kept : nullptr);
}

namespace {
// A synchronous request of wire.h's (not a call of calls.def) on the calling thread's lane;
// *reply is its whole answer. pass_fd >= 0: see Send.
CUresult Exchange(uint32_t op, const Writer& request, std::vector<uint8_t>* reply, int pass_fd = -1) {
  Waiter waiter;
  waiter.reply = reply;
  CUresult result = Send(op, request, &waiter, nullptr, 0, pass_fd);
  if (result == CUDA_SUCCESS) result = Receive(op, &waiter);
  if (result == CUDA_SUCCESS && waiter.header.op != (op | kReplyBit)) {
    result = Fail(kLostResult, std::string("the server's answer to ") + OpName(op) + " is not for it");
  }
  return result;
}
}  // namespace

CUresult TraceExchange(uint32_t op, std::vector<uint8_t>* reply) {
  if (g_attached.load(std::memory_order_acquire) != getpid()) return CUDA_ERROR_NOT_INITIALIZED;
  Writer request;
  EncodeRequestPrefix(RequestPrefix{.context = 0, .lane = Lane()}, &request);
  return Exchange(op, request, reply);
}

uint64_t ExpectDeferred(void* p, uint64_t bytes) {
  pthread_mutex_lock(&g_deferred_mu);
  if (g_deferred == nullptr) g_deferred = new std::unordered_map<uint64_t, DeferredTarget>();
  const uint64_t token = ++g_next_token;
  (*g_deferred)[token] = DeferredTarget{p, bytes};
  pthread_mutex_unlock(&g_deferred_mu);
  return token;
}

bool WorkerSharesMemory() {
  return g_attached.load(std::memory_order_acquire) == getpid() && g_conn.channel.rings != nullptr &&
         g_failed.load(std::memory_order_relaxed) == CUDA_SUCCESS;
}

CUresult ShareWithWorker(int fd, uint64_t client_addr, uint64_t bytes, uint64_t* worker_addr, uint64_t* device_ptr) {
  if (!WorkerSharesMemory()) return CUDA_ERROR_NOT_SUPPORTED;
  Writer request;
  EncodeRequestPrefix(RequestPrefix{.context = reinterpret_cast<uintptr_t>(CurrentContext()), .lane = Lane()},
                      &request);
  request.Put<uint64_t>(client_addr);
  request.Put<uint64_t>(bytes);
  std::vector<uint8_t> reply;
  if (const CUresult r = Exchange(kOpHostShare, request, &reply, fd); r != CUDA_SUCCESS) return r;
  Reader in(reply.data(), reply.size());
  int32_t result = 0;
  if (!in.Get(&result)) return Fail(kLostResult, "the server's answer to sharing page-locked memory is malformed");
  if (result != CUDA_SUCCESS) return static_cast<CUresult>(result);
  if (!in.Get(worker_addr) || !in.Get(device_ptr) || !in.AtEnd()) {
    return Fail(kLostResult, "the server's answer to sharing page-locked memory is malformed");
  }
  return CUDA_SUCCESS;
}

CUresult UnshareWithWorker(uint64_t worker_addr) {
  if (!WorkerSharesMemory()) return CUDA_ERROR_NOT_SUPPORTED;
  Writer request;
  EncodeRequestPrefix(RequestPrefix{.context = reinterpret_cast<uintptr_t>(CurrentContext()), .lane = Lane()},
                      &request);
  request.Put<uint64_t>(worker_addr);
  std::vector<uint8_t> reply;
  if (const CUresult r = Exchange(kOpHostUnshare, request, &reply); r != CUDA_SUCCESS) return r;
  Reader in(reply.data(), reply.size());
  int32_t result = 0;
  if (!in.Get(&result) || !in.AtEnd()) {
    return Fail(kLostResult, "the server's answer to unsharing page-locked memory is malformed");
  }
  return static_cast<CUresult>(result);
}

CUresult Call::Answered(Kept* kept) {
  reader_ = Reader(reply_buffer_.data(), reply_buffer_.size());
  int32_t value = 0;
  if (!reader_.Get(&value)) {
    return Fail(kLostResult, std::string("the server's answer to ") + kOpNames[op_] + " is empty");
  }
  const CUresult result = static_cast<CUresult>(value);
  answered_ = true;
  if (kept != nullptr && result == CUDA_SUCCESS) {
    AnswerStore().Keep(kept->slot, kept->generation, cache_handle_, std::move(kept->key), reply_buffer_);
  }
  return result;
}

CUresult Call::Malformed() {
  return Fail(kLostResult, std::string("the server's answer to ") + kOpNames[op_] + " is malformed");
}

void RelateKernelFunction(CUkernel kernel, CUfunction function) {
  AnswerStore().Relate(HandleBits(kernel), HandleBits(function));
}

void NoteLibraryModule(CUmodule module) { AnswerStore().NoteLibraryModule(HandleBits(module)); }

void NoteModuleFunction(CUmodule module, CUfunction function) {
  AnswerStore().NoteModuleFunction(HandleBits(module), HandleBits(function));
}

CUcontext CurrentContext() { return t_depth > 0 ? t_stack[t_depth - 1] : nullptr; }

void SetCurrentContext(CUcontext ctx) {
  if (ctx == nullptr) {
    if (t_depth > 0) --t_depth;
  } else if (t_depth == 0) {
    t_stack[t_depth++] = ctx;
  } else {
    t_stack[t_depth - 1] = ctx;
  }
}

bool PushContext(CUcontext ctx) {
  if (t_depth == kStackDepth) return false;
  t_stack[t_depth++] = ctx;
  return true;
}

CUcontext PopContext() { return t_depth > 0 ? t_stack[--t_depth] : nullptr; }

void ForgetContext(CUcontext ctx) {
  int k = 0;
  for (int i = 0; i < t_depth; ++i)
    if (t_stack[i] != ctx) t_stack[k++] = t_stack[i];
  t_depth = k;
}

CUresult RefuseArgument(const char* call, const char* param) {
  shim::InitLog();
  Log(LogLevel::kWarn, "remote: %s: a non-NULL %s is not forwarded (yet): CUDA_ERROR_NOT_SUPPORTED", call, param);
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult RefuseSize(const char* call, const char* param, uint64_t bytes) {
  shim::InitLog();
  Log(LogLevel::kWarn, "remote: %s: %s of %llu bytes is more than one call carries (%llu): CUDA_ERROR_INVALID_VALUE",
      call, param, static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(kMaxBuffer));
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult RefuseImage(const char* call) {
  shim::InitLog();
  Log(LogLevel::kWarn, "remote: %s: cannot tell the size of this module image: CUDA_ERROR_INVALID_IMAGE", call);
  return CUDA_ERROR_INVALID_IMAGE;
}

CUresult NotForwarded(const char* name) {
  shim::InitLog();
  Log(LogLevel::kWarn, "remote: %s is not forwarded (yet): CUDA_ERROR_NOT_SUPPORTED", name);
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace gslice::remote

// The process's forwarded calls so far: out[0] answered from the client's cache, out[1] sent
// without waiting (queued), out[2] round trips (the calling thread waited for the answer).
// For benchmarks (bench/gpu/suites/remote_train.sh), read with dlsym on the loaded client.
extern "C" __attribute__((visibility("default"))) void gslice_remote_stats(uint64_t out[3]) {
  out[0] = gslice::remote::g_cached_calls.load(std::memory_order_relaxed);
  out[1] = gslice::remote::g_async_calls.load(std::memory_order_relaxed);
  out[2] = gslice::remote::g_round_trips.load(std::memory_order_relaxed);
}

// The same counters per call, written to path as lines "NAME CACHED ASYNC ROUND_TRIPS" for the
// calls made at least once, most round trips first. Returns 0, or -1 when path cannot be
// written. For benchmarks (bench/gpu/remote/train.py), read with dlsym on the loaded client.
extern "C" __attribute__((visibility("default"))) int gslice_remote_write_call_counts(const char* path) {
  using namespace gslice::remote;
  struct Row {
    uint32_t op;
    uint64_t cached, async, trips;
  };
  std::vector<Row> rows;
  for (uint32_t op = 0; op < kOpCount; ++op) {
    const Row r{op, g_op_cached[op].load(std::memory_order_relaxed), g_op_async[op].load(std::memory_order_relaxed),
                g_op_trips[op].load(std::memory_order_relaxed)};
    if (r.cached + r.async + r.trips > 0) rows.push_back(r);
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.trips != b.trips ? a.trips > b.trips : a.async + a.cached > b.async + b.cached;
  });
  FILE* f = path != nullptr ? fopen(path, "we") : nullptr;
  if (f == nullptr) return -1;
  for (const Row& r : rows) {
    fprintf(f, "%s %llu %llu %llu\n", kOpNames[r.op], static_cast<unsigned long long>(r.cached),
            static_cast<unsigned long long>(r.async), static_cast<unsigned long long>(r.trips));
  }
  return fclose(f) == 0 ? 0 : -1;
}
