#include "client_trace.h"

#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "calls.h"
#include "gslice/clock.h"
#include "gslice/options.h"
#include "gslice/trace_format.h"
#include "log.h"
#include "trace_recorder.h"
#include "transport.h"
#include "wire.h"
#include "worker_clock.h"

namespace gslice::trace::detail {
extern std::atomic<uint32_t> g_local_word;  // defined below: NVTX's "recording" word
}  // namespace gslice::trace::detail

namespace gslice::remote {

namespace client_trace_detail {
std::atomic<bool> g_on{false};
}  // namespace client_trace_detail

namespace {

using shim::Log;
using shim::LogLevel;
using client_trace_detail::g_on;

// One forwarded call. A writer claims index i (fetch_add), fills the record and publishes
// seq = i + 1; the writer at exit takes a record only when seq reads i + 1 before and after.
struct Record {
  int64_t start;
  int64_t end;
  uint32_t op;
  uint32_t wire_seq;
  uint32_t tid;
  uint16_t lane;
  uint8_t mode;
};
struct Slot {
  std::atomic<uint64_t> seq;
  Record r;
};
static_assert(sizeof(Slot) == 40);

// Records that are not calls: the program's NVTX ranges and marks (interpose/src/trace_nvtx.cc,
// the shim's NVTX injection, compiled into the client too), op = the message's name id.
constexpr uint8_t kNvtxRange = 16;
constexpr uint8_t kNvtxMark = 17;

Slot* g_ring = nullptr;
uint64_t g_mask = 0;
std::atomic<uint64_t> g_next{0};
uint64_t g_base = 0;  // the first index of this process's recording (a forked child's own)
char g_folder[1024];
int64_t g_started_mono = 0;
int64_t g_started_unix = 0;

// NVTX messages by id (1-based), kept until exit; at most kMaxNames different ones.
constexpr size_t kMaxNames = 65536;
std::mutex g_names_mu;
std::vector<std::string>* g_names = nullptr;  // REQUIRES g_names_mu
std::unordered_map<std::string, uint32_t>* g_name_ids = nullptr;  // REQUIRES g_names_mu

uint32_t NameId(const char* message) {
  std::lock_guard<std::mutex> lock(g_names_mu);
  if (g_names == nullptr) {
    g_names = new std::vector<std::string>();
    g_name_ids = new std::unordered_map<std::string, uint32_t>();
  }
  const std::string m = message != nullptr ? message : "";
  if (auto it = g_name_ids->find(m); it != g_name_ids->end()) return it->second;
  if (g_names->size() >= kMaxNames) return 0;
  g_names->push_back(m);
  const uint32_t id = static_cast<uint32_t>(g_names->size());
  g_name_ids->emplace(m, id);
  return id;
}

std::string NameOf(uint32_t id) {
  std::lock_guard<std::mutex> lock(g_names_mu);
  if (g_names == nullptr || id == 0 || id > g_names->size()) return "(NVTX names table full)";
  return (*g_names)[id - 1];
}

void Push(const Record& r) {
  const uint64_t i = g_next.fetch_add(1, std::memory_order_relaxed);
  Slot& slot = g_ring[i & g_mask];
  slot.seq.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  slot.r = r;
  slot.seq.store(i + 1, std::memory_order_release);
}

uint32_t ThreadId() {
  static thread_local uint32_t tid = 0;
  if (tid == 0) tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return tid;
}

const char* ModeName(uint8_t mode) {
  switch (static_cast<CallMode>(mode)) {
    case CallMode::kRoundTrip: return "round trip";
    case CallMode::kAsync: return "sent without waiting";
    case CallMode::kCached: return "answered from the client's cache";
    case CallMode::kProbe: return "answered by the probe";
    case CallMode::kFailed: return "failed";
  }
  return "?";
}

const char* CallName(uint32_t op) { return op < kOpCount ? kOpNames[op] : "?"; }

std::string Json(const std::string& s) { return TraceJsonString(s); }

std::string Micros(int64_t ns) {
  char buf[48];
  snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ns) / 1000.0);
  return buf;
}

