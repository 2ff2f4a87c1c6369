// The client's page-locked host memory (host_memory.cc): shared with a worker on the same
// host, else the client's own; what copies and pointer queries of it become.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace gslice::remote {

// For calls.def's hostin/hostout: what [p, p + bytes) lies in. kShared: memory this process
// shares with its worker, *worker its address there; kPageLocked: the client's own
// page-locked memory, not shared; kOther: anything else (NULL, pageable memory, a range that
// runs past its allocation).
enum class HostMemory { kOther, kShared, kPageLocked };
HostMemory LookUpHostMemory(const void* p, uint64_t bytes, uint64_t* worker);

// cuPointerGetAttribute of the client's own page-locked memory, answered on the client: true
// with *result set when ptr is such memory.
bool RemoteAnswerHostPointer(CUresult* result, void* data, CUpointer_attribute attribute, CUdeviceptr ptr);

}  // namespace gslice::remote
