// The private tools context table's numbers (export_tables.cc, 21318c60 slot 4): what the
// driver tells tools about a context. cuBLASLt asks for the number of the context the tools TLS
// table names (about once per matmul) and keys its per-context state (kernels loaded,
// heuristics) by it, so what must hold is what holds of the driver's numbers: each live context
// has its own, and a context created later never gets an earlier one's, even at the same
// address. Numbers are given out on the client from one counter and forgotten when their
// context is destroyed or reset; asking costs no round trip and, once a context has its
// number, takes no lock.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace gslice::remote {

// ctx's number (null ctx: the calling thread's current context; none current: 0).
// CUDA_ERROR_OUT_OF_MEMORY, logged once, with more than 256 live contexts numbered.
CUresult ContextNumber(CUcontext ctx, uint64_t* number);
// ctx is gone: its number is never given again, its entry is free.
void ForgetContextNumber(CUcontext ctx);

}  // namespace gslice::remote
