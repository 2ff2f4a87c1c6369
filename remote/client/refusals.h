// Refusals on the client: calls and arguments it does not forward, each a CUresult with a log
// line naming the call and who made it (caller.h: the library and its public call), so that a
// program's failure says what it asked for.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace gslice::remote {

// A non-NULL param the client does not forward: CUDA_ERROR_NOT_SUPPORTED.
CUresult RefuseArgument(const char* call, const char* param);
// param of `bytes` bytes, more than one call carries (wire.h: kMaxBuffer): CUDA_ERROR_INVALID_VALUE.
CUresult RefuseSize(const char* call, const char* param, uint64_t bytes);
// A module image whose size cannot be told (image_size.h): CUDA_ERROR_INVALID_IMAGE.
CUresult RefuseImage(const char* call);
// What of a call's arguments (a graph node's kind, a kind of copy) the client does not
// forward: CUDA_ERROR_NOT_SUPPORTED.
CUresult RefuseWhat(const char* call, const char* what);
// A driver function the client does not forward (yet): CUDA_ERROR_NOT_SUPPORTED.
CUresult NotForwarded(const char* name);

}  // namespace gslice::remote