// The attach's measurement of the worker's clock (worker_clock.h).
std::mutex g_attach_mu;
ClockPoint g_attach_clock;  // REQUIRES g_attach_mu
pid_t g_attach_pid = 0;     // the process it was measured in; REQUIRES g_attach_mu

// Writes text to <folder>/<name> whole (a temporary file, then rename), in a folder this user
// owns that no one else may write. False (logged) when it could not.
bool WriteFileInFolder(const char* folder, const std::string& name, const std::string& text) {
  const int dfd = open(folder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (dfd < 0 || fstat(dfd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 022) != 0) {
    Log(LogLevel::kWarn, "trace: %s is not this user's own folder; this process's timeline is lost", folder);
    if (dfd >= 0) close(dfd);
    return false;
  }
  const std::string tmp = "." + name + ".tmp";
  const int fd = openat(dfd, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = fd >= 0;
  for (size_t off = 0; ok && off < text.size();) {
    const ssize_t n = write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ok = false;
    else off += static_cast<size_t>(n);
  }
  if (fd >= 0 && close(fd) != 0) ok = false;
  if (!ok || renameat(dfd, tmp.c_str(), dfd, name.c_str()) != 0) {
    Log(LogLevel::kWarn, "trace: writing %s/%s failed; this process's timeline is lost", folder, name.c_str());
    unlinkat(dfd, tmp.c_str(), 0);
    close(dfd);
    return false;
  }
  close(dfd);
  return true;
}

std::string Comm() {
  char comm[64] = "process";
  if (int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC); fd >= 0) {
    const ssize_t n = read(fd, comm, sizeof comm - 1);
    comm[n > 0 ? n : 0] = '\0';
    if (char* nl = strchr(comm, '\n')) *nl = '\0';
    close(fd);
  }
  return comm;
}

// At exit: the worker's part and served requests, then both parts (client_trace.h).
void WriteTrace() {
  if (!g_on.exchange(false)) return;  // this process's own calls from here on are not recorded
  trace::detail::g_local_word.store(0, std::memory_order_relaxed);
  const int pid = static_cast<int>(getpid());
  const uint64_t next = g_next.load(std::memory_order_acquire);
  uint64_t first = g_base;
  uint64_t dropped = 0;
  if (next - first > g_mask + 1) {
    dropped = next - first - (g_mask + 1);
    first = next - (g_mask + 1);
  }
  std::vector<Record> calls;
  calls.reserve(next - first);
  for (uint64_t i = first; i < next; ++i) {
    Slot& slot = g_ring[i & g_mask];
    if (slot.seq.load(std::memory_order_acquire) != i + 1) {
      ++dropped;
      continue;
    }
    const Record r = slot.r;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.seq.load(std::memory_order_relaxed) != i + 1) {
      ++dropped;
      continue;
    }
    calls.push_back(r);
  }
  if (calls.empty()) return;

  // The worker's side: its clock, then its part and the requests it served.
  ClockPoint last;
  ClockLine clock;
  std::vector<ServeRecord> served;
  std::string worker_part;
  uint64_t served_dropped = 0;
  std::string why_no_worker = "this process held no worker";
  CUresult failed = CUDA_SUCCESS;
  if (MeasureClock(&MonotonicNs, &last, &failed)) {
    std::unique_lock<std::mutex> lock(g_attach_mu);
    const ClockPoint attached = g_attach_pid == getpid() ? g_attach_clock : ClockPoint{};
    lock.unlock();
    clock = LineThrough(attached, last);
    std::vector<uint8_t> reply;
    const CUresult r = TraceExchange(kOpTraceFetch, &reply);
    Reader in(reply.data(), reply.size());
    int32_t status = -1;
    if (r != CUDA_SUCCESS || !in.Get(&status) || status != CUDA_SUCCESS ||
        !DecodeTraceFetchReply(&in, &served_dropped, &served, &worker_part)) {
      why_no_worker = "the worker's timeline could not be fetched";
      worker_part.clear();
      served.clear();
    }
  } else if (failed != CUDA_ERROR_NOT_INITIALIZED) {
    why_no_worker = "the worker answered no clock exchange (its connection failed or it records nothing)";
  }
  TracePartHeader worker;
  size_t worker_body = 0;
  const bool worker_ok = ParseTracePartHead(worker_part, &worker, &worker_body);
  if (!worker_part.empty() && !worker_ok) {
    Log(LogLevel::kWarn, "trace: the worker's timeline part is malformed; only the client's side is written");
    worker_part.clear();
    served.clear();
  }
  std::sort(served.begin(), served.end(),
            [](const ServeRecord& a, const ServeRecord& b) { return a.seq < b.seq; });
  auto serve_of = [&](uint32_t seq) -> const ServeRecord* {
    if (seq == 0) return nullptr;
    auto it = std::lower_bound(served.begin(), served.end(), seq,
                               [](const ServeRecord& r, uint32_t s) { return r.seq < s; });
    return it != served.end() && it->seq == seq ? &*it : nullptr;
  };
  // Flow ids: unique in a merged file of several client processes.
  auto flow_id = [&](uint32_t seq) { return std::to_string((static_cast<uint64_t>(pid) << 32) | seq); };

  // The client's part.
  std::string out = TracePartHead(TracePartHeader{
      .pid = pid,
      .started_mono_ns = g_started_mono,
      .started_unix_ns = g_started_unix,
      .dropped = static_cast<int64_t>(dropped),
      .slice_json = worker_ok ? worker.slice_json : "\"\"",
      .note_json = Json(worker_ok ? "none: a remote client; its GPU work is the worker's (pid " +
                                        std::to_string(worker.pid) + ")"
                                  : "none: a remote client; " + why_no_worker)});
  std::string worker_name = worker_ok ? "worker pid " + std::to_string(worker.pid) : "no worker";
  out += "M {\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(pid) +
         ",\"args\":{\"name\":" + Json(Comm() + " (remote client, " + worker_name + ")") + "}}\n";
  std::vector<uint32_t> tids;
  for (const Record& c : calls) {
    const std::string head = ",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(c.tid);
    if (c.mode == kNvtxRange || c.mode == kNvtxMark) {
      out += "E " + std::to_string(c.start) + " " + (c.mode == kNvtxRange ? std::to_string(c.end - c.start) : "-1") +
             (c.mode == kNvtxRange ? " \"ph\":\"X\"" : " \"ph\":\"i\",\"s\":\"t\"") +
             ",\"cat\":\"nvtx\",\"name\":" + Json(NameOf(c.op)) + head + "\n";
      continue;
    }
    const ServeRecord* s = serve_of(c.wire_seq);
    std::string args = "\"mode\":" + Json(ModeName(c.mode)) + ",\"lane\":" + std::to_string(c.lane);
    if (c.wire_seq != 0) args += ",\"seq\":" + std::to_string(c.wire_seq);
    if (s != nullptr) {
      // The worker's execution on the client's clock, clamped into the call's span (it lies
      // within it up to the alignment's uncertainty).
      const int64_t serve_start = clock.Convert(s->start), serve_end = clock.Convert(s->end);
      args += ",\"worker_start_us\":" + Micros(serve_start - g_started_mono) +
              ",\"worker_us\":" + Micros(s->end - s->start);
      if (c.mode == static_cast<uint8_t>(CallMode::kRoundTrip)) {
        const int64_t in_start = std::clamp(serve_start, c.start, c.end);
        const int64_t in_end = std::clamp(serve_end, in_start, c.end);
        args += ",\"network_queue_us\":" + Micros((c.end - c.start) - (in_end - in_start));
        out += "E " + std::to_string(c.start) + " " + std::to_string(in_start - c.start) +
               " \"ph\":\"X\",\"cat\":\"network\",\"name\":\"request: network + queue\"" + head + "\n";
        out += "E " + std::to_string(in_end) + " " + std::to_string(c.end - in_end) +
               " \"ph\":\"X\",\"cat\":\"network\",\"name\":\"reply: network\"" + head + "\n";
      } else {
        args += ",\"queued_us\":" + Micros(serve_start - c.start);
      }
      out += "E " + std::to_string(c.start) + " -1 \"ph\":\"s\",\"cat\":\"remote\",\"name\":\"remote call\",\"id\":" +
             flow_id(c.wire_seq) + head + "\n";
    }
    out += "E " + std::to_string(c.start) + " " + std::to_string(c.end - c.start) +
           " \"ph\":\"X\",\"cat\":\"remote\",\"name\":" + Json(CallName(c.op)) + head + ",\"args\":{" + args + "}\n";
  }
  bool ok = WriteFileInFolder(g_folder, std::to_string(pid) + ".part", out);

  // The worker's part: its clock line, then the requests it served (linked to the calls).
  if (worker_ok) {
    TracePartHeader worker_head = worker;
    worker_head.dropped += static_cast<int64_t>(served_dropped);
    std::string w = TracePartHead(worker_head);
    w += TracePartClockLine(TracePartClock{.offset_ns = clock.offset, .uncertainty_ns = clock.uncertainty,
                                           .reference_ns = clock.reference, .drift_ppb = clock.drift_ppb});
    w.append(worker_part, worker_body, std::string::npos);
    std::vector<std::pair<uint32_t, uint32_t>> lanes;  // (tid, lane) named once each
    std::vector<const Record*> by_seq(served.size(), nullptr);
    for (const Record& c : calls) {
      if (const ServeRecord* s = serve_of(c.wire_seq)) by_seq[static_cast<size_t>(s - served.data())] = &c;
    }
    for (size_t k = 0; k < served.size(); ++k) {
      const ServeRecord& s = served[k];
      const std::string head = ",\"pid\":" + std::to_string(worker.pid) + ",\"tid\":" + std::to_string(s.tid);
      if (std::find(lanes.begin(), lanes.end(), std::make_pair(s.tid, s.lane)) == lanes.end()) {
        lanes.emplace_back(s.tid, s.lane);
        w += "M {\"ph\":\"M\",\"name\":\"thread_name\"" + head + ",\"args\":{\"name\":\"serving lane " +
             std::to_string(s.lane) + "\"}}\n";
      }
      std::string args = "\"seq\":" + std::to_string(s.seq) + ",\"lane\":" + std::to_string(s.lane);
      if (by_seq[k] != nullptr) {
        args += ",\"client_pid\":" + std::to_string(pid) + ",\"client_tid\":" + std::to_string(by_seq[k]->tid);
        w += "E " + std::to_string(s.start) + " -1 \"ph\":\"f\",\"bp\":\"e\",\"cat\":\"remote\",\"name\":\"remote call\"," +
             "\"id\":" + flow_id(s.seq) + head + "\n";
      }
      w += "E " + std::to_string(s.start) + " " + std::to_string(s.end - s.start) +
           " \"ph\":\"X\",\"cat\":\"remote\",\"name\":" + Json(std::string("serve ") + CallName(s.op)) + head +
           ",\"args\":{" + args + "}\n";
    }
    ok = WriteFileInFolder(g_folder, std::to_string(pid) + "-worker-" + std::to_string(worker.pid) + ".part", w) && ok;
  }
  Log(ok ? LogLevel::kInfo : LogLevel::kWarn,
      "trace: wrote the client's timeline (%zu events) and %s into %s; clock offset %lld ns +- %lld ns, "
      "drift %.1f ppb",
      calls.size(),
      worker_ok ? ("the worker's (" + std::to_string(served.size()) + " served requests)").c_str()
                : why_no_worker.c_str(),
      g_folder, static_cast<long long>(clock.offset), static_cast<long long>(clock.uncertainty), clock.drift_ppb);
}

