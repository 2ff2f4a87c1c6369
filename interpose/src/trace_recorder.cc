#include "trace_recorder.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <new>

#include "cuda_exports.h"
#include "gslice/clock.h"
#include "gslice/options.h"
#include "gslice/quiet_thread.h"
#include "gslice/trace_format.h"
#include "launch_gate.h"
#include "log.h"
#include "resume_gate.h"
#include "slice_account.h"
#include "trace_cupti.h"

namespace gslice::trace {

using shim::Log;
using shim::LogLevel;

namespace detail {
namespace {
const std::atomic<uint32_t> kOffWord{0};
}  // namespace
std::atomic<uint32_t> g_local_word{0};  // GSLICE_TRACE: 1 from Init to exit
std::atomic<const std::atomic<uint32_t>*> g_flag{&kOffWord};
std::atomic<bool> g_ready{false};
}  // namespace detail

namespace {

namespace ex = cuda_exports;

// ---- records -------------------------------------------------------------------------------

enum class Type : uint8_t { kApi, kGpu, kNvtxRange, kNvtxMark, kGate, kSuspend, kUtil, kMemory };

// One event. A writer claims index i (fetch_add), fills the record and publishes seq = i + 1;
// a reader takes a record only when seq reads i + 1 before and after copying it (seqlock).
struct alignas(64) Record {
  std::atomic<uint64_t> seq;
  int64_t start;
  int64_t end;     // -1: an instant
  uint64_t bytes;  // api/gpu: bytes; counters: the value
  uint64_t stream; // api: stream id + 1 (0: none); gpu: the stream id
  uint32_t tid;
  uint32_t name;   // interned
  uint32_t aux;    // api: the kernel's name; gpu: the device
  uint8_t type;
  uint8_t kind;    // ApiKind / GpuKind
};
static_assert(sizeof(Record) == 64);

Record* g_ring = nullptr;
uint64_t g_mask = 0;
std::atomic<uint64_t> g_next{0};
std::atomic<uint64_t> g_base{0};  // the first index of the current recording
std::atomic<uint64_t> g_cupti_dropped{0};

void Push(Type type, uint8_t kind, int64_t start, int64_t end, uint32_t tid, uint32_t name, uint32_t aux,
          uint64_t bytes, uint64_t stream) {
  const uint64_t i = g_next.fetch_add(1, std::memory_order_relaxed);
  Record& r = g_ring[i & g_mask];
  r.seq.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  r.start = start;
  r.end = end;
  r.bytes = bytes;
  r.stream = stream;
  r.tid = tid;
  r.name = name;
  r.aux = aux;
  r.type = static_cast<uint8_t>(type);
  r.kind = kind;
  r.seq.store(i + 1, std::memory_order_release);
}

// ---- interned strings ----------------------------------------------------------------------

constexpr size_t kArenaBytes = 8u << 20;
constexpr uint32_t kTableSize = 1u << 16;  // power of two
constexpr size_t kMaxString = 1024;
char* g_arena = nullptr;
size_t g_arena_used = 1;  // offset 0 is "no string"
uint32_t* g_table = nullptr;  // offset of the string, 0 empty
std::mutex g_intern_mu;

uint64_t Hash(const char* s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(s[i])) * 1099511628211ull;
  return h;
}

const char* Str(uint32_t id) { return id == 0 || g_arena == nullptr ? "" : g_arena + id; }

// ---- the process -----------------------------------------------------------------------------

void* const* g_real = nullptr;
shim::SliceAccount* g_account = nullptr;
const char* g_real_driver = nullptr;
bool g_env_mode = false;
char g_folder[1024];  // GSLICE_TRACE
std::mutex g_start_mu;
std::atomic<bool> g_start_failed{false};
int64_t g_started_mono = 0;
int64_t g_started_unix = 0;
char g_cupti_note[256] = "\"not started\"";

// ---- writing a part -------------------------------------------------------------------------

// A buffered writer to a file descriptor (no allocation, no C++ streams).
struct Out {
  int fd;
  char buf[1 << 16];
  size_t used = 0;
  bool failed = false;
  void Flush() {
    size_t off = 0;
    while (off < used && !failed) {
      const ssize_t n = write(fd, buf + off, used - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) failed = true;
      else off += static_cast<size_t>(n);
    }
    used = 0;
  }
  void Put(const char* s, size_t n) {
    while (n > 0) {
      if (used == sizeof buf) Flush();
      const size_t k = n < sizeof buf - used ? n : sizeof buf - used;
      memcpy(buf + used, s, k);
      used += k;
      s += k;
      n -= k;
    }
  }
  void Put(const char* s) { Put(s, strlen(s)); }
  void Printf(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0) Put(line, static_cast<size_t>(n) < sizeof line ? static_cast<size_t>(n) : sizeof line - 1);
  }
  // A JSON string literal (the part format's escaping, gslice/trace_format.h).
  void Json(const char* s) {
    PutTraceJsonString(s, [this](const char* p, size_t n) { Put(p, n); });
  }
};

