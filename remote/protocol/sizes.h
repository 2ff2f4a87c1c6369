// Sizes that calls.def's buffer expressions use, the same on both sides: what the driver
// reads or writes through a void* whose size depends on another argument.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "wire.h"

namespace gslice::remote {

// count elements of size bytes, or more than one call carries when that overflows (the call
// is then refused instead of sizing a short buffer).
inline uint64_t ArrayBytes(uint64_t count, uint64_t size) {
  return count > kMaxBuffer / (size != 0 ? size : 1) ? kMaxBuffer + 1 : count * size;
}

// cuMemPoolGet/SetAttribute's value: int for the reuse flags, cuuint64_t for the rest (and for
// attributes newer than this list: the larger of the two, so the driver never writes past it).
inline uint64_t MemPoolAttributeSize(CUmemPool_attribute attr) {
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      return sizeof(int);
    default:
      return sizeof(cuuint64_t);
  }
}

}  // namespace gslice::remote
