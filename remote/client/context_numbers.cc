#include "context_numbers.h"

#include <pthread.h>

#include <atomic>

#include "context_stack.h"
#include "log.h"

namespace gslice::remote {

using shim::Log;
using shim::LogLevel;

namespace {

constexpr int kMaxNumbered = 256;  // live contexts with a number at once

struct NumberedContext {
  std::atomic<CUcontext> ctx;  // null: a free entry
  std::atomic<uint64_t> number;
};

NumberedContext g_numbered[kMaxNumbered];
std::atomic<int> g_numbered_used{0};  // entries [0, used) have ever been taken
pthread_mutex_t g_number_mu = PTHREAD_MUTEX_INITIALIZER;
uint64_t g_next_number = 1;  // under g_number_mu; 0 is "no context"

bool FindContextNumber(CUcontext ctx, uint64_t* number) {
  const int used = g_numbered_used.load(std::memory_order_acquire);
  for (int i = 0; i < used; ++i) {
    if (g_numbered[i].ctx.load(std::memory_order_acquire) != ctx) continue;
    const uint64_t n = g_numbered[i].number.load(std::memory_order_acquire);
    // An entry retaken between the two loads has been given another context: look on.
    if (g_numbered[i].ctx.load(std::memory_order_acquire) == ctx) {
      *number = n;
      return true;
    }
  }
  return false;
}

}  // namespace

CUresult ContextNumber(CUcontext ctx, uint64_t* number) {
  if (number == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ctx == nullptr) ctx = CurrentContext();
  if (ctx == nullptr) {  // no context named or current: the number of none
    *number = 0;
    return CUDA_SUCCESS;
  }
  if (FindContextNumber(ctx, number)) return CUDA_SUCCESS;
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&g_number_mu);
  if (!FindContextNumber(ctx, number)) {
    const int used = g_numbered_used.load(std::memory_order_relaxed);
    int slot = -1;
    for (int i = 0; i < used && slot < 0; ++i)
      if (g_numbered[i].ctx.load(std::memory_order_relaxed) == nullptr) slot = i;
    if (slot < 0 && used < kMaxNumbered) slot = used;
    if (slot < 0) {
      r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      *number = g_next_number++;
      g_numbered[slot].number.store(*number, std::memory_order_release);
      g_numbered[slot].ctx.store(ctx, std::memory_order_release);
      if (slot == used) g_numbered_used.store(used + 1, std::memory_order_release);
    }
  }
  pthread_mutex_unlock(&g_number_mu);
  static std::atomic<bool> reported{false};
  if (r != CUDA_SUCCESS && !reported.exchange(true, std::memory_order_relaxed)) {
    shim::InitLog();
    Log(LogLevel::kWarn, "remote: private table tools context slot 4: more than %d live contexts: %s",
        kMaxNumbered, "CUDA_ERROR_OUT_OF_MEMORY");
  }
  return r;
}

void ForgetContextNumber(CUcontext ctx) {
  pthread_mutex_lock(&g_number_mu);
  const int used = g_numbered_used.load(std::memory_order_relaxed);
  for (int i = 0; i < used; ++i) {
    if (g_numbered[i].ctx.load(std::memory_order_relaxed) == ctx)
      g_numbered[i].ctx.store(nullptr, std::memory_order_release);
  }
  pthread_mutex_unlock(&g_number_mu);
}

}  // namespace gslice::remote
