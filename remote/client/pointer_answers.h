// Pointer queries the client answers from what the worker answered before: an address its
// driver said is not CUDA memory is answered so again without a round trip, until a call that may
// map memory is made (the addresses are kept by not_cuda_memory.h). XLA asks whether a host
// buffer is page-locked before each copy from or to it; the worker's answer for the program's
// pageable memory is CUDA_ERROR_INVALID_VALUE every time.
//
// What is kept: cuPointerGetAttribute's CUDA_ERROR_INVALID_VALUE for
// CU_POINTER_ATTRIBUTE_MEMORY_TYPE, with a buffer for the answer, only. Every CUDA pointer has a
// memory type, and the driver fails that attribute exactly when the pointer was not allocated by,
// mapped by or registered with a context (cudaPointerGetAttributes reports such memory as
// unregistered host memory). Other attributes also fail for valid pointers (the device pointer of
// host memory that is not mapped, the host pointer of device memory, P2P tokens, a pool handle),
// and what CONTEXT answers for memory of no context (virtual memory management, pools) is not
// documented: their failures say nothing about the pointer, and are neither kept nor answered.
// From a kept address the client answers MEMORY_TYPE (CUDA_ERROR_INVALID_VALUE), and
// cuPointerGetAttributes (every attribute its default, as the driver documents for a pointer that
// is not CUDA's; host_memory.cc). Keyed by the address and the calling thread's current context,
// which the worker makes current before asking. Positive answers are not kept: frees change them.
//
// What forgets them: every call that reaches the worker through the client's call path
// (call.cc), but for the calls of one short list that cannot map memory (pointer_answers.cc:
// launches, copies, memsets, frees, stream and event work, executable graphs' parameters, pointer
// queries, getters, NVML); a call added to calls.def forgets until it is listed there. The
// client's own page-locked memory calls forget too (host_memory.cc), and that memory is answered
// from the client's ranges before kept addresses are looked at. A graph launch maps memory only
// when its graph allocates (memory allocation nodes, which come only from stream-ordered
// allocations captured into a graph: cuGraphAddMemAllocNode is not forwarded and cuGraphAddNode
// refuses the kind): it is on the list until the process makes its first stream-ordered
// allocation (or adds an allocation node), and forgets from then on. Instantiating a graph,
// adding it as a child node and updating an executable graph copy the nodes a graph already has:
// none makes an allocation node of its own (instantiating, which may upload, forgets anyway).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "call.h"
#include "not_cuda_memory.h"

namespace gslice::remote {

// Whether a call of op that reaches the worker may map memory (then it forgets every kept
// address).
bool MayMapMemory(uint32_t op);

// Around one call of op that reaches the worker (call.cc), by the thread whose mark is given.
// Before it leaves: notes a stream-ordered allocation (graph launches forget from then on) and
// forgets if op may map memory; queued (not waited for): until the thread's next answer.
void BeforeSending(uint32_t op, bool queued, NotCudaMemory::ThreadMark* mark);
// Once the call was answered or failed (answered: the worker answered it, so the calls the thread
// queued before it have been made): forgets again if op may map memory.
void AfterAnswer(uint32_t op, bool answered, NotCudaMemory::ThreadMark* mark);

// The generation of the kept addresses now (a Call takes it when made, before its request leaves).
uint64_t NotCudaGeneration();

// cuGraphAddNode was asked for a memory allocation node (graph_nodes.cc): graph launches forget
// from now on.
void NoteGraphAllocation();

// The client's own calls that may make host memory CUDA's (host_memory.cc).
void ForgetNotCudaMemory();

// Whether ptr is kept as not CUDA memory for the calling thread's current context.
bool KnownNotCudaMemory(CUdeviceptr ptr);

// calls.def's hooks of cuPointerGetAttribute. before=: the client's own page-locked memory
// (host_memory.h), then a kept address (counted as answered from the cache). answered=: keeps the
// worker's negative answer, if it is one (above), against the generation the call was made at.
bool RemoteAnswerPointer(CUresult* result, void* data, CUpointer_attribute attribute, CUdeviceptr ptr);
void RemoteKeepPointerAnswer(const Call& call, CUresult result, void* data, CUpointer_attribute attribute,
                             CUdeviceptr ptr);

}  // namespace gslice::remote
