#include "call_stats.h"

#include <pthread.h>
#include <stdio.h>

#include <algorithm>
#include <vector>

#include "transport.h"

namespace gslice::remote {

namespace call_stats_detail {
__thread CallCounts* t_counts = nullptr;
}  // namespace call_stats_detail

namespace {

using call_stats_detail::t_counts;

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
std::vector<CallCounts*>* g_blocks = nullptr;  // REQUIRES g_mu; every block, never freed
std::vector<CallCounts*>* g_free = nullptr;    // REQUIRES g_mu; blocks no thread holds
pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
pthread_key_t g_key;

void GiveBack(void* block) {
  pthread_mutex_lock(&g_mu);
  g_free->push_back(static_cast<CallCounts*>(block));
  pthread_mutex_unlock(&g_mu);
  t_counts = nullptr;  // a count later in the thread's exit takes a block again
}

}  // namespace

CallCounts* call_stats_detail::TakeCounts() {
  pthread_once(&g_key_once, [] { pthread_key_create(&g_key, GiveBack); });
  pthread_mutex_lock(&g_mu);
  if (g_blocks == nullptr) {
    g_blocks = new std::vector<CallCounts*>();
    g_free = new std::vector<CallCounts*>();
  }
  CallCounts* block;
  if (!g_free->empty()) {
    block = g_free->back();
    g_free->pop_back();
  } else {
    block = new CallCounts();
    g_blocks->push_back(block);
  }
  pthread_mutex_unlock(&g_mu);
  pthread_setspecific(g_key, block);
  t_counts = block;
  return block;
}

uint64_t CallsOf(CallCost cost, uint32_t op) {
  uint64_t sum = 0;
  pthread_mutex_lock(&g_mu);
  if (g_blocks != nullptr) {
    for (const CallCounts* b : *g_blocks) sum += b->n[cost][op].load(std::memory_order_relaxed);
  }
  pthread_mutex_unlock(&g_mu);
  return sum;
}

uint64_t CallsAt(CallCost cost) {
  uint64_t sum = 0;
  pthread_mutex_lock(&g_mu);
  if (g_blocks != nullptr) {
    for (const CallCounts* b : *g_blocks) {
      for (uint32_t op = 0; op < kOpCount; ++op) sum += b->n[cost][op].load(std::memory_order_relaxed);
    }
  }
  pthread_mutex_unlock(&g_mu);
  return sum;
}

}  // namespace gslice::remote

// The process's forwarded calls so far: out[0] answered from the client's cache, out[1] sent
// without waiting (queued), out[2] round trips (the calling thread waited for the answer).
// For benchmarks (bench/gpu/suites/remote_train.sh), read with dlsym on the loaded client.
extern "C" __attribute__((visibility("default"))) void gslice_remote_stats(uint64_t out[3]) {
  using namespace gslice::remote;
  out[0] = CallsAt(kCachedCall);
  out[1] = CallsAt(kAsyncCall);
  out[2] = CallsAt(kRoundTrip);
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
    const Row r{op, CallsOf(kCachedCall, op), CallsOf(kAsyncCall, op), CallsOf(kRoundTrip, op)};
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

// What the added delay (GSLICE_REMOTE_ADDED_DELAY_US, benchmarks only; added_delay.h) did so
// far: out[0] the round trip it adds in ns (0: none), out[1] the pieces it held and then
// wrote, out[2] the shortest time one was held in ns (UINT64_MAX: none yet), out[3] the most
// pieces it held at once. For benchmarks and tests, read with dlsym on the loaded client.
extern "C" __attribute__((visibility("default"))) void gslice_remote_added_delay(uint64_t out[4]) {
  const gslice::remote::DelayLineStats stats = gslice::remote::AddedDelayStats();
  out[0] = static_cast<uint64_t>(stats.round_trip_ns);
  out[1] = stats.pieces;
  out[2] = stats.least_held_ns < 0 ? UINT64_MAX : static_cast<uint64_t>(stats.least_held_ns);
  out[3] = stats.most_on_line;
}
