// The driver's private tables (cuGetExportTable), answered on the client.
//
// cudart, cuBLAS/cuBLASLt, cuDNN and NVRTC each fetch undocumented function tables from the
// driver by UUID and call through them. A forwarding client has no driver to ask, so it
// serves them itself, with the semantics the driver's own tables have as public reverse
// engineering describes them (ZLUDA's dark_api, Lupine's client) and as traced on our stack
// (docs/remote.md, "The driver's private tables"):
//
//   table (UUID prefix)          slots  answered here
//   cudart interface  6bd5fb6c   13     1/6/8 module from a fatbin (forwarded as
//                                       cuModuleLoadData), 2 primary context of a device
//                                       (forwarded once per device), 7 no-op, 12 compilers ok
//   tools TLS         42d85a81    3     1: no tools state (0); 2: the thread's current context
//                                       (cuBLASLt, about once per matmul)
//   callback hooks    a094798c    7     2, 6: the two hook buffers the runtime writes into
//   context storage   c693336e    -     0 put, 1 delete, 2 get: values per (context, key),
//                                       destructors run when the context is destroyed or reset
//   context checks    263e8860   15     2: context is fine (0), 3: 0
//   integrity         d4082055    3     1: the keyed hash that binds the process, the thread,
//                                       the driver version, the addresses of this table and of
//                                       the cudart table, and every device's identity
//   tools context     21318c60   93     4: a context's number (cuBLASLt, cuFFT; about once per
//                                       matmul); 51, 39: a stream's object and key (cuBLAS's
//                                       per-stream workspaces, stream_keys.h)
//   cuBLASLt data     1734dc26   17     4: declined (cuBLASLt goes on without it)
//   module functions  6e163fbe   99     7: a module's functions (cuFFT, module_functions.h)
//
// A size-header table starts with its size in bytes (slots * 8), as the driver's do. Every
// slot the client does not answer is a function that logs the table and slot once and returns
// CUDA_ERROR_NOT_SUPPORTED: a caller never jumps through a null pointer; the log line names the
// library and its call that reached the slot (caller.h). A UUID not listed is refused with
// CUDA_ERROR_NOT_FOUND and a warning naming it and its caller; the tables in kDeclined (cudart's
// f8cff951, the compute cache da9151d3 of NVRTC and nvJitLink) are refused alike, logged at
// info level: their callers go on without them. Hot slots (tools TLS, context checks, context
// storage) never leave the process; the integrity hash asks the server only for what the client
// caches (versions, devices).
//
// Checked against (the library builds that fetched these tables with this client):
//   libcudart.so.13 (CUDA 13.0 toolkit, /usr/local/cuda/lib64 on the CI machines): starts,
//   allocates, copies, memsets, streams and events against gslice-remoted --sim (CI);
//   libcublas.so.13 and libcublasLt.so.13 of the same toolkit: cublasCreate/cublasDestroy (CI),
//   which calls the integrity check and the context checks, and cublasSgemm as far as its kernel
//   launch (CI), which calls tools TLS slot 2 and tools context slot 4; cuBLASLt's code read for
//   what it does with tools context slot 4's answer and with a failed cuBLASLt data slot 4, and
//   for its per-stream buffers (slots 51, 39); cuFFT's for module functions slot 7 (its callback
//   keeps the one function; it goes on at a count of 1); NVRTC's and nvJitLink's for how they
//   take a refused compute cache. The slots' answers themselves: RemoteLibraryTables.* (CI).
// The UUIDs and slot usage of cuDNN 9.19, NVRTC and PyTorch 2.11's cuBLASLt come from a trace
// on an H200 with driver 580.159; the GPU suite (bench/gpu/suites/remote.sh) runs them.
#include <cuda.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "call.h"
#include "caller.h"
#include "client_calls.h"
#include "context_numbers.h"
#include "context_stack.h"
#include "export_tables.h"
#include "integrity_hash.h"
#include "log.h"
#include "module_functions.h"
#include "refusals.h"
#include "stream_keys.h"

