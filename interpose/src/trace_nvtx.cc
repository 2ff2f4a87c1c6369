// NVTX ranges and marks for the timeline (trace_recorder.h), through NVTX's documented
// injection mechanism: NVTX (nvtx3, header-only, compiled into PyTorch, JAX, ...) loads the
// library NVTX_INJECTION64_PATH names on the program's first NVTX call and calls its
// InitializeInjectionNvtx2, which fills NVTX's function tables. The shim is that library: its
// constructor points NVTX_INJECTION64_PATH at itself unless the user set one, and the
// dlopen of that path returns the already loaded shim. Programs keep calling nvtxRangePushA
// (torch.cuda.nvtx.range_push) unchanged.
//
// While not recording, each NVTX call costs the program a call and two relaxed loads here.
// Push/pop ranges nest per thread (a stack of at most kMaxDepth open ranges); start/end
// ranges may end on another thread (a table of kMaxOpen open ones).
//
// Under GSLICE_TRACE the process records from its first driver call (cuInit), but programs
// open ranges before it: a `main` range around everything, a PyTorch script's range around
// `import torch` and its first tensor. From the shim's constructor to cuInit (the early
// phase) ranges are opened as if recording, so they keep their true start; ranges that end
// and marks made in that phase wait in a small buffer that cuInit hands to the recorder
// (EndEarlyNvtx). Where cuInit turns out not to record, they are dropped.
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include <atomic>
#include <mutex>

#include "gslice/options.h"
#include "log.h"
#include "trace_recorder.h"