void AfterForkInChild() {
  g_base = g_next.load(std::memory_order_relaxed);
  g_started_mono = MonotonicNs();
  g_started_unix = UnixNs();
}

uint64_t RingCapacity() {
  const char* v = OptionValue(Option::TraceEvents);
  char* end = nullptr;
  unsigned long long n = strtoull(v, &end, 10);
  if (end == v || *end != '\0' || n < 1024 || n > (1ull << 24)) n = 262144;
  uint64_t cap = 1024;
  while (cap < n) cap <<= 1;
  return cap;
}

// Turns recording on when GSLICE_TRACE names a folder (before the program's first call).
__attribute__((constructor)) void StartClientTrace() {
  const char* folder = OptionValue(Option::Trace);
  if (folder[0] == '\0') return;
  shim::InitLog();
  if (folder[0] != '/' || strlen(folder) >= sizeof g_folder) {
    Log(LogLevel::kWarn, "GSLICE_TRACE=%s: not an absolute folder path; not recording", folder);
    return;
  }
  const uint64_t cap = RingCapacity();
  void* ring = mmap(nullptr, cap * sizeof(Slot), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ring == MAP_FAILED) {
    Log(LogLevel::kWarn, "trace: no memory for the ring (%llu bytes); not recording",
        static_cast<unsigned long long>(cap * sizeof(Slot)));
    return;
  }
  snprintf(g_folder, sizeof g_folder, "%s", folder);
  g_ring = static_cast<Slot*>(ring);
  g_mask = cap - 1;
  g_started_mono = MonotonicNs();
  g_started_unix = UnixNs();
  pthread_atfork(nullptr, nullptr, AfterForkInChild);
  atexit(WriteTrace);
  g_on.store(true, std::memory_order_release);
  // The program's NVTX ranges, through NVTX's injection (interpose/src/trace_nvtx.cc).
  trace::detail::g_local_word.store(1, std::memory_order_relaxed);
  trace::detail::g_flag.store(&trace::detail::g_local_word, std::memory_order_release);
  trace::detail::g_ready.store(true, std::memory_order_release);
  trace::OfferNvtxInjection();
}

}  // namespace

