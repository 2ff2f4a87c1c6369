// The addresses the worker's driver said are not CUDA memory, kept on the client, and what
// forgets them (pointer_answers.h says which calls do and what is answered from them). One lock;
// libc and the standard containers only (it lives in the client, inside applications).
//
// Invariant: an address is answered from here only while no call that may map memory has been
// made since its answer was asked for. An address turns into CUDA memory only when a mapping is
// made, and the client cannot tell which addresses a mapping covers (a graph's memory, a mapping
// at a reserved address), so such a call forgets every address (Forget).
//
// In flight: one generation, counted up by every forgetting; an answer is kept only when the
// generation is still the one read before its question was sent (Keep). A forgetting call that
// is waited for forgets before it leaves and again once answered (call.cc), so a question another
// thread had answered meanwhile is not kept, whichever of the two the worker ran first. Kept
// addresses carry the generation they were kept at: a forgetting is one atomic add, and what it
// forgot is dropped by the next Keep.
//
// Queued forgetting calls (calls.def: async, not waited for) are made when the worker gets to
// them, which the client learns only from the next answer on the thread that queued them (a
// thread's calls run in order on its lane). From ForgetQueued until that thread's Confirm no
// address is kept, by any thread; Confirm forgets once more, since another thread's question may
// have been answered before the worker made the queued call. A thread that exits with such a call
// unconfirmed leaves the process keeping nothing from then on: safe, only slower.
//
// Bounded: past max_kept addresses the store is emptied.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <unordered_set>

namespace gslice::remote {

class NotCudaMemory {
 public:
  // One thread's queued forgetting calls that no answer has confirmed yet. Owned by that thread
  // (not thread-safe), zero-initialised.
  struct ThreadMark {
    uint64_t epoch = 0;  // the store's epoch when pending was set
    bool pending = false;
  };

  explicit NotCudaMemory(size_t max_kept);
  NotCudaMemory(const NotCudaMemory&) = delete;
  NotCudaMemory& operator=(const NotCudaMemory&) = delete;

  // Whether ptr, asked about in context, is kept as not CUDA memory.
  bool Known(uint64_t context, uint64_t ptr);
  // The generation now, without the lock: read before a question is sent, handed to Keep.
  uint64_t Generation() const { return generation_.load(std::memory_order_acquire); }
  // Keeps (context, ptr) as not CUDA memory, unless anything was forgotten since generation or a
  // queued forgetting call is not confirmed yet.
  void Keep(uint64_t generation, uint64_t context, uint64_t ptr);
  // A call that may map memory: forgets every address. No lock.
  void Forget() { generation_.fetch_add(1, std::memory_order_acq_rel); }
  // The thread of mark queued a call that may map memory: forgets every address, and keeps none
  // until Confirm(mark).
  void ForgetQueued(ThreadMark* mark);
  // The thread of mark had an answer: the calls it queued before it have been made. No lock
  // unless the thread has queued such a call.
  void Confirm(ThreadMark* mark);
  // Around fork (pthread_atfork): the lock is held across it, so that the child's copy is whole.
  // In the child nothing is kept and no thread's queued call is pending (the parent's threads are
  // not there to confirm theirs; marks taken before the fork are ignored).
  void BeforeFork();
  void AfterForkInParent();
  void AfterForkInChild();

  // The addresses kept now, forgotten ones included until the next Keep drops them (tests).
  size_t Count();

 private:
  struct Key {
    uint64_t context;
    uint64_t ptr;
    bool operator==(const Key& o) const { return context == o.context && ptr == o.ptr; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return static_cast<size_t>((k.ptr ^ (k.context * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull);
    }
  };

  pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;
  std::unordered_set<Key, KeyHash> kept_;  // REQUIRES mu_
  uint64_t kept_generation_ = 0;           // REQUIRES mu_: the generation kept_ was kept at
  size_t pending_ = 0;                     // REQUIRES mu_: threads with an unconfirmed queued call
  uint64_t epoch_ = 1;                     // REQUIRES mu_: counted up in a forked child
  std::atomic<uint64_t> generation_{0};    // written under mu_ or by Forget
  const size_t max_kept_;
};

}  // namespace gslice::remote
