// Events made ahead. An event the driver makes is the same whenever it is made: never
// recorded, of the context current at its making and of its flags; so events made a batch at a
// time, in one round trip, and handed out one per cuEventCreate of the same context and flags
// are the events the program would have got. The first batch for a context and flags is
// kFirstBatch events, each next one twice the last up to kMaxBatch (a program that makes
// events all along, as PyTorch does, soon pays a round trip per hundred); at most one batch's
// worth waits per context and flags.
//
// Destroying an event the client gave out (from a batch or made one at a time) and has not seen
// destroyed cannot fail while its context lives, so it is sent without waiting (a driver error,
// should one come, reaches the program at its thread's next synchronisation). Before a context
// may go (cuCtxDestroy, cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxReset) the events made
// ahead are destroyed and the events given out forgotten: from then on their destroys wait.
// A forked child's events are its parent's worker's: it forgets them and makes its own.
#include "event_pool.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "call.h"
#include "call_stats.h"
#include "context_stack.h"
#include "transport.h"

namespace gslice::remote {
namespace {

constexpr size_t kFirstBatch = 16;
constexpr size_t kMaxBatch = 128;
constexpr unsigned int kPooledFlags = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING;

struct Events {
  pid_t pid = 0;  // the process whose worker made them
  std::map<std::pair<CUcontext, unsigned int>, std::vector<CUevent>> ahead;
  std::map<std::pair<CUcontext, unsigned int>, size_t> last_batch;  // per context and flags
  std::unordered_set<CUevent> given;  // given out, not seen destroyed
  uint64_t generation = 0;            // counts ReleaseEventsAhead: a batch made across one is not kept
};

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
Events* g_events = nullptr;  // REQUIRES g_mu. Never freed: calls may come during exit.

// REQUIRES g_mu.
Events& EventsLocked() {
  if (g_events == nullptr) g_events = new Events();
  if (g_events->pid != ThisProcess()) {
    g_events->ahead.clear();
    g_events->last_batch.clear();
    g_events->given.clear();
    g_events->pid = ThisProcess();
  }
  return *g_events;
}

// cuEventDestroy_v2(event) as calls.def encodes it; waited for unless known to succeed.
CUresult Destroy(CUevent event, bool wait) {
  Call call(kOp_cuEventDestroy_v2);
  call.request().Put(event);
  if (wait) call.WaitForAnswer();
  const CUresult result = call.Run();
  if (!wait || !call.answered()) return result;
  return call.reply().AtEnd() ? result : call.Malformed();
}

}  // namespace

bool RemoteEventFromPool(CUresult* result, CUevent* event, unsigned int flags) {
  const CUcontext ctx = CurrentContext();
  if (event == nullptr || ctx == nullptr || (flags & ~kPooledFlags) != 0) return false;
  const std::pair<CUcontext, unsigned int> key{ctx, flags};
  pthread_mutex_lock(&g_mu);
  Events& events = EventsLocked();
  std::vector<CUevent>& ready = events.ahead[key];
  if (!ready.empty()) {
    *event = ready.back();
    ready.pop_back();
    events.given.insert(*event);
    pthread_mutex_unlock(&g_mu);
    CountCall(kCachedCall, kOp_cuEventCreate);
    *result = CUDA_SUCCESS;
    return true;
  }
  const uint64_t generation = events.generation;
  size_t& last = events.last_batch[key];
  const size_t batch = last == 0 ? kFirstBatch : std::min(2 * last, kMaxBatch);
  last = batch;
  pthread_mutex_unlock(&g_mu);

  // cuEventCreate(&event, flags) as calls.def encodes it, batch times in one round trip.
  std::deque<Call> calls;
  Call* pointers[kMaxBatch];
  for (size_t i = 0; i < batch; ++i) {
    calls.emplace_back(kOp_cuEventCreate);
    calls.back().request().Put<uint8_t>(1);
    calls.back().request().Put(flags);
    pointers[i] = &calls.back();
  }
  CUresult results[kMaxBatch];
  Call::RunTogether(pointers, batch, results);
  std::vector<CUevent> made;
  for (size_t i = 0; i < batch; ++i) {
    CUevent e = nullptr;
    if (results[i] != CUDA_SUCCESS) continue;
    if (!calls[i].reply().Get(&e) || !calls[i].reply().AtEnd()) {
      *result = calls[i].Malformed();
      return true;
    }
    made.push_back(e);
  }
  if (made.empty()) {
    *result = results[0];  // the driver's refusal (or the connection's failure) is the program's
    return true;
  }
  *event = made.back();
  made.pop_back();
  pthread_mutex_lock(&g_mu);
  Events& now = EventsLocked();
  now.given.insert(*event);
  // A context that went meanwhile may have taken these with it: they are left to the worker.
  if (now.generation == generation) {
    std::vector<CUevent>& pool = now.ahead[key];
    pool.insert(pool.end(), made.begin(), made.end());
  }
  pthread_mutex_unlock(&g_mu);
  *result = CUDA_SUCCESS;
  return true;
}

void RemoteAfterEventCreate(CUevent* event, unsigned int) {
  if (event == nullptr) return;
  pthread_mutex_lock(&g_mu);
  EventsLocked().given.insert(*event);
  pthread_mutex_unlock(&g_mu);
}

bool RemoteDestroyEvent(CUresult* result, CUevent event) {
  pthread_mutex_lock(&g_mu);
  const bool known = EventsLocked().given.erase(event) != 0;
  pthread_mutex_unlock(&g_mu);
  *result = Destroy(event, !known);
  return true;
}

void ReleaseEventsAhead() {
  std::vector<CUevent> ahead;
  pthread_mutex_lock(&g_mu);
  Events& events = EventsLocked();
  for (auto& [key, ready] : events.ahead) ahead.insert(ahead.end(), ready.begin(), ready.end());
  events.ahead.clear();
  events.last_batch.clear();
  events.given.clear();
  ++events.generation;
  pthread_mutex_unlock(&g_mu);
  for (CUevent e : ahead) Destroy(e, false);
}

}  // namespace gslice::remote