void WriteRecord(Out& o, const Record& r, int pid) {
  const auto type = static_cast<Type>(r.type);
  o.Printf("E %lld %lld ", static_cast<long long>(r.start), static_cast<long long>(r.end < 0 ? -1 : r.end - r.start));
  switch (type) {
    case Type::kApi: {
      o.Put("\"ph\":\"X\",\"cat\":\"api\",\"name\":");
      o.Json(Str(r.name));
      o.Printf(",\"pid\":%d,\"tid\":%u,\"args\":{", pid, r.tid);
      bool comma = false;
      if (r.aux != 0) {
        o.Put("\"kernel\":");
        o.Json(Str(r.aux));
        comma = true;
      }
      if (r.bytes != 0 || static_cast<ApiKind>(r.kind) == ApiKind::kCopy ||
          static_cast<ApiKind>(r.kind) == ApiKind::kAlloc) {
        o.Printf("%s\"bytes\":%llu", comma ? "," : "", static_cast<unsigned long long>(r.bytes));
        comma = true;
      }
      if (r.stream != 0) o.Printf("%s\"stream\":%llu", comma ? "," : "", static_cast<unsigned long long>(r.stream - 1));
      o.Put("}");
      break;
    }
    case Type::kGpu: {
      const auto kind = static_cast<GpuKind>(r.kind);
      o.Printf("\"ph\":\"X\",\"cat\":\"%s\",\"name\":",
               kind == GpuKind::kKernel ? "kernel" : kind == GpuKind::kMemcpy ? "memcpy" : "memset");
      o.Json(Str(r.name));
      o.Printf(",\"pid\":%d,\"tid\":%lld,\"args\":{\"stream\":%llu,\"device\":%u", pid,
               static_cast<long long>(kTraceStreamTidBase + static_cast<int64_t>(r.stream)),
               static_cast<unsigned long long>(r.stream), r.aux);
      if (kind != GpuKind::kKernel) o.Printf(",\"bytes\":%llu", static_cast<unsigned long long>(r.bytes));
      o.Put("}");
      break;
    }
    case Type::kNvtxRange:
      o.Put("\"ph\":\"X\",\"cat\":\"nvtx\",\"name\":");
      o.Json(Str(r.name));
      o.Printf(",\"pid\":%d,\"tid\":%u", pid, r.tid);
      break;
    case Type::kNvtxMark:
      o.Put("\"ph\":\"i\",\"s\":\"t\",\"cat\":\"nvtx\",\"name\":");
      o.Json(Str(r.name));
      o.Printf(",\"pid\":%d,\"tid\":%u", pid, r.tid);
      break;
    case Type::kGate:
      o.Printf("\"ph\":\"X\",\"cat\":\"gate\",\"name\":\"compute gate wait\",\"pid\":%d,\"tid\":%u", pid, r.tid);
      break;
    case Type::kSuspend:
      o.Printf("\"ph\":\"X\",\"cat\":\"suspend\",\"name\":\"suspended\",\"pid\":%d,\"tid\":%u,\"args\":{\"call\":", pid,
               r.tid);
      o.Json(Str(r.name));
      o.Put("}");
      break;
    case Type::kUtil:
      o.Printf("\"ph\":\"C\",\"cat\":\"counter\",\"name\":\"GPU utilisation\",\"pid\":%d,\"args\":{\"percent\":%.1f}",
               pid, static_cast<double>(r.bytes) / 10.0);
      break;
    case Type::kMemory:
      o.Printf("\"ph\":\"C\",\"cat\":\"counter\",\"name\":\"slice memory\",\"pid\":%d,\"args\":{\"bytes\":%llu}", pid,
               static_cast<unsigned long long>(r.bytes));
      break;
  }
  o.Put("\n", 1);
}

