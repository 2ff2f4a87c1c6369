#include "unified_copies.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

#include "client_calls.h"
#include "host_memory.h"
#include "log.h"

namespace gslice::remote {
namespace {

enum class Side { kHost, kDevice, kBoth, kNeither };

// Whether this process has the page of p mapped (msync fails with ENOMEM on an unmapped range).
bool MappedHere(CUdeviceptr p) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  void* start = reinterpret_cast<void*>(static_cast<uintptr_t>(p) & ~(page - 1));
  return msync(start, page, MS_ASYNC) == 0 || errno != ENOMEM;
}

Side SideOf(CUdeviceptr p, size_t bytes) {
  uint64_t worker = 0;
  if (LookUpHostMemory(reinterpret_cast<const void*>(p), bytes, &worker) != HostMemory::kOther) return Side::kHost;
  unsigned type = 0;
  const bool device = gslice_remote_call_cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) == CUDA_SUCCESS;
  const bool here = MappedHere(p);
  return device ? (here ? Side::kBoth : Side::kDevice) : (here ? Side::kHost : Side::kNeither);
}

CUresult Refuse(CUdeviceptr p, Side side) {
  shim::InitLog();
  shim::Log(shim::LogLevel::kWarn, "remote: cuMemcpy/cuMemcpyAsync: 0x%llx is %s; pass the copy's direction "
            "(cudaMemcpyHostToDevice, ...): CUDA_ERROR_INVALID_VALUE", static_cast<unsigned long long>(p),
            side == Side::kBoth ? "both memory of this process and the worker's device memory"
                                : "neither memory of this process nor the worker's device memory");
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

CUresult UnifiedCopy(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream, bool async, bool per_thread) {
  if (bytes == 0) return CUDA_SUCCESS;
  const Side to = SideOf(dst, bytes);
  if (to == Side::kBoth || to == Side::kNeither) return Refuse(dst, to);
  const Side from = SideOf(src, bytes);
  if (from == Side::kBoth || from == Side::kNeither) return Refuse(src, from);
  void* host_dst = reinterpret_cast<void*>(dst);
  const void* host_src = reinterpret_cast<const void*>(src);
  if (to == Side::kDevice && from == Side::kDevice) {
    if (!async) return per_thread ? gslice_remote_call_cuMemcpyDtoD_v2_ptds(dst, src, bytes)
                                  : gslice_remote_call_cuMemcpyDtoD_v2(dst, src, bytes);
    return per_thread ? gslice_remote_call_cuMemcpyDtoDAsync_v2_ptsz(dst, src, bytes, stream)
                      : gslice_remote_call_cuMemcpyDtoDAsync_v2(dst, src, bytes, stream);
  }
  if (to == Side::kDevice) {
    if (!async) return per_thread ? gslice_remote_call_cuMemcpyHtoD_v2_ptds(dst, host_src, bytes)
                                  : gslice_remote_call_cuMemcpyHtoD_v2(dst, host_src, bytes);
    return per_thread ? gslice_remote_call_cuMemcpyHtoDAsync_v2_ptsz(dst, host_src, bytes, stream)
                      : gslice_remote_call_cuMemcpyHtoDAsync_v2(dst, host_src, bytes, stream);
  }
  if (from == Side::kDevice) {
    if (!async) return per_thread ? gslice_remote_call_cuMemcpyDtoH_v2_ptds(host_dst, src, bytes)
                                  : gslice_remote_call_cuMemcpyDtoH_v2(host_dst, src, bytes);
    return per_thread ? gslice_remote_call_cuMemcpyDtoHAsync_v2_ptsz(host_dst, src, bytes, stream)
                      : gslice_remote_call_cuMemcpyDtoHAsync_v2(host_dst, src, bytes, stream);
  }
  // Host to host: after the stream's earlier work, which may write either buffer.
  const CUresult r = async ? (per_thread ? gslice_remote_call_cuStreamSynchronize_ptsz(stream)
                                         : gslice_remote_call_cuStreamSynchronize(stream))
                           : gslice_remote_call_cuCtxSynchronize();
  if (r != CUDA_SUCCESS) return r;
  memmove(host_dst, host_src, bytes);
  return CUDA_SUCCESS;
}

}  // namespace gslice::remote

using gslice::remote::UnifiedCopy;

extern "C" CUresult gslice_remote_call_cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  return UnifiedCopy(dst, src, ByteCount, nullptr, false, false);
}

extern "C" CUresult gslice_remote_call_cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  return UnifiedCopy(dst, src, ByteCount, nullptr, false, true);
}

extern "C" CUresult gslice_remote_call_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream) {
  return UnifiedCopy(dst, src, ByteCount, hStream, true, false);
}

extern "C" CUresult gslice_remote_call_cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                                          CUstream hStream) {
  return UnifiedCopy(dst, src, ByteCount, hStream, true, true);
}
