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

// An array of *count elements of size bytes whose count travels in another argument (an
// NVML process list, cuGraphGetNodes' nodes): nothing when count is NULL.
template <typename Count>
inline uint64_t CountedBytes(const Count* count, uint64_t size) {
  return count != nullptr ? ArrayBytes(static_cast<uint64_t>(*count), size) : 0;
}

// cuStreamGetCaptureInfo's outputs the caller asked for (remote/client/capture_calls.cc), and
// the most dependencies one answer carries.
inline constexpr uint8_t kWantId = 1, kWantGraph = 2, kWantDependencies = 4, kWantEdges = 8, kWantCount = 16;
inline constexpr uint8_t kWantAll = 31;
inline constexpr uint64_t kMaxCaptureDependencies = 1u << 16;

// What cuPointerGetAttribute writes for each attribute; more than one call carries (the call is
// refused) for kinds this list does not know, so that no size is guessed.
inline uint64_t PointerAttributeSize(CUpointer_attribute attribute) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:  // a CUmemAccess_flags
      return sizeof(unsigned int);
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:  // a 64-bit mask of CUmemAllocationHandleType
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      return sizeof(uint64_t);
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
      return sizeof(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS);
    default:
      return kMaxBuffer + 1;
  }
}

}  // namespace gslice::remote
