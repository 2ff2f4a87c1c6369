// One client's worker: started by `gslice run` (so the gslice shim is preloaded and the slice's
// limits are in its environment), it loads libcuda.so.1 - the shim in front of the real or
// simulated driver - answers the handshake and serves the client's calls until the client
// goes away. A watcher thread ends the process the moment the client's socket closes, even
// while a call blocks in the driver: the process's exit frees everything the client held.
// Frames come and go on that socket or, once a client on the same host set them up (its first
// frame), on shared-memory rings beside it (shm_ring.h); the socket then only says whether the
// client lives.
//
// Threads: the main thread reads requests in the order the client made them and hands each to
// its lane's serving thread (one per client thread, made at its first request), so that a lane
// blocked in the driver (a synchronisation) holds up no other lane, and each client thread's
// calls run on a thread of their own (its per-thread default stream, its current context).
// Order across lanes: a request runs only after every async request read before it has run.
// The client returned from those async calls before it made this one, so CUDA's order holds:
// work a thread queued is in its stream before any later call of another thread. Synchronous
// requests of different lanes were in flight at once on the client and need no order.
//
// Timelines (docs/trace.md, "Remote programs"): a client that records asks for it in its Hello;
// its session then starts the worker with GSLICE_TRACE set, so the worker's shim records its
// driver calls and GPU activity, and the worker keeps a ring of the requests it served (seq,
// lane, serving thread, start and end on the shim's clock). The client asks for the clock
// (kOpTraceClock, answered at once by the reader) and, at its end, for both (kOpTraceFetch).
#include "worker.h"

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cstring>
#include <unistd.h>

#include <sys/syscall.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <new>
#include <string>
#include <vector>

#include "dispatch.h"
#include "gslice/clock.h"
#include "gslice/options.h"
#include "gslice/trace_format.h"
#include "shared_host.h"
#include "staging.h"
#include "shm_ring.h"
#include "socket_io.h"

