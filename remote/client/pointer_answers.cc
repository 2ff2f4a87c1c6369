#include "pointer_answers.h"

#include <pthread.h>

#include <array>
#include <atomic>
#include <string_view>

#include "call_stats.h"
#include "calls.h"
#include "context_stack.h"
#include "host_memory.h"

namespace gslice::remote {
namespace {

// The calls that cannot map memory: kept addresses survive them. Each makes no allocation,
// registration or mapping of its own, in the worker's driver or in the worker: the worker's own
// page-locked buffers for copies (remote/server/staging.h) are its memory, never memory of the
// client's, whose address stays not CUDA memory to the client whatever the worker maps there.
constexpr Op kMapsNothing[] = {
    // Launches. A kernel's allocations (its stack, device-side malloc's heap) are the driver's
    // own, which pointer queries do not name; a global a launch loads is named only by
    // cuModuleGetGlobal or cuLibraryGetGlobal, which forget.
    kOp_cuLaunchKernel, kOp_cuLaunchKernel_ptsz, kOp_cuLaunchKernelEx, kOp_cuLaunchKernelEx_ptsz,
    // Copies and memsets: between memory that exists.
    kOp_cuMemcpyHtoD_v2, kOp_cuMemcpyHtoD_v2_ptds, kOp_cuMemcpyDtoH_v2, kOp_cuMemcpyDtoH_v2_ptds,
    kOp_cuMemcpyDtoD_v2, kOp_cuMemcpyDtoD_v2_ptds, kOp_cuMemcpyHtoDAsync_v2, kOp_cuMemcpyHtoDAsync_v2_ptsz,
    kOp_cuMemcpyDtoHAsync_v2, kOp_cuMemcpyDtoHAsync_v2_ptsz, kOp_cuMemcpyDtoDAsync_v2, kOp_cuMemcpyDtoDAsync_v2_ptsz,
    kOp_cuMemsetD8_v2, kOp_cuMemsetD8_v2_ptds, kOp_cuMemsetD16_v2, kOp_cuMemsetD16_v2_ptds, kOp_cuMemsetD32_v2,
    kOp_cuMemsetD32_v2_ptds, kOp_cuMemsetD8Async, kOp_cuMemsetD8Async_ptsz, kOp_cuMemsetD16Async,
    kOp_cuMemsetD32Async, kOp_cuMemsetD32Async_ptsz, kOp_cuMemsetD2D8_v2, kOp_cuMemsetD2D8_v2_ptds,
    kOp_cuMemsetD2D16_v2, kOp_cuMemsetD2D16_v2_ptds, kOp_cuMemsetD2D32_v2, kOp_cuMemsetD2D32_v2_ptds,
    kOp_cuMemsetD2D8Async, kOp_cuMemsetD2D8Async_ptsz, kOp_cuMemsetD2D16Async, kOp_cuMemsetD2D16Async_ptsz,
    kOp_cuMemsetD2D32Async, kOp_cuMemsetD2D32Async_ptsz,
    // Frees: they unmap, or give memory back to its pool; none maps.
    kOp_cuMemFree_v2, kOp_cuMemFreeAsync, kOp_cuMemFreeAsync_ptsz,
    // Stream and event work: ordering and waiting, and stream memory operations on memory that
    // exists. An event holds no memory a pointer query names.
    kOp_cuStreamSynchronize, kOp_cuStreamSynchronize_ptsz, kOp_cuStreamQuery, kOp_cuStreamQuery_ptsz,
    kOp_cuStreamWaitEvent, kOp_cuStreamWaitEvent_ptsz, kOp_cuCtxSynchronize, kOp_cuCtxSynchronize_v2,
    kOp_cuStreamWaitValue32_v2, kOp_cuStreamWaitValue32_v2_ptsz, kOp_cuStreamWaitValue64_v2,
    kOp_cuStreamWaitValue64_v2_ptsz, kOp_cuStreamWriteValue32_v2, kOp_cuStreamWriteValue32_v2_ptsz,
    kOp_cuStreamWriteValue64_v2, kOp_cuStreamWriteValue64_v2_ptsz, kOp_cuEventCreate, kOp_cuEventRecord,
    kOp_cuEventRecord_ptsz, kOp_cuEventRecordWithFlags, kOp_cuEventRecordWithFlags_ptsz, kOp_cuEventQuery,
    kOp_cuEventSynchronize, kOp_cuEventElapsedTime, kOp_cuEventElapsedTime_v2, kOp_cuEventDestroy_v2,
    // An executable graph's parameters: what its next launch does. The driver maps a graph's
    // allocations at its launch or upload (below), never when its nodes change.
    kOp_cuGraphExecKernelNodeSetParams_v2, kOp_cuGraphExecMemcpyNodeSetParams, kOp_cuGraphExecMemsetNodeSetParams,
    kOp_cuGraphExecChildGraphNodeSetParams, kOp_cuGraphNodeSetEnabled, kOp_cuGraphExecUpdate_v2,
    // A launch's configuration: a function's or kernel's attributes.
    kOp_cuFuncSetAttribute, kOp_cuKernelSetAttribute, kOp_cuFuncSetCacheConfig,
    // Pointer queries.
    kOp_cuPointerGetAttribute, kOp_cuMemGetAddressRange_v2,
    // Getters of what a device, context, stream or function is (no loading: cuModuleGetFunction,
    // cuKernelGetFunction and the like may load code and its globals, and forget).
    kOp_cuDriverGetVersion, kOp_cuDeviceGet, kOp_cuDeviceGetCount, kOp_cuDeviceGetName, kOp_cuDeviceGetAttribute,
    kOp_cuDeviceTotalMem_v2, kOp_cuDeviceGetUuid, kOp_cuDeviceGetUuid_v2, kOp_cuDeviceGetPCIBusId,
    kOp_cuDeviceGetByPCIBusId, kOp_cuDeviceCanAccessPeer, kOp_cuDevicePrimaryCtxGetState, kOp_cuCtxGetDevice,
    kOp_cuCtxGetDevice_v2, kOp_cuCtxGetLimit, kOp_cuCtxGetApiVersion, kOp_cuCtxGetFlags,
    kOp_cuCtxGetStreamPriorityRange, kOp_cuCtxGetId, kOp_cuCtxGetCacheConfig, kOp_cuMemGetInfo_v2,
    kOp_cuStreamGetPriority, kOp_cuStreamGetFlags, kOp_cuStreamGetCtx, kOp_cuStreamGetId, kOp_cuStreamGetAttribute,
    kOp_cuStreamGetAttribute_ptsz, kOp_cuStreamIsCapturing, kOp_cuStreamIsCapturing_ptsz,
    kOp_cuStreamGetCaptureInfo_v2, kOp_cuStreamGetCaptureInfo_v2_ptsz, kOp_cuStreamGetCaptureInfo_v3,
    kOp_cuStreamGetCaptureInfo_v3_ptsz, kOp_cuFuncGetAttribute, kOp_cuKernelGetAttribute,
};

// The calls that run a graph: they map its allocations, if it has any.
constexpr Op kRunsGraph[] = {kOp_cuGraphLaunch, kOp_cuGraphLaunch_ptsz, kOp_cuGraphUpload, kOp_cuGraphUpload_ptsz};

// The calls that make stream-ordered allocations: captured into a graph, they are its
// allocation nodes.
constexpr Op kAllocatesInStreamOrder[] = {kOp_cuMemAllocAsync, kOp_cuMemAllocAsync_ptsz, kOp_cuMemAllocFromPoolAsync,
                                          kOp_cuMemAllocFromPoolAsync_ptsz};

template <size_t N>
constexpr std::array<bool, kOpCount> Table(const Op (&ops)[N]) {
  std::array<bool, kOpCount> t{};
  for (const Op op : ops) t[op] = true;
  return t;
}

constexpr std::array<bool, kOpCount> kMapsNothingTable = Table(kMapsNothing);
constexpr std::array<bool, kOpCount> kRunsGraphTable = Table(kRunsGraph);
constexpr std::array<bool, kOpCount> kAllocatesInStreamOrderTable = Table(kAllocatesInStreamOrder);

// Every call of calls.def that makes a stream-ordered allocation or a graph's allocation node, by
// its name, is one that sets the flag below: a new one (cuGraphAddMemAllocNode forwarded one day)
// fails the build until it is listed, or handled as cuGraphAddNode's kind is.
constexpr bool AllocatesGraphMemoryByName(std::string_view name) {
  return (name.starts_with("cuMemAlloc") && name.find("Async") != std::string_view::npos) ||
         name.find("MemAllocNode") != std::string_view::npos;
}
constexpr bool EveryGraphAllocationListed() {
  for (uint32_t op = 0; op < kOpCount; ++op) {
    if (AllocatesGraphMemoryByName(kOpNames[op]) && !kAllocatesInStreamOrderTable[op]) return false;
  }
  return true;
}
static_assert(EveryGraphAllocationListed(), "a call of calls.def that makes graph allocations is not in kAllocatesInStreamOrder");

// Set once the process made a stream-ordered allocation or asked for an allocation node: from
// then on a graph's launch may map memory. Never cleared (a graph made then may live on).
std::atomic<bool> g_graph_memory{false};

// More addresses than this and the store is emptied (a program that asks about addresses
// without end does not grow the client without end).
constexpr size_t kMaxKept = 4096;

NotCudaMemory& Store() {
  static NotCudaMemory* const store = [] {
    auto* s = new NotCudaMemory(kMaxKept);  // never freed: calls may come during exit
    pthread_atfork([] { Store().BeforeFork(); }, [] { Store().AfterForkInParent(); },
                   [] { Store().AfterForkInChild(); });
    return s;
  }();
  return *store;
}

uint64_t ContextBits() { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(CurrentContext())); }

}  // namespace

