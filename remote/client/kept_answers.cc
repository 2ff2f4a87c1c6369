#include "kept_answers.h"

#include <string.h>

#include <algorithm>
#include <utility>

namespace gslice::remote {

KeptAnswers::KeptAnswers(size_t groups, size_t max_answers, size_t max_related)
    : slots_(1 + groups), max_answers_(max_answers), max_related_(max_related) {}

bool KeptAnswers::LookUp(size_t slot, uint64_t handle, const std::string& key, std::vector<uint8_t>* reply,
                         uint64_t* generation) {
  pthread_mutex_lock(&mu_);
  bool found = false;
  Slot& s = slots_[slot];
  if (const auto h = s.by_handle.find(handle); h != s.by_handle.end()) {
    if (const auto it = h->second.find(key); it != h->second.end()) {
      *reply = it->second;
      found = true;
    }
  }
  *generation = s.generation.load(std::memory_order_relaxed);
  pthread_mutex_unlock(&mu_);
  return found;
}

void KeptAnswers::Keep(size_t slot, uint64_t generation, uint64_t handle, std::string key,
                       const std::vector<uint8_t>& reply) {
  pthread_mutex_lock(&mu_);
  Slot& s = slots_[slot];
  if (s.generation.load(std::memory_order_relaxed) == generation) {
    const auto h = s.by_handle.find(handle);
    const auto it = h != s.by_handle.end() ? h->second.find(key) : AnswerMap::iterator();
    if (h != s.by_handle.end() && it != h->second.end()) {
      it->second = reply;  // another thread's answer to the same question
    } else {
      if (s.count >= max_answers_) ClearLocked(&s);
      s.by_handle[handle].emplace(std::move(key), reply);
      ++s.count;
    }
  }
  pthread_mutex_unlock(&mu_);
}

void KeptAnswers::ClearLocked(Slot* s) {
  s->by_handle.clear();
  s->count = 0;
}

void KeptAnswers::EraseLocked(Slot* s, uint64_t handle) {
  const auto it = s->by_handle.find(handle);
  if (it == s->by_handle.end()) return;
  s->count -= it->second.size();
  s->by_handle.erase(it);
}

void KeptAnswers::DropGroups(uint32_t mask) {
  pthread_mutex_lock(&mu_);
  for (size_t g = 0; g + 1 < slots_.size() && g < 32; ++g) {
    if ((mask & (1u << g)) == 0) continue;
    Slot& s = slots_[1 + g];
    s.generation.fetch_add(1, std::memory_order_release);
    ClearLocked(&s);
  }
  pthread_mutex_unlock(&mu_);
}

void KeptAnswers::DropHandle(uint32_t mask, uint64_t handle) {
  pthread_mutex_lock(&mu_);
  // A library's function names no kernel the client knows; past max_related_ the family is
  // unknown: the whole group either way.
  const bool whole = related_unknown_ || library_functions_.count(handle) != 0;
  const auto related = related_.find(handle);
  for (size_t g = 0; g + 1 < slots_.size() && g < 32; ++g) {
    if ((mask & (1u << g)) == 0) continue;
    Slot& s = slots_[1 + g];
    s.generation.fetch_add(1, std::memory_order_release);
    if (whole) {
      ClearLocked(&s);
      continue;
    }
    EraseLocked(&s, handle);
    if (related != related_.end()) {
      // A kernel: its functions. A function: its kernel(s), and theirs.
      for (const uint64_t r : related->second) {
        EraseLocked(&s, r);
        if (const auto next = related_.find(r); next != related_.end()) {
          for (const uint64_t rr : next->second) EraseLocked(&s, rr);
        }
      }
    }
    for (const uint64_t f : library_functions_) EraseLocked(&s, f);
  }
  pthread_mutex_unlock(&mu_);
}

void KeptAnswers::AddRelatedLocked(uint64_t a, uint64_t b) {
  std::vector<uint64_t>& to = related_[a];
  if (std::find(to.begin(), to.end(), b) == to.end()) to.push_back(b);
}

void KeptAnswers::StopRelatingLocked() {
  related_unknown_ = true;
  related_.clear();
  library_modules_.clear();
  library_functions_.clear();
}

void KeptAnswers::Relate(uint64_t kernel, uint64_t function) {
  if (kernel == function) return;  // one handle: its own family already
  pthread_mutex_lock(&mu_);
  if (!related_unknown_) {
    AddRelatedLocked(kernel, function);
    AddRelatedLocked(function, kernel);
    if (related_.size() > max_related_) StopRelatingLocked();
  }
  pthread_mutex_unlock(&mu_);
}

void KeptAnswers::NoteLibraryModule(uint64_t module) {
  pthread_mutex_lock(&mu_);
  if (!related_unknown_) {
    library_modules_.insert(module);
    if (library_modules_.size() > max_related_) StopRelatingLocked();
  }
  pthread_mutex_unlock(&mu_);
}

void KeptAnswers::NoteModuleFunction(uint64_t module, uint64_t function) {
  pthread_mutex_lock(&mu_);
  if (!related_unknown_ && library_modules_.count(module) != 0) {
    library_functions_.insert(function);
    if (library_functions_.size() > max_related_) StopRelatingLocked();
  }
  pthread_mutex_unlock(&mu_);
}

size_t KeptAnswers::Count(size_t slot) {
  pthread_mutex_lock(&mu_);
  const size_t n = slots_[slot].count;
  pthread_mutex_unlock(&mu_);
  return n;
}

AnswerCopies::AnswerCopies() = default;

size_t AnswerCopies::Index(uint32_t op, uint64_t handle, const uint8_t* head, size_t head_size, const uint8_t* tail,
                           size_t tail_size) {
  // Eight bytes at a time (keys are a few words of arguments), then the last few one by one;
  // seeded with the op and handle.
  uint64_t h = (static_cast<uint64_t>(op) << 32) ^ handle;
  const auto mix = [&h](const uint8_t* p, size_t n) {
    for (; n >= sizeof(uint64_t); p += sizeof(uint64_t), n -= sizeof(uint64_t)) {
      uint64_t w;
      memcpy(&w, p, sizeof w);
      h = (h ^ w) * 0x9e3779b97f4a7c15ull;
      h ^= h >> 29;
    }
    for (; n != 0; ++p, --n) h = (h ^ *p) * 0x100000001b3ull;
  };
  mix(head, head_size);
  mix(tail, tail_size);
  return static_cast<size_t>(h % kEntries);
}

const uint8_t* AnswerCopies::Find(uint32_t op, uint64_t handle, const uint8_t* head, size_t head_size,
                                  const uint8_t* tail, size_t tail_size, uint64_t now, size_t* reply_size) const {
  if (head_size + tail_size > kKeyBytes) return nullptr;
  const Entry& e = entries_[Index(op, handle, head, head_size, tail, tail_size)];
  if (e.op != op || e.handle != handle || e.generation != now || e.key_size != head_size + tail_size ||
      (head_size != 0 && memcmp(e.key, head, head_size) != 0) ||
      (tail_size != 0 && memcmp(e.key + head_size, tail, tail_size) != 0)) {
    return nullptr;
  }
  *reply_size = e.reply_size;
  return e.reply;
}

void AnswerCopies::Put(uint32_t op, uint64_t handle, const uint8_t* head, size_t head_size, const uint8_t* tail,
                       size_t tail_size, uint64_t generation, const uint8_t* reply, size_t reply_size) {
  if (head_size + tail_size > kKeyBytes || reply_size > kReplyBytes) return;
  Entry& e = entries_[Index(op, handle, head, head_size, tail, tail_size)];
  e.op = op;
  e.handle = handle;
  e.generation = generation;
  e.key_size = static_cast<uint16_t>(head_size + tail_size);
  if (head_size != 0) memcpy(e.key, head, head_size);
  if (tail_size != 0) memcpy(e.key + head_size, tail, tail_size);
  e.reply_size = static_cast<uint16_t>(reply_size);
  if (reply_size != 0) memcpy(e.reply, reply, reply_size);
}

}  // namespace gslice::remote
