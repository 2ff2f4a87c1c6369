// The answers the forwarding client keeps (calls.def: cached, cached=GROUP, cached=GROUP(PARAM))
// and what forgets them (drops=GROUP, drops=GROUP(PARAM)). One lock; libc and the standard
// containers only (it lives in the client, inside applications).
//
// Slots: slot 0 keeps the answers of calls.def's `cached` calls for the process's life, slot
// 1 + g those of group g. Within a slot answers are indexed by a handle (the value of the call's
// parameter that cached=GROUP(PARAM) names; 0 for calls that name none) and then by their key
// (opcode, current context, arguments: call.cc). Dropping one handle's answers is one
// erase of its index entry: no scan of the slot.
//
// Which answers a set on a handle may change (DropHandle): a function's or kernel's attributes
// and occupancy belong to that handle's family:
//   - the handle itself (a CUfunction, a CUkernel, or a CUkernel passed where a CUfunction goes:
//     the driver takes either in cuFuncGetAttribute and launches);
//   - a kernel and the functions cuKernelGetFunction gave for it (in any context): a set on
//     the kernel changes the answers about its functions, and a set on one of them may change
//     the kernel's (Relate; the handle values differ on the driver);
//   - the functions cuModuleGetFunction gave from a library's module (cuLibraryGetModule): the
//     client cannot tell which kernel they are, so every per-handle drop drops them too, and a
//     set on one of them drops the whole group.
// Relations are never forgotten one by one: a handle value reused after an unload may inherit
// a stale relation, which only makes a drop larger. Past max_related related handles the
// client stops tracking them and every per-handle drop drops its whole group.
//
// In flight: each slot has a generation, counted up by every drop of the slot, whole or per
// handle; an answer is kept only when its slot's generation is the one seen when the call was
// made. So an answer in flight across any set of its group is answered but not kept (the next
// call asks again). A per-handle generation would keep more answers that raced a set of
// another function, at the cost of a table of generations as large as the handles ever seen;
// answers race sets only between threads, and then only once. The generation is also read
// without the lock (Generation): a copy of an answer taken at generation G holds exactly as
// long as the slot's generation is still G.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace gslice::remote {

class KeptAnswers {
 public:
  // groups: the number of cache groups (slots 1..groups). max_answers: more answers than
  // this in one slot and the slot is emptied (a program that makes kernels without end does
  // not grow the client without end). max_related: related handles tracked (above).
  KeptAnswers(size_t groups, size_t max_answers, size_t max_related);
  KeptAnswers(const KeptAnswers&) = delete;
  KeptAnswers& operator=(const KeptAnswers&) = delete;

  // Under one lock: true with *reply when the slot keeps key's answer under handle; either way
  // *generation is the slot's generation now (what Keep later compares).
  bool LookUp(size_t slot, uint64_t handle, const std::string& key, std::vector<uint8_t>* reply,
              uint64_t* generation);
  // Keeps reply unless the slot was dropped (wholly or per handle) since generation.
  void Keep(size_t slot, uint64_t generation, uint64_t handle, std::string key, const std::vector<uint8_t>& reply);
  // The slot's generation now, without the lock: it has moved on from any generation a copy of
  // one of its answers was taken at once that answer may be stale.
  uint64_t Generation(size_t slot) const { return slots_[slot].generation.load(std::memory_order_acquire); }
  // Forgets every answer of the groups in mask (bit g: group g).
  void DropGroups(uint32_t mask);
  // Forgets, in each group of mask, the answers indexed by handle's family (above).
  void DropHandle(uint32_t mask, uint64_t handle);

  // cuKernelGetFunction(kernel) answered function: they are one family from now on.
  void Relate(uint64_t kernel, uint64_t function);
  // cuLibraryGetModule answered module.
  void NoteLibraryModule(uint64_t module);
  // cuModuleGetFunction(module) answered function: a library's function when module is a
  // library's.
  void NoteModuleFunction(uint64_t module, uint64_t function);

  // The number of answers kept in slot (tests).
  size_t Count(size_t slot);

 private:
  using AnswerMap = std::unordered_map<std::string, std::vector<uint8_t>>;
  struct Slot {
    std::unordered_map<uint64_t, AnswerMap> by_handle;
    size_t count = 0;
    std::atomic<uint64_t> generation{0};  // written under mu_
  };
  // REQUIRES mu_.
  void ClearLocked(Slot* s);
  void EraseLocked(Slot* s, uint64_t handle);
  void AddRelatedLocked(uint64_t a, uint64_t b);
  void StopRelatingLocked();

  pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;
  std::vector<Slot> slots_;  // REQUIRES mu_
  const size_t max_answers_;
  const size_t max_related_;
  // Kernels and their functions, both ways. REQUIRES mu_.
  std::unordered_map<uint64_t, std::vector<uint64_t>> related_;
  std::unordered_set<uint64_t> library_modules_;    // REQUIRES mu_
  std::unordered_set<uint64_t> library_functions_;  // REQUIRES mu_
  bool related_unknown_ = false;                    // REQUIRES mu_: past max_related_
};

// One thread's copies of kept answers, read without a lock: call.cc puts one in front of its
// KeptAnswers, so that the calls frameworks make around every launch (about ten each) cost a
// hash and a compare, not a lock, a map look-up and an allocation. Direct-mapped: a copy
// displaces the one at its index. A copy holds exactly as long as its slot's generation is
// the one it was taken at (KeptAnswers::Generation): a drop anywhere in the slot makes every
// copy of that slot stale, so copies are never newer or older than the store. Keys and
// replies longer than the entry holds are not copied (the store answers them). Not
// thread-safe: one per thread.
class AnswerCopies {
 public:
  static constexpr size_t kEntries = 256;
  static constexpr size_t kKeyBytes = 64;
  static constexpr size_t kReplyBytes = 48;

  AnswerCopies();
  // The reply copied for (op, handle, key) if its generation is `now` (*reply_size set), else
  // nullptr. The key is head (head_size bytes) then tail (tail_size bytes). The pointer holds
  // until the next Put.
  const uint8_t* Find(uint32_t op, uint64_t handle, const uint8_t* head, size_t head_size, const uint8_t* tail,
                      size_t tail_size, uint64_t now, size_t* reply_size) const;
  // Copies reply as the answer for (op, handle, key), kept at generation.
  void Put(uint32_t op, uint64_t handle, const uint8_t* head, size_t head_size, const uint8_t* tail, size_t tail_size,
           uint64_t generation, const uint8_t* reply, size_t reply_size);

 private:
  struct Entry {
    uint64_t generation = 0;
    uint64_t handle = 0;
    uint32_t op = UINT32_MAX;  // UINT32_MAX: empty
    uint16_t key_size = 0;
    uint16_t reply_size = 0;
    uint8_t key[kKeyBytes];
    uint8_t reply[kReplyBytes];
  };
  static size_t Index(uint32_t op, uint64_t handle, const uint8_t* head, size_t head_size, const uint8_t* tail,
                      size_t tail_size);

  Entry entries_[kEntries];
};

}  // namespace gslice::remote