namespace gslice::remote {

namespace {

using CtxGetFn = CUresult (*)(CUcontext*);
using CtxSetFn = CUresult (*)(CUcontext);
CtxGetFn g_ctx_get = nullptr;
CtxSetFn g_ctx_set = nullptr;

struct Request {
  FrameHeader header;
  std::vector<uint8_t> payload;
  uint64_t async_before = 0;  // async requests read before this one
  bool waited = false;        // an async call the client waits for (wire.h: kWaitBit)
  int fd = -1;                // kOpHostShare: the memory's descriptor (closed once served)
};

// A client thread's serving thread and the requests it has yet to run. REQUIRES g_mu.
struct Lane {
  bool started = false;
  std::deque<Request> queue;
  pthread_cond_t ready = PTHREAD_COND_INITIALIZER;
};

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_async_ran = PTHREAD_COND_INITIALIZER;
uint64_t g_async_done = 0;  // async requests that have run (in the order read); REQUIRES g_mu
// Bytes of requests read and not yet taken by their lane; REQUIRES g_mu. Past the bound the
// reader waits (the client's sends then wait on the socket): lanes always drain, since a request
// waits only for requests read before it.
uint64_t g_queued_bytes = 0;
constexpr uint64_t kMaxQueuedBytes = 2ull * kMaxFrame;
pthread_cond_t g_drained = PTHREAD_COND_INITIALIZER;
Lane g_lanes[kMaxLanes];
// Where answers go: the client's socket, or the shared-memory rings once the client set them
// up (its first frame; shm_ring.h). REQUIRES g_write_mu (one answer at a time).
Channel g_out;
pthread_mutex_t g_write_mu = PTHREAD_MUTEX_INITIALIZER;

void* WatchClient(void* arg) {
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(arg));
  for (;;) {
    pollfd p = {fd, POLLRDHUP, 0};
    int rc = poll(&p, 1, -1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) _exit(0);
  }
  return nullptr;
}

// Makes ctx current on the calling (serving) thread, as it is on the client's calling thread.
CUresult MakeCurrent(CUcontext want) {
  if (g_ctx_get == nullptr || g_ctx_set == nullptr) return CUDA_SUCCESS;
  for (int tries = 0; tries < 64; ++tries) {
    CUcontext cur = nullptr;
    if (g_ctx_get(&cur) != CUDA_SUCCESS || cur == want) return CUDA_SUCCESS;  // before cuInit: nothing to do
    CUresult r = g_ctx_set(want);  // NULL pops one level of the stack
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

bool SendHelloReply(int fd, const HelloReply& reply) {
  Writer w;
  EncodeHelloReply(reply, &w);
  return WriteFrame(fd, FrameHeader{.seq = 0, .op = kOpHello | kReplyBit}, w.buffer().data(), w.size());
}

// ---- the served requests, for the client's timeline (wire.h: Trace) ----------------------------

// The shim's timeline clock and part writer (interpose/src/trace_recorder.cc), when the worker
// records: GSLICE_TRACE names the folder its session made for the part.
using NowFn = int64_t (*)();
using WritePartFn = int (*)(const char*);
NowFn g_trace_now = nullptr;
WritePartFn g_trace_write_part = nullptr;
std::string g_trace_folder;  // "" when not recording

// A ring of served requests: a writer claims an index, fills the slot and publishes seq =
// index + 1; the fetch takes a slot only when seq reads index + 1 before and after the copy.
struct ServeSlot {
  std::atomic<uint64_t> seq{0};
  ServeRecord record;
};
ServeSlot* g_served = nullptr;
uint64_t g_served_mask = 0;
std::atomic<uint64_t> g_served_next{0};
uint64_t g_served_taken = 0;  // the first index the next fetch reports; REQUIRES g_fetch_mu
pthread_mutex_t g_fetch_mu = PTHREAD_MUTEX_INITIALIZER;

int64_t TraceNow() {
  return g_trace_now != nullptr ? g_trace_now() : MonotonicNs();
}

bool Tracing() { return g_served != nullptr; }

uint32_t ThreadId() {
  static thread_local uint32_t tid = 0;
  if (tid == 0) tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return tid;
}

// Starts recording when the session asked for it (GSLICE_TRACE set): a ring of
// GSLICE_TRACE_EVENTS served requests, like the shim's.
void StartTracing(void* driver) {
  const char* folder = OptionValue(Option::Trace);
  if (folder[0] == '\0') return;
  g_trace_folder = folder;
  g_trace_now = reinterpret_cast<NowFn>(dlsym(driver, "gslice_trace_now_ns"));
  g_trace_write_part = reinterpret_cast<WritePartFn>(dlsym(driver, "gslice_trace_write_part"));
  unsigned long long n = strtoull(OptionValue(Option::TraceEvents), nullptr, 10);
  if (n < 1024 || n > (1ull << 24)) n = 262144;
  uint64_t cap = 1024;
  while (cap < n) cap <<= 1;
  g_served = new (std::nothrow) ServeSlot[cap];
  g_served_mask = cap - 1;
  if (g_trace_now == nullptr) {
    fprintf(stderr, "gslice-remoted[%d]: the worker's libcuda.so.1 is not gslice's shim: its timeline has "
            "the served requests only\n", static_cast<int>(getpid()));
  }
}

void RecordServed(const Request& request, uint32_t lane, int64_t start, int64_t end) {
  const uint64_t i = g_served_next.fetch_add(1, std::memory_order_relaxed);
  ServeSlot& slot = g_served[i & g_served_mask];
  slot.seq.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  slot.record = ServeRecord{.seq = request.header.seq, .op = request.header.op, .lane = lane, .tid = ThreadId(),
                            .start = start, .end = end};
  slot.seq.store(i + 1, std::memory_order_release);
}

// A part for a worker whose shim recorded nothing (gslice/trace_format.h): its header and its
// name, as the shim would write them.
std::string EmptyPart() {
  const std::string slice = OptionValue(Option::Slice);
  const std::string pid = std::to_string(getpid());
  return TracePartHead(TracePartHeader{
             .pid = getpid(),
             .started_mono_ns = TraceNow(),
             .started_unix_ns = UnixNs(),
             .dropped = 0,
             .slice_json = TraceJsonString(slice),
             .note_json = TraceJsonString("none: the worker's driver calls were not recorded")}) +
         "M {\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + pid +
         ",\"args\":{\"name\":" + TraceJsonString("gslice-remoted (slice " + slice + ")") + "}}\n";
}

// kOpTraceFetch: the shim's part so far (written into the session's folder, read back and
// removed) and the requests served since the last fetch.
void AnswerTraceFetch(Writer* out) {
  if (!Tracing()) {
    out->Put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
    return;
  }
  pthread_mutex_lock(&g_fetch_mu);
  std::string part;
  if (g_trace_write_part != nullptr && g_trace_write_part(g_trace_folder.c_str()) == 0) {
    const std::string path = g_trace_folder + "/" + std::to_string(getpid()) + ".part";
    if (FILE* f = fopen(path.c_str(), "re")) {
      char buf[1 << 16];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, f)) > 0 && part.size() < kMaxTracePart) part.append(buf, n);
      fclose(f);
    }
    unlink(path.c_str());
    if (part.size() > kMaxTracePart) {
      // Whole lines only; the merge skips what is missing.
      part.resize(part.rfind('\n', kMaxTracePart - 1) + 1);
      fprintf(stderr, "gslice-remoted[%d]: the worker's timeline part was cut to %llu bytes\n",
              static_cast<int>(getpid()), static_cast<unsigned long long>(kMaxTracePart));
    }
  }
  if (part.empty()) part = EmptyPart();
  const uint64_t next = g_served_next.load(std::memory_order_acquire);
  uint64_t first = g_served_taken;
  uint64_t dropped = 0;
  const uint64_t keep = std::min<uint64_t>(g_served_mask + 1, kMaxServeRecords);
  if (next - first > keep) {
    dropped = next - first - keep;
    first = next - keep;
  }
  std::vector<ServeRecord> served;
  served.reserve(next - first);
  for (uint64_t i = first; i < next; ++i) {
    ServeSlot& slot = g_served[i & g_served_mask];
    if (slot.seq.load(std::memory_order_acquire) != i + 1) {
      ++dropped;
      continue;
    }
    const ServeRecord r = slot.record;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.seq.load(std::memory_order_relaxed) != i + 1) {
      ++dropped;
      continue;
    }
    served.push_back(r);
  }
  g_served_taken = next;
  pthread_mutex_unlock(&g_fetch_mu);
  out->Put<int32_t>(CUDA_SUCCESS);
  EncodeTraceFetchReply(dropped, served, part, out);
}

