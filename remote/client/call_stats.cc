#include "call_stats.h"

#include <stdio.h>

#include <algorithm>
#include <vector>

namespace gslice::remote {

CallCounter g_cached_calls;
CallCounter g_async_calls;
CallCounter g_round_trips;

}  // namespace gslice::remote

// The process's forwarded calls so far: out[0] answered from the client's cache, out[1] sent
// without waiting (queued), out[2] round trips (the calling thread waited for the answer).
// For benchmarks (bench/gpu/suites/remote_train.sh), read with dlsym on the loaded client.
extern "C" __attribute__((visibility("default"))) void gslice_remote_stats(uint64_t out[3]) {
  using namespace gslice::remote;
  out[0] = g_cached_calls.total.load(std::memory_order_relaxed);
  out[1] = g_async_calls.total.load(std::memory_order_relaxed);
  out[2] = g_round_trips.total.load(std::memory_order_relaxed);
}

// The same counters per call, written to path as lines "NAME CACHED ASYNC ROUND_TRIPS" for the
// calls made at least once, most round trips first. Returns 0, or -1 when path cannot be
// written. For benchmarks (bench/gpu/remote/train.py), read with dlsym on the loaded client.
extern "C" __attribute__((visibility("default"))) int gslice_remote_write_call_counts(const char* path) {
  using namespace gslice::remote;
  struct Row {
    uint32_t op;
    uint64_t cached, async, trips;
  };
  std::vector<Row> rows;
  for (uint32_t op = 0; op < kOpCount; ++op) {
    const Row r{op, g_cached_calls.per_op[op].load(std::memory_order_relaxed),
                g_async_calls.per_op[op].load(std::memory_order_relaxed),
                g_round_trips.per_op[op].load(std::memory_order_relaxed)};
    if (r.cached + r.async + r.trips > 0) rows.push_back(r);
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.trips != b.trips ? a.trips > b.trips : a.async + a.cached > b.async + b.cached;
  });
  FILE* f = path != nullptr ? fopen(path, "we") : nullptr;
  if (f == nullptr) return -1;
  for (const Row& r : rows) {
    fprintf(f, "%s %llu %llu %llu\n", kOpNames[r.op], static_cast<unsigned long long>(r.cached),
            static_cast<unsigned long long>(r.async), static_cast<unsigned long long>(r.trips));
  }
  return fclose(f) == 0 ? 0 : -1;
}
