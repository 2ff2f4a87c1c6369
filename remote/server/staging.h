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

}  // namespace gslice::remote
