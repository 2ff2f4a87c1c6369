// Page-locked host memory a client on the same host shares with its worker (wire.h:
// kOpHostShare): the client's cuMemHostAlloc makes a sealed memfd, maps it and passes it; the
// worker maps the same file - at the client's address when that is free here, so that a host
// pointer means the same memory on both sides - and registers it with the driver (portable,
// mapped into the GPU's address space). Copies from and to it then move no bytes through the
// connection (calls.def: hostin/hostout), asynchronous copies stay asynchronous, and kernels
// and memsets reach it through its device pointer (zero-copy), as with local page-locked memory.
//
// Contract against a hostile client: only a memfd of exactly the announced size sealed
// against shrinking is mapped (a file the client could shrink would fault the worker), and a
// request that names shared memory is served only when the whole range lies in one range this
// worker registered (SharedHostPointer); anything else is refused as malformed.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

namespace gslice::remote {

// Looks up the driver calls this needs (dlsym on the worker's libcuda.so.1).
void LoadSharedHost(void* driver);

// Maps and registers fd (see above). On success *worker_addr is where it is mapped here and
// *device_ptr its device pointer (0 when the driver maps none). Otherwise the driver's error
// or CUDA_ERROR_INVALID_VALUE with *why. Takes no ownership of fd. REQUIRES: a current context.
CUresult ShareHost(int fd, uint64_t client_addr, uint64_t bytes, uint64_t* worker_addr, uint64_t* device_ptr,
                   std::string* why);

// Unregisters and unmaps the range mapped at worker_addr. CUDA_ERROR_INVALID_VALUE when none is.
CUresult UnshareHost(uint64_t worker_addr);

// The worker's pointer for [addr, addr + bytes) when it lies within one shared range; nullptr
// otherwise (bytes 0 counts as one byte).
void* SharedHostPointer(uint64_t addr, uint64_t bytes);

}  // namespace gslice::remote
