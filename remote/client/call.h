// One forwarded call of calls.def (the generated code builds and runs them): a request that
// starts with the calling thread's context and lane, and its answer. Run() takes it the
// cheapest way the call allows: from the answers the client keeps (calls.def: cached,
// cached=GROUP(PARAM)), from the probe before the process holds a worker (worker_attach.h),
// queued without waiting (calls.def: async), or as a round trip on the worker's connection
// (transport.h). The connection's locks are held only inside Run().
//
// The answer cache: answers of `cached` calls are kept for the process's life, those of a
// group's until a call that drops them (calls.def: drops=GROUP, drops=GROUP(PARAM)), each
// indexed by its handle (kept_answers.h). Thread-safe (KeptAnswers' own lock).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "calls.h"
#include "client_trace.h"
#include "wire.h"

namespace gslice::remote {

struct ThreadState;  // what a thread keeps between its calls (call.cc)

// A request being built and its reply.
class Call {
 public:
  // Starts the request with the calling thread's current context and lane.
  explicit Call(uint32_t op);
  // Leaves the request's buffer to the thread's next call.
  ~Call();
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;
  Writer& request() { return request_; }
  // One round trip. Returns the driver's result, or a connection failure.
  CUresult Run();
  // Runs n calls as one round trip: every request leaves before the first answer is waited
  // for, so the calling thread waits once. For calls the client neither keeps answers of nor
  // queues (calls.def: neither cached nor async), made once the process holds its worker or
  // may attach. results[i] gets calls[i]'s result; returns the connection's failure, if any.
  static CUresult RunTogether(Call* const* calls, size_t n, CUresult* results);
  // The reply after the result (valid after Run returned CUDA_SUCCESS, or for custom calls
  // that read outputs after an error too).
  Reader& reply() { return reader_; }
  // Whether the server answered (the result is the driver's, not a connection failure).
  bool answered() const { return answered_; }
  // The reply does not match the call: the connection is dropped, kLostResult.
  CUresult Malformed();
  // For a call the client keeps answers of (calls.def: cached, cached=GROUP): true, with the
  // reply ready, when it holds this call's answer; nothing is sent either way.
  bool AnsweredFromCache();
  // For an async call (calls.def: async): this one is waited for, and answered with what the
  // driver wrote (a copy into memory the worker cannot reach).
  void WaitForAnswer() { wait_ = true; }
  // The handle this call's answers are indexed by (calls.def: cached=GROUP(PARAM)), or the
  // handle whose answers it drops (drops=GROUP(PARAM)): the parameter's value (HandleBits).
  // Set before Run or AnsweredFromCache; 0 when the call names none.
  void set_cache_handle(uint64_t handle) { cache_handle_ = handle; }
  // The generation of the addresses kept as not CUDA memory when this call was made, before its
  // request left (pointer_answers.h): an answer about a pointer is kept against it.
  uint64_t not_cuda_generation() const { return not_cuda_generation_; }

 private:
  // Where a successful answer is kept: its cache slot, key, and the slot's generation when
  // the call was made.
  struct Kept {
    size_t slot = 0;
    uint64_t generation = 0;
    std::string key;
  };
  // Run() without its timeline record (client_trace.h); sets mode_ and seq_.
  CUresult Forward();
  // AnsweredFromCache, leaving in *kept where this call's answer would be kept (its slot, key
  // and the slot's generation at the look).
  bool FromCache(Kept* kept);
  // Reads the result from reply_buffer_ (the answer to this call) and keeps a successful
  // answer as *kept says (nullptr: not kept).
  CUresult Answered(Kept* kept);

  // Answers this call from a reply that lives as long as it (the cache's).
  void AnsweredFromCopy(const uint8_t* reply, size_t size);

  ThreadState* const state_;  // the calling thread's
  uint32_t op_;
  CallMode mode_ = CallMode::kFailed;  // how it went (the timeline's record)
  uint32_t seq_ = 0;                   // the request's frame seq (0: none sent)
  Writer request_;
  std::vector<uint8_t> reply_buffer_;
  Reader reader_;
  bool answered_ = false;
  bool wait_ = false;
  uint64_t cache_handle_ = 0;
  uint64_t not_cuda_generation_;
  // A reply copied from the thread's copies of kept answers (kept_answers.h: AnswerCopies).
  uint8_t copied_reply_[48];
};

// A handle parameter's value as the client's kept answers index it.
template <typename T>
uint64_t HandleBits(T value) {
  if constexpr (std::is_pointer_v<T>) {
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(value));
  } else {
    return static_cast<uint64_t>(value);
  }
}

// Kernels, functions and libraries' modules the client has seen answered: what a set of one
// handle's attribute may change (kept_answers.h: its family).
void RelateKernelFunction(CUkernel kernel, CUfunction function);
void NoteLibraryModule(CUmodule module);
void NoteModuleFunction(CUmodule module, CUfunction function);

}  // namespace gslice::remote