bool MayMapMemory(uint32_t op) {
  if (op >= kOpCount) return true;
  if (kOpLibrary[op] == Library::kNvml) return false;  // NVML maps no memory of CUDA's
  if (kRunsGraphTable[op]) return g_graph_memory.load(std::memory_order_acquire);
  return !kMapsNothingTable[op];
}

void BeforeSending(uint32_t op, bool queued, NotCudaMemory::ThreadMark* mark) {
  if (op < kOpCount && kAllocatesInStreamOrderTable[op]) NoteGraphAllocation();
  if (!MayMapMemory(op)) return;
  if (queued) {
    Store().ForgetQueued(mark);
  } else {
    Store().Forget();
  }
}

void AfterAnswer(uint32_t op, bool answered, NotCudaMemory::ThreadMark* mark) {
  if (MayMapMemory(op)) Store().Forget();
  if (answered) Store().Confirm(mark);
}

uint64_t NotCudaGeneration() { return Store().Generation(); }

void NoteGraphAllocation() { g_graph_memory.store(true, std::memory_order_release); }

void ForgetNotCudaMemory() { Store().Forget(); }

bool KnownNotCudaMemory(CUdeviceptr ptr) { return Store().Known(ContextBits(), static_cast<uint64_t>(ptr)); }

bool RemoteAnswerPointer(CUresult* result, void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (RemoteAnswerHostPointer(result, data, attribute, ptr)) return true;
  if (data == nullptr || attribute != CU_POINTER_ATTRIBUTE_MEMORY_TYPE || !KnownNotCudaMemory(ptr)) return false;
  CountCall(kCachedCall, kOp_cuPointerGetAttribute);
  *result = CUDA_ERROR_INVALID_VALUE;
  return true;
}

void RemoteKeepPointerAnswer(const Call& call, CUresult result, void* data, CUpointer_attribute attribute,
                             CUdeviceptr ptr) {
  if (!call.answered() || result != CUDA_ERROR_INVALID_VALUE || data == nullptr ||
      attribute != CU_POINTER_ATTRIBUTE_MEMORY_TYPE) {
    return;
  }
  Store().Keep(call.not_cuda_generation(), ContextBits(), static_cast<uint64_t>(ptr));
}

}  // namespace gslice::remote
