// Copies whose direction the driver tells from the addresses (cuMemcpy, cuMemcpyAsync: what
// cudaMemcpy makes of cudaMemcpyDefault, as CuPy passes it). The client cannot tell its own
// host memory from the worker's device memory by the address alone, so it asks: its own
// page-locked memory is host memory (host_memory.h); any other address is the worker's device
// memory when the worker's driver says so (cuPointerGetAttribute, one round trip) and this
// process has nothing mapped there, host memory when the driver knows it not and it is mapped
// here. An address that is both, or neither, is refused with CUDA_ERROR_INVALID_VALUE and a log
// line: copying the wrong memory is not an answer. The copy is then the typed one
// (cuMemcpyHtoD, DtoH, DtoD and their Async forms, in the same stream), host to host a memmove
// after the stream's work.
#pragma once

#include <cuda.h>

#include <cstddef>

namespace gslice::remote {

// REQUIRES: per_thread names the default-stream flavour of the export called (_ptds, _ptsz).
CUresult UnifiedCopy(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream, bool async, bool per_thread);

}  // namespace gslice::remote