namespace gslice::trace {

using shim::Log;
using shim::LogLevel;
namespace {

constexpr int kMaxDepth = 128;
constexpr int kMaxMessage = 256;

struct OpenRange {
  int64_t start;
  char message[kMaxMessage];
};

// ---- the early phase (before cuInit) -------------------------------------------------------

// True from the shim's constructor (BeginEarlyNvtx, GSLICE_TRACE given) until cuInit;
// g_early_since: when it began (set before g_early).
std::atomic<bool> g_early{false};
int64_t g_early_since = 0;

// Ranges that ended, and marks (end -1), during the early phase: at most kMaxEarly, in order.
constexpr int kMaxEarly = 64;
struct EarlyEvent {
  int64_t start;
  int64_t end;
  uint32_t tid;
  char message[kMaxMessage];
};
std::mutex g_early_mu;
EarlyEvent g_early_events[kMaxEarly];  // g_early_mu
int g_early_count = 0;                 // g_early_mu
uint64_t g_early_lost = 0;             // g_early_mu: did not fit

// Whether a range opened now is kept: while recording, or in the early phase.
bool Keeps() { return Recording() || g_early.load(std::memory_order_acquire); }

// A range that ended (end >= 0) or a mark (end -1): to the recorder while recording, to the
// early buffer during the early phase, else dropped.
void Emit(const char* message, int64_t start, int64_t end, uint32_t tid) {
  if (!Recording()) {
    std::lock_guard<std::mutex> lock(g_early_mu);
    if (g_early.load(std::memory_order_relaxed)) {
      if (g_early_count == kMaxEarly) {
        ++g_early_lost;
        return;
      }
      EarlyEvent& e = g_early_events[g_early_count++];
      e = {.start = start, .end = end, .tid = tid, .message = {}};
      strncpy(e.message, message, kMaxMessage - 1);
      return;
    }
    // The early phase ended while this thread waited: EndEarlyNvtx made Recording() true
    // first, or nothing records.
    if (!Recording()) return;
  }
  if (end < 0) NvtxMark(message, start);
  else NvtxRange(message, start, end, tid);
}

// This thread's push/pop stack. Ranges pushed while not kept (Keeps()) are counted (depth)
// but not kept, so that their pops match.
struct Stack {
  int depth = 0;
  bool kept[kMaxDepth];
  OpenRange ranges[kMaxDepth];
};
thread_local Stack t_stack;

// Start/end ranges: id -> open range; an end whose slot was reused is dropped.
constexpr int kMaxOpen = 1024;
struct OpenById {
  std::atomic<uint64_t> id{0};
  int64_t start;
  uint32_t tid;
  char message[kMaxMessage];
};
OpenById g_open[kMaxOpen];
std::atomic<uint64_t> g_next_id{1};

// Registered strings (nvtxDomainRegisterString): the handle is a copy of the string.
const char* Registered(nvtxStringHandle_t h) { return h == nullptr ? "" : reinterpret_cast<const char*>(h); }

void Message(const nvtxEventAttributes_t* a, char* out, size_t n) {
  out[0] = '\0';
  if (a == nullptr) return;
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
      if (a->message.ascii != nullptr) strncpy(out, a->message.ascii, n - 1);
      break;
    case NVTX_MESSAGE_TYPE_UNICODE:
      if (a->message.unicode != nullptr) {
        mbstate_t st{};
        const wchar_t* w = a->message.unicode;
        const size_t k = wcsrtombs(out, &w, n - 1, &st);
        if (k == static_cast<size_t>(-1)) strncpy(out, "(unicode)", n - 1);
        else out[k < n ? k : n - 1] = '\0';
      }
      break;
    case NVTX_MESSAGE_TYPE_REGISTERED:
      strncpy(out, Registered(a->message.registered), n - 1);
      break;
    default:
      break;
  }
  out[n - 1] = '\0';
}

void CopyMessage(const char* s, char* out, size_t n) {
  strncpy(out, s != nullptr ? s : "", n - 1);
  out[n - 1] = '\0';
}

int Push(const char* message) {
  Stack& s = t_stack;
  const int level = s.depth;
  if (s.depth < kMaxDepth) {
    const bool keep = Keeps();
    s.kept[s.depth] = keep;
    if (keep) {
      s.ranges[s.depth].start = NowNs();
      CopyMessage(message, s.ranges[s.depth].message, kMaxMessage);
    }
  }
  ++s.depth;
  return level;
}

int Pop() {
  Stack& s = t_stack;
  if (s.depth == 0) return -1;
  --s.depth;
  if (s.depth < kMaxDepth && s.kept[s.depth]) {
    Emit(s.ranges[s.depth].message, s.ranges[s.depth].start, NowNs(), ThreadId());
  }
  return s.depth;
}

void Mark(const char* message) {
  if (Keeps()) Emit(message, NowNs(), -1, ThreadId());
}

nvtxRangeId_t Start(const char* message) {
  if (!Keeps()) return 0;
  const uint64_t id = g_next_id.fetch_add(1, std::memory_order_relaxed);
  OpenById& o = g_open[id % kMaxOpen];
  o.start = NowNs();
  o.tid = ThreadId();
  CopyMessage(message, o.message, kMaxMessage);
  o.id.store(id, std::memory_order_release);
  return id;
}

void End(nvtxRangeId_t id) {
  if (id == 0) return;
  OpenById& o = g_open[id % kMaxOpen];
  if (o.id.load(std::memory_order_acquire) != id) return;
  Emit(o.message, o.start, NowNs(), o.tid);
  o.id.store(0, std::memory_order_relaxed);
}

// ---- the core module (nvtxRangePushA and friends) ----------------------------------------------

// On(): recording; g_early: the early phase. Either way the message is worth reading.
bool Listening() { return On() || g_early.load(std::memory_order_relaxed); }

void NVTX_API MarkEx(const nvtxEventAttributes_t* a) {
  if (!Listening()) return;
  char m[kMaxMessage];
  Message(a, m, sizeof m);
  Mark(m);
}
void NVTX_API MarkA(const char* message) {
  if (Listening()) Mark(message);
}
nvtxRangeId_t NVTX_API RangeStartEx(const nvtxEventAttributes_t* a) {
  if (!Listening()) return 0;
  char m[kMaxMessage];
  Message(a, m, sizeof m);
  return Start(m);
}
nvtxRangeId_t NVTX_API RangeStartA(const char* message) { return Listening() ? Start(message) : 0; }
void NVTX_API RangeEnd(nvtxRangeId_t id) { End(id); }
int NVTX_API RangePushEx(const nvtxEventAttributes_t* a) {
  char m[kMaxMessage];
  if (Listening()) Message(a, m, sizeof m);
  else m[0] = '\0';
  return Push(m);
}
int NVTX_API RangePushA(const char* message) { return Push(message); }
int NVTX_API RangePop() { return Pop(); }

// ---- the domain module (nvtx3::scoped_range, JAX's and PyTorch's domains) -----------------------

void NVTX_API DomainMarkEx(nvtxDomainHandle_t, const nvtxEventAttributes_t* a) { MarkEx(a); }
nvtxRangeId_t NVTX_API DomainRangeStartEx(nvtxDomainHandle_t, const nvtxEventAttributes_t* a) {
  return RangeStartEx(a);
}
void NVTX_API DomainRangeEnd(nvtxDomainHandle_t, nvtxRangeId_t id) { End(id); }
int NVTX_API DomainRangePushEx(nvtxDomainHandle_t, const nvtxEventAttributes_t* a) { return RangePushEx(a); }
int NVTX_API DomainRangePop(nvtxDomainHandle_t) { return Pop(); }
nvtxStringHandle_t NVTX_API DomainRegisterStringA(nvtxDomainHandle_t, const char* s) {
  return reinterpret_cast<nvtxStringHandle_t>(strdup(s != nullptr ? s : ""));
}
nvtxDomainHandle_t NVTX_API DomainCreateA(const char* name) {
  return reinterpret_cast<nvtxDomainHandle_t>(strdup(name != nullptr ? name : ""));
}
void NVTX_API DomainDestroy(nvtxDomainHandle_t) {}  // kept: registered strings may outlive it

template <typename F>
void Set(NvtxFunctionTable table, unsigned size, unsigned id, F fn) {
  if (table != nullptr && id < size && table[id] != nullptr) *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
}

}  // namespace
}  // namespace gslice::trace

