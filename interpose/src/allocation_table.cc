#include "allocation_table.h"

#include <stdlib.h>

namespace gslice::shim {
namespace {
struct Lock {
  explicit Lock(pthread_mutex_t* m) : m_(m) { pthread_mutex_lock(m_); }
  ~Lock() { pthread_mutex_unlock(m_); }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;
  pthread_mutex_t* m_;
};
}  // namespace

size_t AllocationTable::Hash(uint64_t key, uint8_t kind) {
  uint64_t x = key ^ (static_cast<uint64_t>(kind) << 56);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<size_t>(x);
}

bool AllocationTable::Grow() {
  size_t cap = capacity_ == 0 ? 1024 : capacity_ * 2;
  auto* fresh = static_cast<Entry*>(calloc(cap, sizeof(Entry)));
  if (fresh == nullptr) return false;
  for (size_t i = 0; i < capacity_; ++i) {
    const Entry& e = entries_[i];
    if (e.key == 0) continue;
    size_t j = Hash(e.key, e.kind) & (cap - 1);
    while (fresh[j].key != 0) j = (j + 1) & (cap - 1);
    fresh[j] = e;
  }
  free(entries_);
  entries_ = fresh;
  capacity_ = cap;
  return true;
}

bool AllocationTable::Insert(uint64_t key, AllocKind kind, AllocRecord rec) {
  if (key == 0) return false;
  Lock lock(&mu_);
  if ((count_ + 1) * 4 > capacity_ * 3 && !Grow()) return false;  // load factor <= 3/4
  const uint8_t k = static_cast<uint8_t>(kind);
  size_t mask = capacity_ - 1;
  size_t i = Hash(key, k) & mask;
  while (entries_[i].key != 0) {
    if (entries_[i].key == key && entries_[i].kind == k) {  // reused address: replace
      entries_[i].bytes = rec.bytes;
      entries_[i].gpu = rec.gpu;
      return true;
    }
    i = (i + 1) & mask;
  }
  entries_[i] = Entry{key, rec.bytes, rec.gpu, k};
  ++count_;
  return true;
}

bool AllocationTable::Erase(uint64_t key, AllocKind kind, AllocRecord* rec) {
  if (key == 0) return false;
  Lock lock(&mu_);
  if (capacity_ == 0) return false;
  const uint8_t k = static_cast<uint8_t>(kind);
  size_t mask = capacity_ - 1;
  size_t i = Hash(key, k) & mask;
  while (entries_[i].key != 0 && !(entries_[i].key == key && entries_[i].kind == k)) i = (i + 1) & mask;
  if (entries_[i].key == 0) return false;
  rec->bytes = entries_[i].bytes;
  rec->gpu = entries_[i].gpu;
  // Backward-shift deletion keeps every probe chain unbroken without tombstones.
  size_t hole = i;
  size_t j = i;
  for (;;) {
    j = (j + 1) & mask;
    if (entries_[j].key == 0) break;
    size_t home = Hash(entries_[j].key, entries_[j].kind) & mask;
    // Move j into the hole if its home is not in the cyclic range (hole, j].
    bool in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!in_range) {
      entries_[hole] = entries_[j];
      hole = j;
    }
  }
  entries_[hole] = Entry{0, 0, 0, 0};
  --count_;
  return true;
}

size_t AllocationTable::size() {
  Lock lock(&mu_);
  return count_;
}

}  // namespace gslice::shim
