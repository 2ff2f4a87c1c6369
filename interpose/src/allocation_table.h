// The per-process table of counted device memory: key (device pointer, VMM handle, array
// handle, context) -> (bytes, slice GPU, kind). Open addressing with linear probing and
// backward-shift deletion: O(1) insert and erase, no tombstones. One process-local mutex
// guards it (it dies with the process, so a lock here can never block another process);
// growth rehashes into a fresh array under that mutex.
#pragma once

#include <pthread.h>

#include <cstddef>
#include <cstdint>

namespace gslice::shim {

enum class AllocKind : uint8_t {
  kLinear = 1,    // cuMemAlloc, pitch, managed, async
  kVmmHandle = 2, // cuMemCreate
  kArray = 3,     // cuArrayCreate / cuArray3DCreate
  kMipmapped = 4, // cuMipmappedArrayCreate
  kContext = 5,   // per-context overhead
};

struct AllocRecord {
  int64_t bytes = 0;
  int gpu = -1;
};

class AllocationTable {
 public:
  // Constant-initialised: no constructor runs at load.
  constexpr AllocationTable() = default;

  // Records key; false if the table cannot grow (out of host memory) or key is 0.
  bool Insert(uint64_t key, AllocKind kind, AllocRecord rec);
  // Removes key and returns its record; false when absent.
  bool Erase(uint64_t key, AllocKind kind, AllocRecord* rec);
  size_t size();

 private:
  struct Entry {
    uint64_t key;  // 0: empty
    int64_t bytes;
    int32_t gpu;
    uint8_t kind;
  };
  static size_t Hash(uint64_t key, uint8_t kind);
  bool Grow();

  pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;
  Entry* entries_ = nullptr;
  size_t capacity_ = 0;  // power of two
  size_t count_ = 0;
};

}  // namespace gslice::shim