// Writes the records of the current recording to <folder>/<pid>.part (O_EXCL, not through a
// symlink, in a folder this user owns). Returns false (logged) when it could not.
bool WritePart(const char* folder) {
  const int dfd = open(folder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) {
    Log(LogLevel::kWarn, "trace: %s: %s; this process's timeline is lost", folder, strerror(errno));
    return false;
  }
  struct stat st;
  if (fstat(dfd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 022) != 0) {
    Log(LogLevel::kWarn, "trace: %s is not this user's own folder; this process's timeline is not written", folder);
    close(dfd);
    return false;
  }
  const int pid = static_cast<int>(getpid());
  char name[64], tmp[64];
  snprintf(name, sizeof name, "%d.part", pid);
  snprintf(tmp, sizeof tmp, ".%d.part.tmp", pid);
  const int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    Log(LogLevel::kWarn, "trace: %s/%s: %s; this process's timeline is lost", folder, tmp, strerror(errno));
    close(dfd);
    return false;
  }
  static Out o;  // 64 KiB: not on the application's stack
  o.fd = fd;
  o.used = 0;
  o.failed = false;

  const uint64_t next = g_next.load(std::memory_order_acquire);
  uint64_t first = g_base.load(std::memory_order_relaxed);
  uint64_t dropped = g_cupti_dropped.load(std::memory_order_relaxed);
  if (next - first > g_mask + 1) {
    dropped += next - first - (g_mask + 1);
    first = next - (g_mask + 1);
  }
  // Streams seen (GPU records), for their thread_name metadata.
  constexpr int kMaxStreams = 256;
  uint64_t streams[kMaxStreams];
  int stream_count = 0;
  for (uint64_t i = first; i < next; ++i) {
    const Record& r = g_ring[i & g_mask];
    if (r.seq.load(std::memory_order_acquire) != i + 1 || r.type != static_cast<uint8_t>(Type::kGpu)) continue;
    bool seen = false;
    for (int k = 0; k < stream_count && !seen; ++k) seen = streams[k] == r.stream;
    if (!seen && stream_count < kMaxStreams) streams[stream_count++] = r.stream;
  }

  char comm[64] = "process";
  if (int cfd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC); cfd >= 0) {
    const ssize_t n = read(cfd, comm, sizeof comm - 1);
    comm[n > 0 ? n : 0] = '\0';
    if (char* nl = strchr(comm, '\n')) *nl = '\0';
    close(cfd);
  }
  const char* slice = g_account != nullptr ? g_account->slice_name() : "";
  char pname[160];
  snprintf(pname, sizeof pname, "%s (slice %s)", comm, slice);

  // Records still being written (or overwritten) now are left out and counted as dropped.
  uint64_t torn = 0;
  for (uint64_t i = first; i < next; ++i) {
    if (g_ring[i & g_mask].seq.load(std::memory_order_acquire) != i + 1) ++torn;
  }
  o.Put(TracePartHead(TracePartHeader{.pid = pid,
                                      .started_mono_ns = g_started_mono,
                                      .started_unix_ns = g_started_unix,
                                      .dropped = static_cast<int64_t>(dropped + torn),
                                      .slice_json = TraceJsonString(slice),
                                      .note_json = g_cupti_note})
            .c_str());
  o.Printf("M {\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":", pid);
  o.Json(pname);
  o.Put("}}\n");
  for (int k = 0; k < stream_count; ++k) {
    o.Printf("M {\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%lld,\"args\":{\"name\":\"stream %llu\"}}\n",
             pid, static_cast<long long>(kTraceStreamTidBase + static_cast<int64_t>(streams[k])),
             static_cast<unsigned long long>(streams[k]));
  }
  for (uint64_t i = first; i < next; ++i) {
    Record& slot = g_ring[i & g_mask];
    if (slot.seq.load(std::memory_order_acquire) != i + 1) continue;
    Record r;
    r.start = slot.start;
    r.end = slot.end;
    r.bytes = slot.bytes;
    r.stream = slot.stream;
    r.tid = slot.tid;
    r.name = slot.name;
    r.aux = slot.aux;
    r.type = slot.type;
    r.kind = slot.kind;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.seq.load(std::memory_order_relaxed) != i + 1) continue;
    WriteRecord(o, r, pid);
  }
  o.Flush();
  const bool ok = !o.failed && fsync(fd) == 0;
  close(fd);
  if (!ok || renameat(dfd, tmp, dfd, name) != 0) {
    Log(LogLevel::kWarn, "trace: writing %s/%s failed; this process's timeline is lost", folder, name);
    unlinkat(dfd, tmp, 0);
    close(dfd);
    return false;
  }
  close(dfd);
  Log(LogLevel::kInfo, "trace: wrote %s/%s (%llu events, %llu dropped)", folder, name,
      static_cast<unsigned long long>(next - first - torn), static_cast<unsigned long long>(dropped + torn));
  return true;
}