// kOpHostShare and kOpHostUnshare (wire.h), on the lane with the request's context current.
void ServeHostMemory(Request& request, Reader& in, Writer* out) {
  if (request.header.op == kOpHostUnshare) {
    uint64_t worker_addr = 0;
    if (!in.Get(&worker_addr) || !in.AtEnd()) {
      out->Put<int32_t>(CUDA_ERROR_INVALID_VALUE);
      return;
    }
    out->Put<int32_t>(UnshareHost(worker_addr));
    return;
  }
  uint64_t client_addr = 0, bytes = 0, worker_addr = 0, device_ptr = 0;
  std::string why;
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  if (!in.Get(&client_addr) || !in.Get(&bytes) || !in.AtEnd()) {
    why = "a malformed request";
  } else if (request.fd < 0) {
    why = "no memory file came with it (only over shared-memory rings)";
  } else {
    r = ShareHost(request.fd, client_addr, bytes, &worker_addr, &device_ptr, &why);
  }
  if (request.fd >= 0) close(request.fd);
  request.fd = -1;
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "gslice-remoted[%d]: cannot share %llu bytes of page-locked memory with the client (%s): %d\n",
            static_cast<int>(getpid()), static_cast<unsigned long long>(bytes), why.c_str(), static_cast<int>(r));
  }
  out->Put<int32_t>(r);
  if (r == CUDA_SUCCESS) {
    out->Put<uint64_t>(worker_addr);
    out->Put<uint64_t>(device_ptr);
  }
}

// Calls not waited for that failed at least once (logged once each).
std::atomic<bool> g_async_failed[kOpCount];

bool IsAsync(uint32_t op) { return op < kOpCount && kOpAsync[op]; }
// Not answered: an async call the client does not wait for.
bool Unanswered(const Request& r) { return IsAsync(r.header.op) && !r.waited; }