namespace gslice::remote {
namespace {

using shim::Log;
using shim::LogLevel;

// ---- The tables the client knows.

enum TableId : int {
  kCudartInterface,
  kToolsTls,
  kCallbackHooks,
  kContextStorage,
  kContextChecks,
  kIntegrity,
  kToolsContext,
  kLtData,
  kModuleFunctions,
  kTableCount,
};

struct TableSpec {
  const char* name;
  uint8_t uuid[16];
  int slots;         // what the driver's size header says (slots of 8 bytes, the header included)
  bool size_header;  // slot 0 holds the table's size in bytes
};

constexpr TableSpec kSpecs[kTableCount] = {
    {"cudart interface",
     {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9}, 13, true},
    {"tools TLS",
     {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc}, 3, true},
    {"callback hooks",
     {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66}, 7, true},
    {"context storage",
     {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93}, 4, false},
    {"context checks",
     {0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e}, 15, true},
    {"integrity",
     {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2}, 3, true},
    {"tools context",
     {0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2}, 93, true},
    {"cuBLASLt data",
     {0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca}, 17, true},
    {"module functions",
     {0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e}, 99, true},
};

// Tables the client knows and declines, as a driver without them would: the library goes on
// without them (checked: cudart 13 starts and runs with this answer).
struct DeclinedTable {
  uint8_t uuid[16];
  const char* why;
};

constexpr DeclinedTable kDeclined[] = {
    {{0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9},
     "a runtime start-up table the runtime does without"},
    // NVRTC and nvJitLink keep compiled code in the driver's compute cache through it (and
    // 1734dc26, asked for only once this one is given); without it they compile every time
    // ("[nvrtc cache] failed to get cuda export table" in their code).
    {{0xda, 0x91, 0x51, 0xd3, 0x3a, 0xe6, 0xcc, 0x41, 0xa5, 0xc0, 0x4f, 0x26, 0xd5, 0x33, 0xe3, 0x28},
     "the driver's compute cache, which NVRTC and nvJitLink compile without"},
};

constexpr int kMaxSlots = 104;
static_assert([] {
  for (const TableSpec& s : kSpecs)
    if (s.slots > kMaxSlots) return false;
  return true;
}());

// The tables themselves: fixed addresses for the life of the process (the integrity hash
// binds two of them). Filled once, before the first is handed out.
void* g_tables[kTableCount][kMaxSlots];
pthread_once_t g_tables_once = PTHREAD_ONCE_INIT;

// ---- Slots the client does not answer: one function per (table, slot), so the log names it.

std::atomic<bool> g_unanswered_reported[kTableCount][kMaxSlots];

CUresult ReportUnanswered(int table, int slot) {
  if (!g_unanswered_reported[table][slot].exchange(true, std::memory_order_relaxed)) {
    shim::InitLog();
    char caller[256];
    DescribeCaller(caller, sizeof caller);
    Log(LogLevel::kWarn, "remote: private table %s (%02x%02x%02x%02x...) slot %d is not answered: "
        "CUDA_ERROR_NOT_SUPPORTED to %s", kSpecs[table].name, kSpecs[table].uuid[0], kSpecs[table].uuid[1],
        kSpecs[table].uuid[2], kSpecs[table].uuid[3], slot, caller);
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

template <int Table, int Slot>
CUresult Unanswered() {
  return ReportUnanswered(Table, Slot);
}

template <int Table, int... Slots>
constexpr std::array<void*, kMaxSlots> UnansweredRow(std::integer_sequence<int, Slots...>) {
  return {reinterpret_cast<void*>(&Unanswered<Table, Slots>)...};
}

template <int... Tables>
std::array<std::array<void*, kMaxSlots>, kTableCount> UnansweredRows(std::integer_sequence<int, Tables...>) {
  return {UnansweredRow<Tables>(std::make_integer_sequence<int, kMaxSlots>{})...};
}

// ---- cudart interface.

// Module images reach the worker as cuModuleLoadData's do (a fatbin wrapper as its fatbin).
CUresult ModuleFromWrapper(CUmodule* module, const void* wrapper) {
  if (module == nullptr || wrapper == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return gslice_remote_call_cuModuleLoadData(module, wrapper);
}

CUresult CudartModuleFromCubin(CUmodule* module, const void* wrapper) { return ModuleFromWrapper(module, wrapper); }

CUresult CudartModuleFromCubinExt(CUmodule* module, const void* wrapper, void* a3, void* a4, unsigned a5) {
  if (a3 != nullptr || a4 != nullptr || a5 != 0) return RefuseArgument("cudart interface slot 6", "options");
  return ModuleFromWrapper(module, wrapper);
}

CUresult CudartModuleFromFatbin(const void* fatbin, CUmodule* module, void* a3, void* a4, unsigned a5) {
  if (a3 != nullptr || a4 != nullptr || a5 != 0) return RefuseArgument("cudart interface slot 8", "options");
  if (module == nullptr || fatbin == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return gslice_remote_call_cuModuleLoadData(module, fatbin);
}

// The device's primary context, without making it active or current. The worker's driver
// retains it once per device (the runtime retains it again itself); the handle is remembered,
// so later asks cost no round trip.
constexpr int kMaxDevices = 64;
pthread_mutex_t g_primary_mu = PTHREAD_MUTEX_INITIALIZER;
CUcontext g_primary[kMaxDevices];

CUresult CudartPrimaryContext(CUcontext* pctx, CUdevice dev) {
  if (pctx == nullptr || dev < 0 || dev >= kMaxDevices) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_primary_mu);
  CUcontext ctx = g_primary[dev];
  pthread_mutex_unlock(&g_primary_mu);
  if (ctx == nullptr) {
    // Not under the lock: the retain's bookkeeping (RememberPrimaryContext) takes it.
    const CUresult r = gslice_remote_call_cuDevicePrimaryCtxRetain(&ctx, dev);
    if (r != CUDA_SUCCESS) return r;
  }
  *pctx = ctx;
  return CUDA_SUCCESS;
}

void CudartNoop(size_t) {}

CUresult CudartLoadCompilers() { return CUDA_SUCCESS; }

// ---- Tools TLS: no profiler or debugger state in this process (slot 1). Slot 2 writes the
// calling thread's current context (null when none) to its one argument, from the client's
// context stack: cuBLASLt reads it back and passes it to the tools context table (slot 4),
// about once per matmul.

uintptr_t NoToolsState() { return 0; }

CUresult ThreadContext(CUcontext* ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = CurrentContext();
  return CUDA_SUCCESS;
}

// ---- Callback hooks: two buffers the runtime writes its hook state into. Larger than their
// reported sizes, in case a runtime counts them in wider units than this one.
alignas(64) uint8_t g_hook_buffer1[4096];
alignas(64) uint8_t g_hook_buffer2[64];

void HookBuffer1(void** ptr, size_t* size) {
  if (ptr != nullptr) *ptr = g_hook_buffer1;
  if (size != nullptr) *size = 1024;
}

void HookBuffer2(void** ptr, size_t* size) {
  if (ptr != nullptr) *ptr = g_hook_buffer2;
  if (size != nullptr) *size = 14;
}

// ---- Context-local storage: one value per (context, key), a destructor run when the context
// goes (cuCtxDestroy, a primary context's reset), not on an explicit delete.

using StorageDestructor = void (*)(CUcontext ctx, void* key, void* value);

struct StorageEntry {
  CUcontext ctx;
  void* key;
  void* value;
  StorageDestructor destructor;
};

pthread_mutex_t g_storage_mu = PTHREAD_MUTEX_INITIALIZER;
std::vector<StorageEntry>* g_storage = nullptr;  // never freed: the runtime asks during exit too

CUresult ResolveContext(CUcontext* ctx) {
  if (*ctx == nullptr) *ctx = CurrentContext();
  return *ctx == nullptr ? CUDA_ERROR_INVALID_CONTEXT : CUDA_SUCCESS;
}

CUresult StoragePut(CUcontext ctx, void* key, void* value, StorageDestructor destructor) {
  if (ResolveContext(&ctx) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&g_storage_mu);
  if (g_storage == nullptr) g_storage = new std::vector<StorageEntry>();
  bool replaced = false;
  for (StorageEntry& e : *g_storage) {
    if (e.ctx == ctx && e.key == key) {
      e.value = value;
      e.destructor = destructor;
      replaced = true;
      break;
    }
  }
  if (!replaced) g_storage->push_back({ctx, key, value, destructor});
  pthread_mutex_unlock(&g_storage_mu);
  return CUDA_SUCCESS;
}

CUresult StorageDelete(CUcontext ctx, void* key) {
  if (ResolveContext(&ctx) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
  CUresult r = CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&g_storage_mu);
  if (g_storage != nullptr) {
    for (size_t i = 0; i < g_storage->size(); ++i) {
      if ((*g_storage)[i].ctx == ctx && (*g_storage)[i].key == key) {
        g_storage->erase(g_storage->begin() + static_cast<ptrdiff_t>(i));
        r = CUDA_SUCCESS;
        break;
      }
    }
  }
  pthread_mutex_unlock(&g_storage_mu);
  return r;
}

CUresult StorageGet(void** value, CUcontext ctx, void* key) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ResolveContext(&ctx) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
  CUresult r = CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&g_storage_mu);
  if (g_storage != nullptr) {
    for (const StorageEntry& e : *g_storage) {
      if (e.ctx == ctx && e.key == key) {
        *value = e.value;
        r = CUDA_SUCCESS;
        break;
      }
    }
  }
  pthread_mutex_unlock(&g_storage_mu);
  return r;
}

// ---- Context checks: every context passes.

CUresult ContextCheck(CUcontext, uint32_t* status, const void** detail) {
  if (status != nullptr) *status = 0;
  if (detail != nullptr) *detail = nullptr;
  return CUDA_SUCCESS;
}

uint32_t ContextCheckFlags() { return 0; }

// ---- Tools context (21318c60): slot 4 is a context's number (context_numbers.h); 51 and 39 a
// stream's object and key (stream_keys.h).

// ---- cuBLASLt's 1734dc26: slot 4 hands out a buffer of bytes (pointer, size) the driver
// keeps for what cuBLASLt caches it under, slot 13 gives the buffer back. What the bytes say is
// not established, so the client declines slot 4, its outputs cleared: cuBLASLt takes a failed
// slot 4 as no data and caches an empty entry (as it does itself for the keys it never asks
// about), and never calls slot 13 for it. The table itself must be there: cuBLASLt calls slot 4
// through it without checking that the driver gave it one.

std::atomic<bool> g_lt_data_reported{false};

CUresult LtDataDeclined(const void** data, size_t* size) {
  if (data != nullptr) *data = nullptr;
  if (size != nullptr) *size = 0;
  if (!g_lt_data_reported.exchange(true, std::memory_order_relaxed)) {
    shim::InitLog();
    Log(LogLevel::kInfo, "remote: private table %s slot 4: no data on the client (cuBLASLt goes on "
        "without it): CUDA_ERROR_NOT_SUPPORTED", kSpecs[kLtData].name);
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

// ---- Integrity: the keyed hash of what the driver binds (integrity_hash.h), over this
// process's tables.

CUresult IntegrityCheck(uint32_t version, uint64_t unix_seconds, uint64_t result[2]) {
  return IntegrityHash(version, unix_seconds,
                       IntegrityTables{.cudart_table = g_tables[kCudartInterface],
                                       .integrity_table = g_tables[kIntegrity],
                                       .integrity_function = g_tables[kIntegrity][1]},
                       result);
}

// ---- Building the tables.

template <typename F>
void* Fn(F* f) {
  return reinterpret_cast<void*>(f);
}

void BuildTables() {
  static const auto unanswered = UnansweredRows(std::make_integer_sequence<int, kTableCount>{});
  for (int t = 0; t < kTableCount; ++t) {
    for (int s = 0; s < kMaxSlots; ++s) g_tables[t][s] = s < kSpecs[t].slots ? unanswered[t][s] : nullptr;
    if (kSpecs[t].size_header) g_tables[t][0] = reinterpret_cast<void*>(kSpecs[t].slots * sizeof(void*));
  }
  void** cudart = g_tables[kCudartInterface];
  cudart[1] = Fn(&CudartModuleFromCubin);
  cudart[2] = Fn(&CudartPrimaryContext);
  cudart[6] = Fn(&CudartModuleFromCubinExt);
  cudart[7] = Fn(&CudartNoop);
  cudart[8] = Fn(&CudartModuleFromFatbin);
  cudart[12] = Fn(&CudartLoadCompilers);
  g_tables[kToolsTls][1] = Fn(&NoToolsState);
  g_tables[kToolsTls][2] = Fn(&ThreadContext);
  g_tables[kCallbackHooks][2] = Fn(&HookBuffer1);
  g_tables[kCallbackHooks][6] = Fn(&HookBuffer2);
  void** storage = g_tables[kContextStorage];
  storage[0] = Fn(&StoragePut);
  storage[1] = Fn(&StorageDelete);
  storage[2] = Fn(&StorageGet);
  g_tables[kContextChecks][2] = Fn(&ContextCheck);
  g_tables[kContextChecks][3] = Fn(&ContextCheckFlags);
  g_tables[kIntegrity][1] = Fn(&IntegrityCheck);
  g_tables[kToolsContext][4] = Fn(&ContextNumber);
  g_tables[kToolsContext][39] = Fn(&StreamKey);
  g_tables[kToolsContext][51] = Fn(&StreamObject);
  g_tables[kLtData][4] = Fn(&LtDataDeclined);
  g_tables[kModuleFunctions][7] = Fn(&ModuleFunctions);
}

}  // namespace

void ReleaseContextStorage(CUcontext ctx) {
  ForgetContextNumber(ctx);
  std::vector<StorageEntry> gone;
  pthread_mutex_lock(&g_storage_mu);
  if (g_storage != nullptr) {
    for (size_t i = 0; i < g_storage->size();) {
      if ((*g_storage)[i].ctx == ctx) {
        gone.push_back((*g_storage)[i]);
        g_storage->erase(g_storage->begin() + static_cast<ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }
  pthread_mutex_unlock(&g_storage_mu);
  for (const StorageEntry& e : gone)
    if (e.destructor != nullptr) e.destructor(e.ctx, e.key, e.value);
}

void ReleasePrimaryContextStorage(CUdevice dev) {
  if (dev < 0 || dev >= kMaxDevices) return;
  pthread_mutex_lock(&g_primary_mu);
  const CUcontext ctx = g_primary[dev];
  g_primary[dev] = nullptr;  // asked for again after the reset
  pthread_mutex_unlock(&g_primary_mu);
  if (ctx != nullptr) ReleaseContextStorage(ctx);
}

void RememberPrimaryContext(CUdevice dev, CUcontext ctx) {
  if (dev < 0 || dev >= kMaxDevices || ctx == nullptr) return;
  pthread_mutex_lock(&g_primary_mu);
  if (g_primary[dev] == nullptr) g_primary[dev] = ctx;
  pthread_mutex_unlock(&g_primary_mu);
}

}  // namespace gslice::remote

using namespace gslice::remote;

extern "C" CUresult gslice_remote_call_cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  if (ppExportTable == nullptr || pExportTableId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ppExportTable = nullptr;
  pthread_once(&g_tables_once, BuildTables);
  for (int t = 0; t < kTableCount; ++t) {
    if (memcmp(kSpecs[t].uuid, pExportTableId->bytes, 16) == 0) {
      *ppExportTable = g_tables[t];
      return CUDA_SUCCESS;
    }
  }
  const auto* b = reinterpret_cast<const unsigned char*>(pExportTableId->bytes);
  gslice::shim::InitLog();
  char caller[256];
  DescribeCaller(caller, sizeof caller);
  for (const DeclinedTable& d : kDeclined) {
    if (memcmp(d.uuid, b, 16) == 0) {
      gslice::shim::Log(gslice::shim::LogLevel::kInfo, "remote: cuGetExportTable(%02x%02x%02x%02x...): %s: "
                        "CUDA_ERROR_NOT_FOUND to %s", b[0], b[1], b[2], b[3], d.why, caller);
      return CUDA_ERROR_NOT_FOUND;
    }
  }
  gslice::shim::Log(gslice::shim::LogLevel::kWarn,
      "remote: cuGetExportTable(%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x): "
      "a private table this client does not know: CUDA_ERROR_NOT_FOUND to %s",
      b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15], caller);
  return CUDA_ERROR_NOT_FOUND;
}
