#include "stream_keys.h"

#include "client_calls.h"

namespace gslice::remote {

CUresult StreamObject(CUcontext, CUstream stream, void** object, int) {
  if (object == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *object = stream;
  return CUDA_SUCCESS;
}

CUresult StreamKey(CUcontext, void* object, uint64_t* key) {
  if (key == nullptr) return CUDA_ERROR_INVALID_VALUE;
  unsigned long long id = 0;
  const CUresult r = gslice_remote_call_cuStreamGetId(static_cast<CUstream>(object), &id);
  if (r != CUDA_SUCCESS) return r;
  *key = id;
  return CUDA_SUCCESS;
}

}  // namespace gslice::remote