// Ends the current recording: GPU records in, part written (when anything was recorded), ring
// reset for the next one. At most one at a time (the recorder's thread, or exit).
std::mutex g_finish_mu;
bool g_forked_child = false;  // CUPTI's buffers here are the parent's: never flushed
// Returns whether a part was written.
bool FinishLocked(const char* folder) {
  if (!g_forked_child) cupti::Flush();
  bool written = false;
  if (g_next.load(std::memory_order_acquire) != g_base.load(std::memory_order_relaxed)) written = WritePart(folder);
  g_base.store(g_next.load(std::memory_order_acquire), std::memory_order_release);
  g_cupti_dropped.store(0, std::memory_order_relaxed);
  g_started_mono = NowNs();
  g_started_unix = UnixNs();
  return written;
}

void Finish(const char* folder) {
  std::lock_guard<std::mutex> lock(g_finish_mu);
  FinishLocked(folder);
}

// The folder of gsliced's request: made beside the ledger it wrote the request in.
void RequestFolder(uint32_t request, char* out, size_t n) {
  snprintf(out, n, "%s", TraceRequestFolder(g_account->ledger_path(), g_account->slice_index(), request).c_str());
}

// ---- the recorder's thread ------------------------------------------------------------------
//
// Samples the counters every 100 ms while recording and, for gsliced's requests, watches the
// slice's request word: once the request it recorded for ends, writes the part into its folder.

constexpr int64_t kSampleNs = 100'000'000;
std::atomic<uint32_t> g_request{0};  // the request being recorded (written by the thread)

void SampleCounters(int64_t now, uint64_t* last_busy, int64_t* last_now) {
  if (compute::LaunchGateActive()) {
    const uint64_t busy = compute::MeasuredBusyNsAllDevices();
    if (*last_now != 0 && now > *last_now) {
      int64_t permille = static_cast<int64_t>(busy - *last_busy) * 1000 / (now - *last_now);
      if (permille < 0) permille = 0;
      if (permille > 1000) permille = 1000;
      Push(Type::kUtil, 0, now, -1, 0, 0, 0, static_cast<uint64_t>(permille), 0);
    }
    *last_busy = busy;
    *last_now = now;
  }
  if (g_account != nullptr && g_account->active()) {
    int64_t total = 0;
    for (int gpu = 0; gpu < kLedgerMaxGpus; ++gpu) {
      const int64_t u = g_account->Usage(gpu);
      if (u > 0) total += u;
    }
    Push(Type::kMemory, 0, now, -1, 0, 0, 0, static_cast<uint64_t>(total), 0);
  }
}

