// Page-locked staging for asynchronous host-to-device copies whose bytes came in the message
// (memory the worker does not share with its client: another host, pageable memory). As the
// driver does for pageable memory, the bytes are copied into page-locked memory of the
// worker's and the copy is queued from there: it stays asynchronous (the worker does not wait
// for the stream), and the program may change its buffer as soon as the call returned. A
// block returns to the pool once an event recorded after the copy has completed.
//
// The pool holds at most kMaxStagingBytes; past it a copy waits for the oldest block in
// flight. A copy that cannot be staged (larger than a block, page-locked memory refused, no
// event) is made as before: queued, then its stream synchronised.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <cstring>

namespace gslice::remote {

inline constexpr uint64_t kMaxStagingBytes = 256ull << 20;
inline constexpr uint64_t kMinStagingBlock = 64 * 1024;
inline constexpr uint64_t kMaxStagingBlock = 32ull << 20;

// Looks up the driver calls the pool needs (dlsym on the worker's libcuda.so.1).
void LoadStaging(void* driver);

// One staged copy's block, returned to the pool when this goes out of scope unless it was
// handed to a stream.
class Staged {
 public:
  Staged() = default;
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;
  ~Staged();
  // Copies n bytes into a block of the pool. False (nothing held) when it cannot.
  // REQUIRES: a current context (blocks are allocated in it, portable).
  bool Stage(const uint8_t* data, uint64_t n);
  const void* data() const { return block_; }
  // After the copy from data() was queued on stream (per_thread: the call was a _ptsz one):
  // the block returns to the pool once the stream has passed this point. CUDA_SUCCESS, or the
  // result of synchronising the stream when no event could be recorded there.
  CUresult HandTo(CUstream stream, bool per_thread, uint32_t sync_op);

 private:
  void* block_ = nullptr;
  uint64_t size_ = 0;
};

// A device-to-host copy on a stream into the client's page-locked memory, deferred (wire.h:
// kOpDeferredData): the driver copies into a block of the pool (or, with none free, a buffer
// of the heap and the stream is synchronised), and the bytes go to the client once an event
// recorded after the copy has completed, before the answer of any later request.
class DeferredOut {
 public:
  DeferredOut() = default;
  DeferredOut(const DeferredOut&) = delete;
  DeferredOut& operator=(const DeferredOut&) = delete;
  ~DeferredOut();
  // Where the driver writes n bytes; nullptr when no memory is left. REQUIRES: a current context.
  void* Prepare(uint64_t n);
  // After the copy into Prepare's memory was queued on stream: the bytes go to the client, as
  // token, once it completed. CUDA_SUCCESS, or the result of synchronising the stream when no
  // event could mark it (the bytes then go with the next answer).
  CUresult HandTo(uint64_t token, CUstream stream, bool per_thread, uint32_t sync_op);

 private:
  uint8_t* frame_ = nullptr;  // u64 token | the bytes
  uint64_t size_ = 0;         // the block's size (0: a buffer of the heap)
  uint64_t n_ = 0;
};

// Sends (write(payload, n) for each, a kOpDeferredData frame's payload) the deferred copies that
// completed, in the order they were made, and forgets them; a copy whose stream failed is
// forgotten unsent (its error reaches the client as the stream's). False when a write failed.
// REQUIRES: the caller holds the lock of the client's channel (one writer at a time).
template <typename Write>
bool SendCompletedDeferred(Write&& write);

// For SendCompletedDeferred: the next completed copy's frame payload, removed from the pending
// ones (nullptr when none). Release it with ReleaseDeferred once written.
const uint8_t* TakeCompletedDeferred(uint64_t* n, void** owner);
void ReleaseDeferred(void* owner);
// Whether any deferred copy waits to be sent (a relaxed look, for the answer path).
bool AnyDeferred();

template <typename Write>
bool SendCompletedDeferred(Write&& write) {
  if (!AnyDeferred()) return true;
  for (;;) {
    uint64_t n = 0;
    void* owner = nullptr;
    const uint8_t* payload = TakeCompletedDeferred(&n, &owner);
    if (payload == nullptr) return true;
    const bool ok = write(payload, n);
    ReleaseDeferred(owner);
    if (!ok) return false;
  }
}

}  // namespace gslice::remote
