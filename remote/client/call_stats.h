// What the process's forwarded calls cost, per call and in all: answered from the client's
// cache, sent without waiting (queued), and round trips (the calling thread waited). Counted
// with relaxed atomics on the call's path; read by benchmarks through the client's two
// exports gslice_remote_stats and gslice_remote_write_call_counts (call_stats.cc).
#pragma once

#include <atomic>
#include <cstdint>

#include "calls.h"

namespace gslice::remote {

// One kind of cost: the total and the same per call (op).
struct CallCounter {
  std::atomic<uint64_t> total{0};
  std::atomic<uint64_t> per_op[kOpCount] = {};

  void Add(uint32_t op) {
    total.fetch_add(1, std::memory_order_relaxed);
    per_op[op].fetch_add(1, std::memory_order_relaxed);
  }
};

extern CallCounter g_cached_calls;
extern CallCounter g_async_calls;
extern CallCounter g_round_trips;

}  // namespace gslice::remote
