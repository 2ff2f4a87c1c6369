// The addresses the forwarding client keeps as not CUDA memory (remote/client/not_cuda_memory.h):
// what forgets them, answers in flight across a forgetting, queued forgetting calls until their
// thread's next answer, the bound, and a forked child's copy.
#include "not_cuda_memory.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace gslice::remote {
namespace {

constexpr uint64_t kContext = 0x1000;
constexpr uint64_t kOtherContext = 0x2000;
constexpr uint64_t kHost = 0x7f0000001000;
constexpr uint64_t kOtherHost = 0x7f0000002000;

TEST(NotCudaMemory, AKeptAddressIsKnownInItsContextOnly) {
  NotCudaMemory store(16);
  EXPECT_FALSE(store.Known(kContext, kHost));
  store.Keep(store.Generation(), kContext, kHost);
  EXPECT_TRUE(store.Known(kContext, kHost));
  EXPECT_FALSE(store.Known(kOtherContext, kHost));
  EXPECT_FALSE(store.Known(kContext, kOtherHost));
}

TEST(NotCudaMemory, AForgettingForgetsEveryAddress) {
  NotCudaMemory store(16);
  store.Keep(store.Generation(), kContext, kHost);
  store.Keep(store.Generation(), kOtherContext, kOtherHost);
  store.Forget();
  EXPECT_FALSE(store.Known(kContext, kHost));
  EXPECT_FALSE(store.Known(kOtherContext, kOtherHost));
  // Kept again, only what is kept after it.
  store.Keep(store.Generation(), kContext, kHost);
  EXPECT_TRUE(store.Known(kContext, kHost));
  EXPECT_FALSE(store.Known(kOtherContext, kOtherHost));
  EXPECT_EQ(store.Count(), 1u);
}

TEST(NotCudaMemory, AnAnswerInFlightAcrossAForgettingIsNotKept) {
  NotCudaMemory store(16);
  const uint64_t asked = store.Generation();  // the question leaves
  store.Forget();                             // a call that may map memory, meanwhile
  store.Keep(asked, kContext, kHost);         // the answer comes
  EXPECT_FALSE(store.Known(kContext, kHost));
  EXPECT_EQ(store.Count(), 0u);
}

TEST(NotCudaMemory, NothingIsKeptWhileAQueuedForgettingCallIsUnconfirmed) {
  NotCudaMemory store(16);
  NotCudaMemory::ThreadMark launcher, other;
  store.Keep(store.Generation(), kContext, kHost);
  store.ForgetQueued(&launcher);  // a graph launch that may map memory, not waited for
  EXPECT_FALSE(store.Known(kContext, kHost));
  // Another thread's question, asked and answered while the launch may not have run yet.
  const uint64_t asked = store.Generation();
  store.Keep(asked, kContext, kHost);
  EXPECT_FALSE(store.Known(kContext, kHost));
  store.Confirm(&other);  // another thread's answer says nothing of the launch
  store.Keep(store.Generation(), kContext, kHost);
  EXPECT_FALSE(store.Known(kContext, kHost));
  // The launching thread's next answer: the launch has run. An answer asked before is still
  // not kept (the worker may have answered it before running the launch); one asked after is.
  store.Confirm(&launcher);
  store.Keep(asked, kContext, kHost);
  EXPECT_FALSE(store.Known(kContext, kHost));
  store.Keep(store.Generation(), kContext, kHost);
  EXPECT_TRUE(store.Known(kContext, kHost));
}

TEST(NotCudaMemory, EveryThreadWithAQueuedForgettingCallConfirmsBeforeAnythingIsKept) {
  NotCudaMemory store(16);
  NotCudaMemory::ThreadMark a, b;
  store.ForgetQueued(&a);
  store.ForgetQueued(&a);  // one thread, two queued calls: its next answer confirms both
  store.ForgetQueued(&b);
  store.Confirm(&a);
  store.Keep(store.Generation(), kContext, kHost);
  EXPECT_FALSE(store.Known(kContext, kHost));
  store.Confirm(&b);
  store.Confirm(&b);  // nothing left to confirm
  store.Keep(store.Generation(), kContext, kHost);
  EXPECT_TRUE(store.Known(kContext, kHost));
}

TEST(NotCudaMemory, PastItsBoundTheStoreIsEmptied) {
  NotCudaMemory store(4);
  for (uint64_t i = 0; i < 100; ++i) {
    store.Keep(store.Generation(), kContext, kHost + i * 4096);
    EXPECT_LE(store.Count(), 4u);
  }
  EXPECT_TRUE(store.Known(kContext, kHost + 99 * 4096));
}

TEST(NotCudaMemory, AForkedChildKeepsNothingAndWaitsForNoParentThread) {
  NotCudaMemory store(16);
  NotCudaMemory::ThreadMark forking, parent_thread;
  store.Keep(store.Generation(), kContext, kHost);
  store.ForgetQueued(&forking);
  store.ForgetQueued(&parent_thread);  // a thread the child does not have
  store.BeforeFork();
  store.AfterForkInChild();
  EXPECT_FALSE(store.Known(kContext, kHost));
  store.Keep(store.Generation(), kContext, kHost);
  EXPECT_TRUE(store.Known(kContext, kHost));
  // The forking thread's mark from before the fork confirms nothing of the child's.
  NotCudaMemory::ThreadMark child_thread;
  store.ForgetQueued(&child_thread);
  store.Confirm(&forking);
  store.Keep(store.Generation(), kContext, kHost);
  EXPECT_FALSE(store.Known(kContext, kHost));
  store.Confirm(&child_thread);
  store.Keep(store.Generation(), kContext, kHost);
  EXPECT_TRUE(store.Known(kContext, kHost));
}

TEST(NotCudaMemory, TheParentGoesOnAfterAFork) {
  NotCudaMemory store(16);
  store.Keep(store.Generation(), kContext, kHost);
  store.BeforeFork();
  store.AfterForkInParent();
  EXPECT_TRUE(store.Known(kContext, kHost));
}

}  // namespace
}  // namespace gslice::remote
