#include "connection.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>

#include "attach.h"
#include "gslice/options.h"
#include "log.h"
#include "socket_io.h"

namespace gslice::remote {

using shim::Log;
using shim::LogLevel;

namespace {

// Queued async calls are sent once this many bytes wait (or with the next call that waits).
constexpr size_t kQueueBytes = 256 * 1024;

// How long the server may take to start a worker (it runs `gslice run`, which loads the
// driver) before the handshake counts as failed.
constexpr int kHelloTimeoutMs = 30000;

// A connection to the server: the worker's (attached), or a probe's (wire.h: kOpProbe).
// REQUIRES g_mu for everything.
struct Connection {
  int fd = -1;
  pid_t pid = 0;        // the process that connected (a forked child connects anew)
  uint32_t seq = 0;
  CUresult failed = CUDA_SUCCESS;  // sticky: kNoServerResult or kLostResult (g_conn's only)
  std::vector<uint8_t> queued;     // frames of async calls not sent yet, in call order
};

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
// The process's worker connection (the slice), made at its first call that needs a GPU
// (attach.h), and until then the probe that answers device queries. Never both open: the
// probe closes when the worker connects.
Connection g_conn;
Connection g_probe;
// cuInit's flags once it succeeded on the probe: the worker's driver gets the same call at
// attach, before anything else, so that it is initialised as the program believes it is.
bool g_init_replay = false;
unsigned int g_init_flags = 0;

// Answers of cached calls (calls.def: cached), keyed by opcode and arguments (the request
// without its context). REQUIRES g_mu. Never freed: calls may come during exit.
struct CachedAnswer {
  std::vector<uint8_t> key;
  std::vector<uint8_t> reply;
};
std::vector<CachedAnswer>* g_cache = nullptr;
constexpr size_t kMaxCached = 4096;

std::vector<uint8_t> CacheKey(uint32_t op, const Writer& request) {
  std::vector<uint8_t> key(sizeof op);
  std::memcpy(key.data(), &op, sizeof op);
  key.insert(key.end(), request.buffer().begin() + sizeof(uint64_t), request.buffer().end());
  return key;
}

// Fails the connection for good, with one log line.
CUresult FailLocked(CUresult result, const std::string& why) {
  if (g_conn.fd >= 0) close(g_conn.fd);
  if (g_probe.fd >= 0) close(g_probe.fd);
  g_conn.fd = -1;
  g_probe.fd = -1;
  g_conn.failed = result;
  Log(LogLevel::kError, "remote: %s; every CUDA call now returns %s", why.c_str(),
      result == kLostResult ? "CUDA_ERROR_DEVICE_UNAVAILABLE" : "CUDA_ERROR_NO_DEVICE");
  return result;
}

bool ReadWithin(int fd, int timeout_ms) {
  pollfd p = {fd, POLLIN, 0};
  int rc;
  do {
    rc = poll(&p, 1, timeout_ms);
  } while (rc < 0 && errno == EINTR);
  return rc > 0;
}

bool FlushLocked() {
  if (g_conn.queued.empty()) return true;
  const bool ok = WriteAll(g_conn.fd, g_conn.queued.data(), g_conn.queued.size());
  g_conn.queued.clear();
  return ok;
}

// Queues an async call's frame; sends the queue when it is full.
bool QueueLocked(const FrameHeader& h, const Writer& payload) {
  if (payload.size() + kHeaderSize > kQueueBytes) {
    return FlushLocked() && WriteFrame(g_conn.fd, h, payload.buffer().data(), payload.size());
  }
  uint8_t head[kHeaderSize];
  FrameHeader sized = h;
  sized.length = static_cast<uint32_t>(payload.size());
  EncodeHeader(sized, head);
  g_conn.queued.insert(g_conn.queued.end(), head, head + kHeaderSize);
  g_conn.queued.insert(g_conn.queued.end(), payload.buffer().begin(), payload.buffer().end());
  return g_conn.queued.size() < kQueueBytes || FlushLocked();
}

// Connects to GSLICE_REMOTE and says hello with op kOpHello (attach: the server starts a
// worker in a slice) or kOpProbe. Returns the connected fd, or -1 after FailLocked.
int HelloLocked(uint32_t op, CUresult* result, uint32_t* worker_pid, std::string* shown) {
  shim::InitLog();
  const char* text = OptionValue(Option::Remote);
  if (text[0] == '\0') {
    *result = FailLocked(kNoServerResult, std::string(OptionEnv(Option::Remote)) +
                                              " is not set: this libcuda.so.1 forwards to a gslice-remoted "
                                              "(run the program with gslice run --remote ADDR)");
    return -1;
  }
  Address address;
  std::string error;
  if (!ParseAddress(text, &address, &error)) {
    *result = FailLocked(kNoServerResult, error);
    return -1;
  }
  *shown = address.text;
  int fd = Connect(address, &error);
  if (fd < 0) {
    *result = FailLocked(kNoServerResult, error);
    return -1;
  }
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  Hello hello{.calls_hash = kCallsHash,
              .memory = OptionValue(Option::Memory),
              .compute = OptionValue(Option::Compute),
              .share = OptionValue(Option::Share),
              .slice_class = OptionIsSet(Option::Class) ? OptionValue(Option::Class) : "",
              .idle_timeout = OptionValue(Option::IdleTimeout),
              .host = std::string(host).substr(0, kMaxHelloString)};
  Writer w;
  EncodeHello(hello, &w);
  auto refuse = [&](const std::string& why) {
    close(fd);
    *result = FailLocked(kNoServerResult, why);
    return -1;
  };
  if (!WriteFrame(fd, FrameHeader{.seq = 0, .op = op}, w.buffer().data(), w.size())) {
    return refuse("handshake with " + address.text + ": the server closed the connection");
  }
  FrameHeader h;
  std::vector<uint8_t> payload;
  if (!ReadWithin(fd, kHelloTimeoutMs)) return refuse("handshake with " + address.text + ": no answer within 30 s");
  if (ReadFrame(fd, kMaxString + 64, &h, &payload) != FrameRead::kOk || h.op != (op | kReplyBit)) {
    return refuse("handshake with " + address.text + ": the server closed the connection (see its log)");
  }
  Reader r(payload.data(), payload.size());
  HelloReply reply;
  if (!DecodeHelloReply(&r, &reply, &error)) return refuse(address.text + ": " + error);
  if (reply.status != 0) return refuse(address.text + " refused this client: " + reply.message);
  *worker_pid = reply.worker_pid;
  return fd;
}

// A forked child starts with no connection: the parent's worker and probe stay the parent's.
void ForgetParentsLocked() {
  for (Connection* c : {&g_conn, &g_probe}) {
    if (c->fd >= 0 && c->pid != getpid()) {
      close(c->fd);
      *c = Connection{};
    }
  }
}

// One request on c and its reply, the frame checked against the call. REQUIRES: c connected.
CUresult RoundTripLocked(Connection& c, uint32_t op, const Writer& request, std::vector<uint8_t>* reply) {
  const uint32_t seq = ++c.seq;
  FrameHeader h;
  if (!WriteFrame(c.fd, FrameHeader{.seq = seq, .op = op}, request.buffer().data(), request.size())) {
    return FailLocked(kLostResult, std::string("lost the server while sending ") + kOpNames[op]);
  }
  if (ReadFrame(c.fd, kMaxFrame, &h, reply) != FrameRead::kOk) {
    return FailLocked(kLostResult, std::string("lost the server during ") + kOpNames[op]);
  }
  if (h.seq != seq || h.op != (op | kReplyBit)) {
    return FailLocked(kLostResult, std::string("the server's answer to ") + kOpNames[op] + " is not for it");
  }
  return CUDA_SUCCESS;
}

// Makes sure the process holds its worker (attach on use, attach.h).
CUresult ConnectLocked() {
  ForgetParentsLocked();
  if (g_conn.fd >= 0) return CUDA_SUCCESS;
  if (g_conn.failed != CUDA_SUCCESS) return g_conn.failed;
  CUresult result = CUDA_SUCCESS;
  uint32_t worker_pid = 0;
  std::string shown;
  const int fd = HelloLocked(kOpHello, &result, &worker_pid, &shown);
  if (fd < 0) return result;
  g_conn.fd = fd;
  g_conn.pid = getpid();
  if (g_probe.fd >= 0) {
    close(g_probe.fd);  // the probe process ends with its connection
    g_probe = Connection{};
  }
  Log(LogLevel::kInfo, "remote: connected to %s, worker pid %u", shown.c_str(), worker_pid);
  if (g_init_replay) {
    Writer init;
    init.Put<uint64_t>(0);
    init.Put(g_init_flags);
    std::vector<uint8_t> reply;
    if (CUresult r = RoundTripLocked(g_conn, kOp_cuInit, init, &reply); r != CUDA_SUCCESS) return r;
    Reader in(reply.data(), reply.size());
    int32_t value = 0;
    if (!in.Get(&value) || value != CUDA_SUCCESS) {
      return FailLocked(kNoServerResult, "the worker's driver refused cuInit, which the probe accepted (" +
                                             std::to_string(value) + ")");
    }
  }
  return CUDA_SUCCESS;
}

// Makes sure the process can ask a device query: its worker when attached, else a probe.
// *via receives the connection to use.
CUresult ConnectForQueryLocked(Connection** via) {
  ForgetParentsLocked();
  if (g_conn.failed != CUDA_SUCCESS) return g_conn.failed;
  if (g_conn.fd >= 0) {
    *via = &g_conn;
    return CUDA_SUCCESS;
  }
  *via = &g_probe;
  if (g_probe.fd >= 0) return CUDA_SUCCESS;
  CUresult result = CUDA_SUCCESS;
  uint32_t ignored = 0;
  std::string shown;
  const int fd = HelloLocked(kOpProbe, &result, &ignored, &shown);
  if (fd < 0) return result;
  g_probe.fd = fd;
  g_probe.pid = getpid();
  Log(LogLevel::kDebug, "remote: asking %s about its devices; no slice is held until the first call that needs a GPU",
      shown.c_str());
  return CUDA_SUCCESS;
}

// The calling thread's context stack.
constexpr int kStackDepth = 32;
thread_local CUcontext t_stack[kStackDepth];
thread_local int t_depth = 0;

}  // namespace

Call::Call(uint32_t op) : op_(op) { request_.Put<uint64_t>(reinterpret_cast<uintptr_t>(CurrentContext())); }

CUresult Call::Run() {
  pthread_mutex_lock(&g_mu);
  std::vector<uint8_t> key;
  if (kOpCached[op_]) {
    key = CacheKey(op_, request_);
    for (size_t i = 0; g_cache != nullptr && i < g_cache->size(); ++i) {
      const CachedAnswer& a = (*g_cache)[i];
      if (a.key == key) {
        Log(LogLevel::kDebug, "remote: %s answered from the client's cache", kOpNames[op_]);
        reply_buffer_ = a.reply;
        reader_ = Reader(reply_buffer_.data(), reply_buffer_.size());
        int32_t value = 0;
        reader_.Get(&value);  // stored only when it held CUDA_SUCCESS
        answered_ = true;
        pthread_mutex_unlock(&g_mu);
        return CUDA_SUCCESS;
      }
    }
  }
  Connection* via = &g_conn;
  CUresult result = AnswersWithoutSlice(op_) ? ConnectForQueryLocked(&via) : ConnectLocked();
  if (result == CUDA_SUCCESS) {
    if (kOpAsync[op_]) {
      // Not waited for: its driver error, if any, comes with the next synchronisation.
      if (!QueueLocked(FrameHeader{.seq = ++g_conn.seq, .op = op_}, request_)) {
        result = FailLocked(kLostResult, std::string("lost the server while sending ") + kOpNames[op_]);
      } else {
        reader_ = Reader();
        answered_ = true;
      }
    } else if (via == &g_conn && !FlushLocked()) {
      result = FailLocked(kLostResult, std::string("lost the server while sending ") + kOpNames[op_]);
    } else if ((result = RoundTripLocked(*via, op_, request_, &reply_buffer_)) == CUDA_SUCCESS) {
      reader_ = Reader(reply_buffer_.data(), reply_buffer_.size());
      int32_t value = 0;
      if (!reader_.Get(&value)) {
        result = FailLocked(kLostResult, std::string("the server's answer to ") + kOpNames[op_] + " is empty");
      } else {
        result = static_cast<CUresult>(value);
        answered_ = true;
        if (op_ == kOp_cuInit && via == &g_probe && result == CUDA_SUCCESS && !g_init_replay) {
          g_init_replay = true;
          uint32_t flags = 0;  // the request: u64 context, u32 Flags
          std::memcpy(&flags, request_.buffer().data() + sizeof(uint64_t), sizeof flags);
          g_init_flags = flags;
        }
        if (kOpCached[op_] && result == CUDA_SUCCESS) {
          if (g_cache == nullptr) g_cache = new std::vector<CachedAnswer>();
          if (g_cache->size() < kMaxCached) g_cache->push_back({std::move(key), reply_buffer_});
        }
      }
    }
  }
  pthread_mutex_unlock(&g_mu);
  return result;
}

CUresult Call::Malformed() {
  pthread_mutex_lock(&g_mu);
  CUresult r = FailLocked(kLostResult, std::string("the server's answer to ") + kOpNames[op_] + " is malformed");
  pthread_mutex_unlock(&g_mu);
  return r;
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
