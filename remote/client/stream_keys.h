// The private tools context table's streams (export_tables.cc, 21318c60 slots 51 and 39).
// cuBLAS keeps a workspace per stream for a handle given none of its own (cuSOLVER's handle, a
// cuSOLVER SVD's), as cuBLASLt's code does for its calls: it asks slot 51 for the object of the
// stream it was given (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a stream; a flag says
// whether that is the per-thread stream), then slot 39 for that object's key, and finds the
// stream's buffer by the key (and, for the per-thread stream, by its own thread id). Either
// slot failing fails the call (CUBLAS_STATUS_INTERNAL_ERROR, which cuSOLVER reports as its own).
// Traced on driver 580: for the NULL stream slot 51 gives the driver's stream object, slot 39
// for it the key 7, a stream ID (cuStreamGetId's numbering).
// What must hold of the keys is what holds of the driver's: one stream always has the same key,
// and two streams alive at once never share one. The stream's ID (cuStreamGetId, the worker's:
// unique in its process, per worker thread for the per-thread stream, as each client thread has
// a worker thread of its own) is such a key.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace gslice::remote {

// Slot 51: *object = the stream handle itself (the worker's value; the special handles as they
// are), which slot 39 takes back. CUDA_ERROR_INVALID_VALUE when object is null.
CUresult StreamObject(CUcontext ctx, CUstream stream, void** object, int per_thread);
// Slot 39: *key = the stream's ID from the worker (one round trip); the worker's error for a
// stream it does not know. CUDA_ERROR_INVALID_VALUE when key is null.
CUresult StreamKey(CUcontext ctx, void* object, uint64_t* key);

}  // namespace gslice::remote