// NVTX's entry into an injection library (nvtxDetail/nvtxInit.h): returns 1 on success.
extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  using namespace gslice::trace;
  if (get_table == nullptr) return 0;
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr || callbacks->GetModuleFunctionTable == nullptr) return 0;
  NvtxFunctionTable core = nullptr, core2 = nullptr;
  unsigned core_size = 0, core2_size = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_size) == 0) return 0;
  Set(core, core_size, NVTX_CBID_CORE_MarkEx, MarkEx);
  Set(core, core_size, NVTX_CBID_CORE_MarkA, MarkA);
  Set(core, core_size, NVTX_CBID_CORE_RangeStartEx, RangeStartEx);
  Set(core, core_size, NVTX_CBID_CORE_RangeStartA, RangeStartA);
  Set(core, core_size, NVTX_CBID_CORE_RangeEnd, RangeEnd);
  Set(core, core_size, NVTX_CBID_CORE_RangePushEx, RangePushEx);
  Set(core, core_size, NVTX_CBID_CORE_RangePushA, RangePushA);
  Set(core, core_size, NVTX_CBID_CORE_RangePop, RangePop);
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &core2_size) != 0) {
    Set(core2, core2_size, NVTX_CBID_CORE2_DomainMarkEx, DomainMarkEx);
    Set(core2, core2_size, NVTX_CBID_CORE2_DomainRangeStartEx, DomainRangeStartEx);
    Set(core2, core2_size, NVTX_CBID_CORE2_DomainRangeEnd, DomainRangeEnd);
    Set(core2, core2_size, NVTX_CBID_CORE2_DomainRangePushEx, DomainRangePushEx);
    Set(core2, core2_size, NVTX_CBID_CORE2_DomainRangePop, DomainRangePop);
    Set(core2, core2_size, NVTX_CBID_CORE2_DomainRegisterStringA, DomainRegisterStringA);
    Set(core2, core2_size, NVTX_CBID_CORE2_DomainCreateA, DomainCreateA);
    Set(core2, core2_size, NVTX_CBID_CORE2_DomainDestroy, DomainDestroy);
  }
  return 1;
}

namespace gslice::trace {

// Called by the shim's constructor: NVTX_INJECTION64_PATH names the shim itself unless the
// user named another tool.
void OfferNvtxInjection() {
  if (OptionValue(Option::Trace)[0] != '\0') {  // the early phase: until cuInit (EndEarlyNvtx)
    g_early_since = NowNs();
    g_early.store(true, std::memory_order_release);
  }
  if (getenv("NVTX_INJECTION64_PATH") != nullptr) return;
  Dl_info info;
  if (dladdr(reinterpret_cast<const void*>(&InitializeInjectionNvtx2), &info) == 0 || info.dli_fname == nullptr ||
      info.dli_fname[0] != '/') {
    return;
  }
  setenv("NVTX_INJECTION64_PATH", info.dli_fname, /*overwrite=*/0);
}

}  // namespace gslice::trace

namespace gslice::trace {

int64_t EndEarlyNvtx() {
  std::lock_guard<std::mutex> lock(g_early_mu);
  if (!g_early.exchange(false, std::memory_order_acq_rel)) return 0;
  if (Recording()) {
    for (int i = 0; i < g_early_count; ++i) {
      const EarlyEvent& e = g_early_events[i];
      if (e.end < 0) NvtxMark(e.message, e.start);
      else NvtxRange(e.message, e.start, e.end, e.tid);
    }
    if (g_early_lost > 0) {
      Log(LogLevel::kWarn, "trace: %llu NVTX ranges and marks before the first CUDA call did not fit (%d kept)",
          static_cast<unsigned long long>(g_early_lost), kMaxEarly);
    }
  }
  g_early_count = 0;
  g_early_lost = 0;
  return g_early_since;
}

}  // namespace gslice::trace
