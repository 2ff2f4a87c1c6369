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
// answers race sets only between threads, and then only once.
#pragma once

#include <pthread.h>

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
    uint64_t generation = 0;
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

}  // namespace gslice::remote
