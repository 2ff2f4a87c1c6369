#include "not_cuda_memory.h"

namespace gslice::remote {

NotCudaMemory::NotCudaMemory(size_t max_kept) : max_kept_(max_kept) {}

bool NotCudaMemory::Known(uint64_t context, uint64_t ptr) {
  pthread_mutex_lock(&mu_);
  const bool known = kept_generation_ == generation_.load(std::memory_order_acquire) &&
                     kept_.count(Key{context, ptr}) != 0;
  pthread_mutex_unlock(&mu_);
  return known;
}

void NotCudaMemory::Keep(uint64_t generation, uint64_t context, uint64_t ptr) {
  pthread_mutex_lock(&mu_);
  // A Forget after this check leaves kept_generation_ behind the generation: Known then holds
  // nothing of what is kept here.
  if (generation == generation_.load(std::memory_order_acquire) && pending_ == 0) {
    if (kept_generation_ != generation || kept_.size() >= max_kept_) {
      kept_.clear();
      kept_generation_ = generation;
    }
    kept_.insert(Key{context, ptr});
  }
  pthread_mutex_unlock(&mu_);
}

void NotCudaMemory::ForgetQueued(ThreadMark* mark) {
  pthread_mutex_lock(&mu_);
  if (mark->epoch != epoch_) *mark = ThreadMark{.epoch = epoch_, .pending = false};
  if (!mark->pending) {
    mark->pending = true;
    ++pending_;
  }
  generation_.fetch_add(1, std::memory_order_acq_rel);
  pthread_mutex_unlock(&mu_);
}

void NotCudaMemory::Confirm(ThreadMark* mark) {
  if (!mark->pending) return;
  pthread_mutex_lock(&mu_);
  if (mark->epoch == epoch_) {
    // Before pending_ drops: a question answered while the call was queued is not kept.
    generation_.fetch_add(1, std::memory_order_acq_rel);
    --pending_;
  }
  mark->pending = false;
  pthread_mutex_unlock(&mu_);
}

void NotCudaMemory::BeforeFork() { pthread_mutex_lock(&mu_); }

void NotCudaMemory::AfterForkInParent() { pthread_mutex_unlock(&mu_); }

void NotCudaMemory::AfterForkInChild() {
  kept_.clear();
  pending_ = 0;
  ++epoch_;
  generation_.fetch_add(1, std::memory_order_acq_rel);
  pthread_mutex_unlock(&mu_);
}

size_t NotCudaMemory::Count() {
  pthread_mutex_lock(&mu_);
  const size_t n = kept_.size();
  pthread_mutex_unlock(&mu_);
  return n;
}

}  // namespace gslice::remote