void* RecorderThread(void*) {
  uint64_t last_busy = 0;
  int64_t last_now = 0;
  for (;;) {
    const timespec nap{0, kSampleNs};
    nanosleep(&nap, nullptr);
    const uint32_t word = detail::g_flag.load(std::memory_order_relaxed)->load(std::memory_order_relaxed);
    const uint32_t request = g_request.load(std::memory_order_relaxed);
    if (!g_env_mode && word != request) {
      if (request != 0 && g_account != nullptr) {
        char folder[1024];
        RequestFolder(request, folder, sizeof folder);
        Finish(folder);
        if (word == 0) cupti::Stop();
      }
      g_request.store(word, std::memory_order_relaxed);
      if (word != 0) cupti::Start(g_real_driver, g_cupti_note, sizeof g_cupti_note);
      last_now = 0;
    }
    if (word != 0) SampleCounters(NowNs(), &last_busy, &last_now);
  }
  return nullptr;
}

// At exit: the whole run's part (GSLICE_TRACE), or, during a request of gsliced, the part so
// far (unless the recorder's thread is writing it right now).
void AtExit() {
  if (!detail::g_ready.load(std::memory_order_acquire)) return;
  if (g_env_mode) {
    detail::g_local_word.store(0, std::memory_order_relaxed);
    Finish(g_folder);
    return;
  }
  const uint32_t request = g_request.load(std::memory_order_relaxed);
  if (request == 0 || g_account == nullptr || !On()) return;
  std::unique_lock<std::mutex> lock(g_finish_mu, std::try_to_lock);
  if (!lock.owns_lock()) return;
  char folder[1024];
  RequestFolder(request, folder, sizeof folder);
  FinishLocked(folder);
}

// In a child after fork(): what the parent recorded is the parent's (its part has it); the
// child starts empty, and without the parent's thread (a child that execs starts afresh).
void AfterForkInChild() {
  g_base.store(g_next.load(std::memory_order_relaxed), std::memory_order_relaxed);
  g_cupti_dropped.store(0, std::memory_order_relaxed);
  g_started_mono = NowNs();
  g_started_unix = UnixNs();
  g_forked_child = true;
  snprintf(g_cupti_note, sizeof g_cupti_note, "\"unavailable: a forked child (no CUDA after fork)\"");
  // Locks another thread of the parent held at the fork stay held in the child: fresh ones.
  new (&g_finish_mu) std::mutex();
  new (&g_intern_mu) std::mutex();
}

uint64_t RingCapacity() {
  const char* v = OptionValue(Option::TraceEvents);
  char* end = nullptr;
  unsigned long long n = strtoull(v, &end, 10);
  if (end == v || *end != '\0' || n < 1024 || n > (1ull << 24)) {
    if (OptionIsSet(Option::TraceEvents)) {
      Log(LogLevel::kWarn, "GSLICE_TRACE_EVENTS=%s: not a count from 1024 to 16777216; using 262144", v);
    }
    n = 262144;
  }
  uint64_t cap = 1024;
  while (cap < n) cap <<= 1;
  return cap;
}

// GSLICE_TRACE_CLOCK_SHIFT=NS[,PPM] (tests only): NS added to every time this process records,
// and the clock running PPM parts per million fast from Init on, so that a test can give a
// remote worker a clock of its own. Set once, at Init, before recording starts.
int64_t g_clock_shift = 0;
int64_t g_clock_ppm = 0;
int64_t g_clock_base = 0;