// Runs one request on the calling (its lane's) thread; returns the answer, or nothing for an
// async request (its error goes to *deferred until the lane's next synchronisation).
bool Serve(Request& request, int32_t* deferred, Writer* out) {
  const uint32_t op = request.header.op;
  Reader in(request.payload.data(), request.payload.size());
  RequestPrefix prefix;
  if (op == kOpTraceFetch) {
    if (!DecodeRequestPrefix(&in, &prefix) || !in.AtEnd()) {
      out->Put<int32_t>(CUDA_ERROR_INVALID_VALUE);
    } else {
      AnswerTraceFetch(out);
    }
    return true;
  }
  // NVML requests need no context.
  const bool driver_call = op >= kOpCount || kOpLibrary[op] == Library::kCuda;
  if (!DecodeRequestPrefix(&in, &prefix)) {
    out->Put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  } else if (CUresult r = driver_call ? MakeCurrent(reinterpret_cast<CUcontext>(static_cast<uintptr_t>(prefix.context)))
                                      : CUDA_SUCCESS;
             r != CUDA_SUCCESS && op < kOpCount) {
    out->Put<int32_t>(r);
  } else if (op == kOpHostShare || op == kOpHostUnshare) {
    ServeHostMemory(request, in, out);
  } else {
    switch (Dispatch(op, in, *out)) {
      case Dispatched::kAnswered:
        break;
      case Dispatched::kRefused:
        fprintf(stderr, "gslice-remoted[%d]: malformed %s request: answered CUDA_ERROR_INVALID_VALUE\n",
                static_cast<int>(getpid()), kOpNames[op]);
        break;
      case Dispatched::kUnknownOp:
        fprintf(stderr, "gslice-remoted[%d]: unknown request %#x: closing the connection\n",
                static_cast<int>(getpid()), op);
        _exit(3);
    }
  }
  int32_t result = CUDA_SUCCESS;
  std::memcpy(&result, out->buffer().data(), sizeof result);
  if (Unanswered(request)) {
    // The client does not wait for this one: its error waits for the next synchronisation.
    if (result != CUDA_SUCCESS && *deferred == CUDA_SUCCESS) *deferred = result;
    if (result != CUDA_SUCCESS && op < kOpCount && !g_async_failed[op].exchange(true, std::memory_order_relaxed)) {
      // Named once per call: the client sees only the error, at its next synchronisation.
      // With its arguments as sent (after the context and lane), to tell which call it was.
      std::string args;
      for (size_t i = kRequestPrefixSize; i < request.payload.size() && i < kRequestPrefixSize + 48; ++i) {
        char hex[4];
        snprintf(hex, sizeof hex, "%02x", request.payload[i]);
        args += hex;
        if ((i - kRequestPrefixSize) % 8 == 7) args += ' ';
      }
      fprintf(stderr,
              "gslice-remoted[%d]: %s (not waited for) failed with %d: the client's next synchronisation gets it "
              "(arguments: %s)\n",
              static_cast<int>(getpid()), kOpNames[op], static_cast<int>(result), args.c_str());
    }
    return false;
  }
  if (op < kOpCount && kOpCollects[op] && *deferred != CUDA_SUCCESS && result == CUDA_SUCCESS) {
    result = *deferred;
    std::memcpy(out->buffer().data(), &result, sizeof result);
    *deferred = CUDA_SUCCESS;
  }
  return true;
}

// A lane's serving thread: its requests in order, each after the async requests before it.
void* ServeLane(void* arg) {
  Lane& lane = *static_cast<Lane*>(arg);
  int32_t deferred = CUDA_SUCCESS;  // the first error of an async call since the last collect
  for (;;) {
    pthread_mutex_lock(&g_mu);
    while (lane.queue.empty()) pthread_cond_wait(&lane.ready, &g_mu);
    Request request = std::move(lane.queue.front());
    lane.queue.pop_front();
    g_queued_bytes -= request.payload.size();
    pthread_cond_signal(&g_drained);
    while (g_async_done < request.async_before) pthread_cond_wait(&g_async_ran, &g_mu);
    pthread_mutex_unlock(&g_mu);
    Writer out;
    const bool traced = Tracing() && request.header.op != kOpTraceFetch;
    const int64_t start = traced ? TraceNow() : 0;
    const bool answer = Serve(request, &deferred, &out);
    if (traced) RecordServed(request, static_cast<uint32_t>(&lane - g_lanes), start, TraceNow());
    if (Unanswered(request)) {
      pthread_mutex_lock(&g_mu);
      ++g_async_done;
      pthread_cond_broadcast(&g_async_ran);
      pthread_mutex_unlock(&g_mu);
    }
    if (!answer) continue;
    pthread_mutex_lock(&g_write_mu);
    // Deferred copies that completed go first (staging.h): an answer that says a copy is done
    // must find its bytes already in the program's memory.
    const bool sent =
        SendCompletedDeferred([](const void* p, size_t n) {
          return WriteFrame(g_out, FrameHeader{.seq = 0, .op = kOpDeferredData}, p, n);
        }) &&
        WriteFrame(g_out, FrameHeader{.seq = request.header.seq, .op = request.header.op | kReplyBit},
                   out.buffer().data(), out.size());
    pthread_mutex_unlock(&g_write_mu);
    if (!sent) _exit(0);  // the client is gone
  }
  return nullptr;
}

}  // namespace

