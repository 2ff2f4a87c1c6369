// What the process's forwarded calls cost, per call and in all: answered from the client's
// cache, sent without waiting (queued), and round trips (the calling thread waited). Read by
// benchmarks through the client's two exports gslice_remote_stats and
// gslice_remote_write_call_counts (call_stats.cc).
//
// Counted on the call's path by each thread in a block of counts of its own, with plain
// (relaxed, single-writer) loads and stores: a locked add on every call costs as much as
// answering a kept call. A thread takes a block at its first count and gives it back at its
// exit, counts kept, for the next thread to go on adding to; so blocks are as many as threads
// ever ran at once, and readers sum them all (a count may be a call behind its thread).
#pragma once

#include <atomic>
#include <cstdint>

#include "calls.h"

namespace gslice::remote {

enum CallCost { kCachedCall, kAsyncCall, kRoundTrip, kCallCosts };

struct CallCounts {
  std::atomic<uint64_t> n[kCallCosts][kOpCount] = {};
};

namespace call_stats_detail {
// The calling thread's block (nullptr: none yet). __thread: no initialisation wrapper.
extern __thread CallCounts* t_counts;
CallCounts* TakeCounts();
}  // namespace call_stats_detail

// Counts one call of op at that cost. REQUIRES nothing; no lock once the thread has its block.
inline void CountCall(CallCost cost, uint32_t op) {
  CallCounts* counts = call_stats_detail::t_counts;
  if (counts == nullptr) counts = call_stats_detail::TakeCounts();
  std::atomic<uint64_t>& n = counts->n[cost][op];
  n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// The process's calls of op at cost so far, and of every call.
uint64_t CallsOf(CallCost cost, uint32_t op);
uint64_t CallsAt(CallCost cost);

}  // namespace gslice::remote