void ReadClockShift() {
  const char* v = OptionValue(Option::TraceClockShift);
  if (v[0] == '\0') return;
  char* end = nullptr;
  const long long shift = strtoll(v, &end, 10);
  long long ppm = 0;
  if (end != v && *end == ',') {
    const char* rate = end + 1;
    ppm = strtoll(rate, &end, 10);
    if (end == rate || ppm < -100000 || ppm > 100000) end = const_cast<char*>(rate);
  }
  if (end == v || *end != '\0') {
    Log(LogLevel::kWarn, "GSLICE_TRACE_CLOCK_SHIFT=%s: not NS or NS,PPM; ignored", v);
    return;
  }
  g_clock_base = MonotonicNs();
  g_clock_shift = shift;
  g_clock_ppm = ppm;
}

}  // namespace

// ---- public ---------------------------------------------------------------------------------

int64_t NowNs() {
  const int64_t mono = MonotonicNs();
  if (g_clock_ppm == 0) return mono + g_clock_shift;
  return mono + g_clock_shift + (mono - g_clock_base) * g_clock_ppm / 1'000'000;
}

uint32_t ThreadId() {
  static thread_local uint32_t tid = 0;
  if (tid == 0) tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return tid;
}

uint32_t Intern(const char* s) {
  if (s == nullptr || g_arena == nullptr) return 0;
  size_t n = strnlen(s, kMaxString);
  const uint64_t h = Hash(s, n);
  std::lock_guard<std::mutex> lock(g_intern_mu);
  for (uint32_t probe = 0; probe < kTableSize; ++probe) {
    uint32_t& e = g_table[(h + probe) & (kTableSize - 1)];
    if (e == 0) {
      if (g_arena_used + n + 1 > kArenaBytes) return 0;
      memcpy(g_arena + g_arena_used, s, n);
      g_arena[g_arena_used + n] = '\0';
      e = static_cast<uint32_t>(g_arena_used);
      g_arena_used += n + 1;
      return e;
    }
    if (strncmp(g_arena + e, s, n) == 0 && g_arena[e + n] == '\0') return e;
  }
  return 0;
}

