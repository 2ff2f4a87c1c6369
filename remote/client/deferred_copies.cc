#include "deferred_copies.h"

#include <pthread.h>

#include <cstring>
#include <unordered_map>

namespace gslice::remote {

namespace {

// Where each token's bytes go.
struct DeferredTarget {
  void* p;
  uint64_t bytes;
};
pthread_mutex_t g_deferred_mu = PTHREAD_MUTEX_INITIALIZER;
std::unordered_map<uint64_t, DeferredTarget>* g_deferred = nullptr;  // REQUIRES g_deferred_mu
uint64_t g_next_token = 0;                                           // REQUIRES g_deferred_mu

}  // namespace

bool ApplyDeferred(const std::vector<uint8_t>& frame) {
  uint64_t token = 0;
  if (frame.size() < sizeof token) return false;
  std::memcpy(&token, frame.data(), sizeof token);
  pthread_mutex_lock(&g_deferred_mu);
  DeferredTarget target{nullptr, 0};
  bool known = false;
  if (g_deferred != nullptr) {
    if (auto it = g_deferred->find(token); it != g_deferred->end()) {
      target = it->second;
      known = true;
      g_deferred->erase(it);
    }
  }
  pthread_mutex_unlock(&g_deferred_mu);
  if (!known || frame.size() - sizeof token != target.bytes) return false;
  if (target.bytes != 0) std::memcpy(target.p, frame.data() + sizeof token, target.bytes);
  return true;
}

uint64_t ExpectDeferred(void* p, uint64_t bytes) {
  pthread_mutex_lock(&g_deferred_mu);
  if (g_deferred == nullptr) g_deferred = new std::unordered_map<uint64_t, DeferredTarget>();
  const uint64_t token = ++g_next_token;
  (*g_deferred)[token] = DeferredTarget{p, bytes};
  pthread_mutex_unlock(&g_deferred_mu);
  return token;
}

}  // namespace gslice::remote