void ClientTraceAttached() {
  ClockPoint point;
  if (MeasureClock(&MonotonicNs, &point)) {
    std::lock_guard<std::mutex> lock(g_attach_mu);
    g_attach_clock = point;
    g_attach_pid = getpid();
  }
}

void RecordCall(uint32_t op, CallMode mode, uint32_t seq, uint32_t lane, int64_t start_ns, int64_t end_ns) {
  Push(Record{.start = start_ns, .end = end_ns, .op = op, .wire_seq = seq, .tid = ThreadId(),
              .lane = static_cast<uint16_t>(lane), .mode = static_cast<uint8_t>(mode)});
}

}  // namespace gslice::remote

// The recorder interface trace_nvtx.cc records NVTX through (interpose/src/trace_recorder.h),
// backed by the client's ring: on while the client records (GSLICE_TRACE).
namespace gslice::trace {

namespace detail {
namespace {
const std::atomic<uint32_t> kOffWord{0};
}  // namespace
std::atomic<uint32_t> g_local_word{0};
std::atomic<const std::atomic<uint32_t>*> g_flag{&kOffWord};
std::atomic<bool> g_ready{false};
bool Start() { return g_ready.load(std::memory_order_acquire); }
}  // namespace detail

int64_t NowNs() { return MonotonicNs(); }

uint32_t ThreadId() { return remote::ThreadId(); }

void NvtxRange(const char* message, int64_t start_ns, int64_t end_ns, uint32_t tid) {
  remote::Push(remote::Record{.start = start_ns, .end = end_ns, .op = remote::NameId(message), .wire_seq = 0,
                              .tid = tid, .lane = 0, .mode = remote::kNvtxRange});
}

void NvtxMark(const char* message, int64_t at_ns) {
  remote::Push(remote::Record{.start = at_ns, .end = at_ns, .op = remote::NameId(message), .wire_seq = 0,
                              .tid = ThreadId(), .lane = 0, .mode = remote::kNvtxMark});
}

}  // namespace gslice::trace