namespace detail {

bool Start() {
  if (g_start_failed.load(std::memory_order_relaxed)) return false;
  // A driver call made by CUPTI while it is being started on this thread records nothing.
  static thread_local bool starting = false;
  if (starting) return false;
  std::lock_guard<std::mutex> lock(g_start_mu);
  if (g_ready.load(std::memory_order_acquire)) return true;
  starting = true;
  const uint64_t cap = RingCapacity();
  const size_t ring_bytes = cap * sizeof(Record);
  const size_t arena_bytes = kArenaBytes + kTableSize * sizeof(uint32_t);
  void* ring = mmap(nullptr, ring_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* arena = mmap(nullptr, arena_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ring == MAP_FAILED || arena == MAP_FAILED) {
    Log(LogLevel::kWarn, "trace: no memory for the ring (%zu bytes); not recording", ring_bytes);
    if (ring != MAP_FAILED) munmap(ring, ring_bytes);
    if (arena != MAP_FAILED) munmap(arena, arena_bytes);
    g_start_failed.store(true, std::memory_order_relaxed);
    starting = false;
    return false;
  }
  g_ring = static_cast<Record*>(ring);
  g_mask = cap - 1;
  g_arena = static_cast<char*>(arena);
  g_table = reinterpret_cast<uint32_t*>(g_arena + kArenaBytes);
  g_started_mono = NowNs();
  g_started_unix = UnixNs();
  g_ready.store(true, std::memory_order_release);
  cupti::Start(g_real_driver, g_cupti_note, sizeof g_cupti_note);
  // The thread's signals stay the application's.
  const int rc = gslice::StartQuietThread(RecorderThread, nullptr);
  if (rc != 0) Log(LogLevel::kWarn, "trace: no recorder thread (%s): counters are not sampled", strerror(rc));
  atexit(AtExit);
  pthread_atfork(nullptr, nullptr, AfterForkInChild);
  Log(LogLevel::kInfo, "trace: recording (ring of %llu events)", static_cast<unsigned long long>(cap));
  starting = false;
  return true;
}

}  // namespace detail

void Init(void* const* real, const char* real_driver_path, shim::SliceAccount* account) {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  g_real = real;
  g_real_driver = real_driver_path;
  g_account = account;
  ReadClockShift();
  const char* folder = OptionValue(Option::Trace);
  if (folder[0] != '\0') {
    if (folder[0] != '/' || strlen(folder) >= sizeof g_folder) {
      Log(LogLevel::kWarn, "GSLICE_TRACE=%s: not an absolute folder path; not recording", folder);
    } else {
      snprintf(g_folder, sizeof g_folder, "%s", folder);
      g_env_mode = true;
      detail::g_local_word.store(1, std::memory_order_relaxed);
      detail::g_flag.store(&detail::g_local_word, std::memory_order_release);
      // From cuInit on, GPU activity included; NVTX ranges from the shim's load (their
      // early phase), so the part starts there.
      const bool started = detail::Start();
      const int64_t since = EndEarlyNvtx();
      if (started && since > 0 && since < g_started_mono) {
        g_started_unix -= g_started_mono - since;
        g_started_mono = since;
      }
      return;
    }
  }
  EndEarlyNvtx();  // not recording from the start: what NVTX kept early is dropped
  if (account != nullptr && account->active()) {
    const std::atomic<uint32_t>* word = account->TraceRequestWord();
    if (word != nullptr) detail::g_flag.store(word, std::memory_order_release);
  }
}

namespace {

// The id of a stream for "api" events, + 1 (0: unknown), through the driver (cuStreamGetId;
// the same id CUPTI reports), cached per thread for the last few streams.
// A slot of a direct-mapped cache of 2^bits entries for a pointer: a multiplicative hash of
// all its bits. The driver's handles are allocated with large, regular strides (a plain
// shift-and-mask put every function of a module in a handful of slots, so launches missed
// and looked their kernel's name up and interned it each time).
size_t CacheSlot(const void* p, unsigned bits) {
  return static_cast<size_t>((reinterpret_cast<uintptr_t>(p) * 0x9E3779B97F4A7C15ull) >> (64 - bits));
}

uint64_t StreamId(CUstream s, bool per_thread) {
  struct Entry {
    CUstream s;
    bool pt;
    bool valid;
    uint64_t id;
  };
  static thread_local Entry cache[4];
  static thread_local unsigned next = 0;
  for (const Entry& e : cache) {
    if (e.valid && e.s == s && e.pt == per_thread) return e.id;
  }
  using GetId = CUresult (*)(CUstream, unsigned long long*);
  auto fn = reinterpret_cast<GetId>(g_real[per_thread ? ex::kSlot_cuStreamGetId_ptsz : ex::kSlot_cuStreamGetId]);
  unsigned long long id = 0;
  if (fn == nullptr || fn(s, &id) != CUDA_SUCCESS) return 0;
  cache[next++ % 4] = Entry{s, per_thread, true, id + 1};
  return id + 1;  // + 1: 0 is "no stream"
}

// The kernel's name, interned, cached per thread by handle. cudart (CUDA 12+) launches library
// kernels (CUkernel handles passed as CUfunction): cuKernelGetName names those.
uint32_t KernelNameId(CUfunction f) {
  struct Entry {
    CUfunction f;
    uint32_t id;
  };
  static thread_local Entry cache[256];
  Entry& e = cache[CacheSlot(f, 8)];
  if (e.f == f && e.id != 0) return e.id;
  using GetName = CUresult (*)(const char**, CUfunction);
  using GetKernelName = CUresult (*)(const char**, CUkernel);
  auto fn = reinterpret_cast<GetName>(g_real[ex::kSlot_cuFuncGetName]);
  auto kn = reinterpret_cast<GetKernelName>(g_real[ex::kSlot_cuKernelGetName]);
  const char* name = nullptr;
  if (fn == nullptr || fn(&name, f) != CUDA_SUCCESS || name == nullptr) {
    name = nullptr;
    if (kn == nullptr || kn(&name, reinterpret_cast<CUkernel>(f)) != CUDA_SUCCESS || name == nullptr) name = "kernel";
  }
  e = Entry{f, Intern(name)};
  return e.id;
}

uint32_t StaticNameId(const char* s) {
  struct Entry {
    const char* s;
    uint32_t id;
  };
  static thread_local Entry cache[64];
  Entry& e = cache[CacheSlot(s, 6)];
  if (e.s == s && e.id != 0) return e.id;
  e = Entry{s, Intern(s)};
  return e.id;
}

}  // namespace

void Api(const ApiCall& call, int64_t start_ns, int64_t end_ns) {
  const uint32_t kernel = call.function != nullptr ? KernelNameId(call.function) : 0;
  const uint64_t stream = call.has_stream ? StreamId(call.stream, call.per_thread) : 0;
  Push(Type::kApi, static_cast<uint8_t>(call.kind), start_ns, end_ns, ThreadId(), StaticNameId(call.name), kernel,
       call.bytes, stream);
}

void GateWait(int64_t start_ns, int64_t end_ns) {
  Push(Type::kGate, 0, start_ns, end_ns, ThreadId(), 0, 0, 0, 0);
}

void Suspended(const char* call, int64_t start_ns, int64_t end_ns) {
  Push(Type::kSuspend, 0, start_ns, end_ns, ThreadId(), call != nullptr ? StaticNameId(call) : 0, 0, 0, 0);
}

void NvtxRange(const char* message, int64_t start_ns, int64_t end_ns, uint32_t tid) {
  Push(Type::kNvtxRange, 0, start_ns, end_ns, tid, Intern(message), 0, 0, 0);
}

void NvtxMark(const char* message, int64_t at_ns) {
  Push(Type::kNvtxMark, 0, at_ns, -1, ThreadId(), Intern(message), 0, 0, 0);
}

void Gpu(GpuKind kind, const char* name, uint32_t stream_id, uint32_t device, uint64_t bytes, int64_t start_ns,
         int64_t end_ns) {
  if (!detail::g_ready.load(std::memory_order_acquire)) return;
  Push(Type::kGpu, static_cast<uint8_t>(kind), start_ns, end_ns, 0, Intern(name), device, bytes, stream_id);
}

void CountCuptiDropped(uint64_t n) { g_cupti_dropped.fetch_add(n, std::memory_order_relaxed); }

}  // namespace gslice::trace