int RunWorker(int fd) {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (driver == nullptr) {
    const char* why = dlerror();
    const std::string message = std::string("the worker cannot load libcuda.so.1: ") + (why != nullptr ? why : "?");
    fprintf(stderr, "gslice-remoted: %s\n", message.c_str());
    SendHelloReply(fd, HelloReply{.status = 1, .worker_pid = 0, .message = message});
    return 1;
  }
  LoadDriver(driver);
  // The worker's NVML (the shim's, preloaded by gslice run) answers the NVML client; without
  // one, its calls are answered NVML_ERROR_NOT_SUPPORTED.
  if (void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_GLOBAL); nvml != nullptr) {
    LoadNvml(nvml);
    InitNvmlBeforeFirstCall();
  }
  StartTracing(driver);
  LoadSharedHost(driver);
  LoadStaging(driver);
  g_ctx_get = reinterpret_cast<CtxGetFn>(dlsym(driver, "cuCtxGetCurrent"));
  g_ctx_set = reinterpret_cast<CtxSetFn>(dlsym(driver, "cuCtxSetCurrent"));
  if (!SendHelloReply(fd, HelloReply{.status = 0, .worker_pid = static_cast<uint32_t>(getpid()), .message = ""})) {
    return 0;
  }
  pthread_t watcher;
  if (pthread_create(&watcher, nullptr, WatchClient, reinterpret_cast<void*>(static_cast<intptr_t>(fd))) == 0) {
    pthread_detach(watcher);
  }
  g_out = Channel{.fd = fd};
  Channel from{.fd = fd};  // where requests come from: the socket, then maybe the rings
  uint64_t async_read = 0;
  bool first = true;
  // After the first frame, the socket is read through a buffer (one read for a batch of
  // queued calls); the first is read alone, as it may carry the rings' descriptor.
  FrameReader reader(fd);
  // Lanes given requests since they were last woken: woken once no further frame is buffered
  // (one wake-up for a batch of queued calls, not one per call), and before the reader waits.
  std::vector<Lane*> to_wake;
  auto wake = [&to_wake] {  // REQUIRES g_mu
    for (Lane* l : to_wake) pthread_cond_signal(&l->ready);
    to_wake.clear();
  };
  for (;;) {
    Request request;
    // On the socket, a descriptor may come with a frame (only the rings' set-up keeps it).
    int passed = -1;
    FrameRead got = from.rings != nullptr ? ReadFrame(from, kMaxFrame, &request.header, &request.payload)
                    : first             ? ReadFrameWithFd(fd, kMaxFrame, &request.header, &request.payload, &passed)
                                        : reader.Next(kMaxFrame, &request.header, &request.payload);
    if (got == FrameRead::kClosed) {
      if (from.rings != nullptr && RingsBrokenByPeer(from.rings)) {
        fprintf(stderr, "gslice-remoted[%d]: %s: closing the connection\n", static_cast<int>(getpid()),
                RingsFailure(from.rings).c_str());
        return 3;
      }
      return 0;
    }
    if (got == FrameRead::kTooLarge) {
      fprintf(stderr, "gslice-remoted[%d]: a frame of %u bytes (at most %u): closing the connection\n",
              static_cast<int>(getpid()), request.header.length, kMaxFrame);
      return 3;
    }
    const bool was_first = first;
    first = false;
    if (request.header.op == kOpRings && from.rings == nullptr) {
      // The same-host fast path, offered only as the client's first frame (nothing else is
      // in flight then: no serving thread writes while the transport changes).
      SharedRings* rings = nullptr;
      std::string why;
      pthread_mutex_lock(&g_write_mu);
      const bool ok = AnswerRings(fd, request.header, request.payload, passed, was_first, &rings, &why);
      if (rings != nullptr) {
        g_out.rings = rings;
        from.rings = rings;
      }
      pthread_mutex_unlock(&g_write_mu);
      if (!ok) return 0;
      if (rings == nullptr) {
        fprintf(stderr, "gslice-remoted[%d]: no shared-memory rings for this client (%s): it stays on the socket\n",
                static_cast<int>(getpid()), why.c_str());
      }
      continue;
    }
    if (passed >= 0) close(passed);
    if (request.header.op == kOpHostShare && from.rings != nullptr) {
      // Its memory's descriptor came first, on the socket (wire.h). A client that sent none
      // gets a refusal; one that sent something else loses its connection.
      pollfd p = {fd, POLLIN, 0};
      int rc;
      do {
        rc = poll(&p, 1, 5000);
      } while (rc < 0 && errno == EINTR);
      FrameHeader side;
      std::vector<uint8_t> empty;
      if (rc > 0) {
        if (ReadFrameWithFd(fd, 0, &side, &empty, &request.fd) != FrameRead::kOk || side.op != kOpHostShare ||
            side.seq != request.header.seq) {
          fprintf(stderr, "gslice-remoted[%d]: page-locked memory came without its descriptor frame: closing the "
                  "connection\n", static_cast<int>(getpid()));
          return 3;
        }
      }
    }
    // A request whose prefix does not decode is answered (refused) on lane 0.
    Reader in(request.payload.data(), request.payload.size());
    RequestPrefix prefix;
    const bool prefixed = DecodeRequestPrefix(&in, &prefix);
    const uint32_t lane = prefixed ? prefix.lane : 0;
    if (request.header.op == kOpTraceClock) {
      // Answered at once, on this thread: the client's clock alignment wants the shortest
      // round trip it can get.
      Writer out;
      if (!prefixed || !in.AtEnd()) {
        out.Put<int32_t>(CUDA_ERROR_INVALID_VALUE);
      } else if (!Tracing()) {
        out.Put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
      } else {
        out.Put<int32_t>(CUDA_SUCCESS);
        out.Put<int64_t>(TraceNow());
      }
      pthread_mutex_lock(&g_write_mu);
      const bool sent = WriteFrame(g_out, FrameHeader{.seq = request.header.seq, .op = kOpTraceClock | kReplyBit},
                                   out.buffer().data(), out.size());
      pthread_mutex_unlock(&g_write_mu);
      if (!sent) return 0;
      continue;
    }
    if ((request.header.op & kWaitBit) != 0 && IsAsync(request.header.op & ~kWaitBit)) {
      request.header.op &= ~kWaitBit;
      request.waited = true;
    }
    request.async_before = async_read;
    if (Unanswered(request)) ++async_read;
    pthread_mutex_lock(&g_mu);
    if (g_queued_bytes > kMaxQueuedBytes) wake();
    while (g_queued_bytes > kMaxQueuedBytes) pthread_cond_wait(&g_drained, &g_mu);
    g_queued_bytes += request.payload.size();
    Lane& l = g_lanes[lane];
    l.queue.push_back(std::move(request));
    if (std::find(to_wake.begin(), to_wake.end(), &l) == to_wake.end()) to_wake.push_back(&l);
    // On the rings each frame wakes its lane at once (they tell nothing of what follows).
    if (from.rings != nullptr || !reader.HasFrame()) wake();
    if (!l.started) {
      pthread_t thread;
      pthread_attr_t attr;
      pthread_attr_init(&attr);
      pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      l.started = pthread_create(&thread, &attr, ServeLane, &l) == 0;
      pthread_attr_destroy(&attr);
      if (!l.started) {
        fprintf(stderr, "gslice-remoted[%d]: cannot start a serving thread: closing the connection\n",
                static_cast<int>(getpid()));
        return 1;
      }
    }
    pthread_mutex_unlock(&g_mu);
  }
}

}  // namespace gslice::remote