// For gslice-remoted's worker (remote/server/worker.cc), found with dlsym on the shim: the
// recorder's clock (CLOCK_MONOTONIC in ns, as every recorded time), and "write what was
// recorded so far into <folder>/<pid>.part now" (the recording goes on, empty). Returns 0 when
// a part was written, 1 when nothing was recorded, -1 when it could not be written (logged).
extern "C" __attribute__((visibility("default"))) int64_t gslice_trace_now_ns() { return gslice::trace::NowNs(); }

extern "C" __attribute__((visibility("default"))) int gslice_trace_write_part(const char* folder) {
  using namespace gslice::trace;
  if (folder == nullptr || !detail::g_ready.load(std::memory_order_acquire)) return 1;
  // CUPTI's flush reaches into the driver: a suspended process is resumed first, as for any
  // driver call (an idle worker's client fetching its timeline at exit).
  gslice::shim::ResumeGate();
  std::lock_guard<std::mutex> lock(g_finish_mu);
  if (g_next.load(std::memory_order_acquire) == g_base.load(std::memory_order_relaxed)) {
    if (!g_forked_child) cupti::Flush();
    if (g_next.load(std::memory_order_acquire) == g_base.load(std::memory_order_relaxed)) return 1;
  }
  return FinishLocked(folder) ? 0 : -1;
}
