// The forwarding client's kept answers (remote/client/kept_answers.h): what a set of one
// handle's attribute drops, what it keeps, and answers in flight across a drop.
#include "kept_answers.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gslice::remote {
namespace {

// Group 0 (slot 1) stands for calls.def's attributes, group 1 (slot 2) for another group.
constexpr size_t kAttributes = 1;
constexpr uint32_t kAttributesBit = 1u << 0;
constexpr size_t kOther = 2;

// Handles as the worker's driver would give them: kernels and their functions differ.
constexpr uint64_t kKernel = 0x7000;
constexpr uint64_t kKernelFunction = 0x9100;
constexpr uint64_t kKernelFunction2 = 0x9200;  // the same kernel's function in another context
constexpr uint64_t kOtherKernel = 0x7100;
constexpr uint64_t kOtherFunction = 0x9300;
constexpr uint64_t kPlainA = 0x5000;  // functions of modules loaded with cuModuleLoadData
constexpr uint64_t kPlainB = 0x5100;

std::string Key(uint64_t handle) { return "attribute of " + std::to_string(handle); }

void KeepFor(KeptAnswers* kept, size_t slot, uint64_t handle) {
  std::vector<uint8_t> reply;
  uint64_t generation = 0;
  kept->LookUp(slot, handle, Key(handle), &reply, &generation);
  kept->Keep(slot, generation, handle, Key(handle), {1, 2, 3, 4});
}

bool Holds(KeptAnswers* kept, size_t slot, uint64_t handle) {
  std::vector<uint8_t> reply;
  uint64_t generation = 0;
  return kept->LookUp(slot, handle, Key(handle), &reply, &generation) && reply == std::vector<uint8_t>{1, 2, 3, 4};
}

TEST(RemoteKeptAnswers, ASetOnOneFunctionDropsItsAnswersOnly) {
  KeptAnswers kept(2, 1 << 16, 1 << 16);
  for (uint64_t h : {kPlainA, kPlainB}) {
    KeepFor(&kept, kAttributes, h);
    KeepFor(&kept, kOther, h);
  }
  kept.DropHandle(kAttributesBit, kPlainA);
  EXPECT_FALSE(Holds(&kept, kAttributes, kPlainA));
  EXPECT_TRUE(Holds(&kept, kAttributes, kPlainB));
  // Other groups are not touched.
  EXPECT_TRUE(Holds(&kept, kOther, kPlainA));
  EXPECT_EQ(kept.Count(kAttributes), 1u);
  kept.DropGroups(kAttributesBit);
  EXPECT_FALSE(Holds(&kept, kAttributes, kPlainB));
  EXPECT_EQ(kept.Count(kAttributes), 0u);
  EXPECT_TRUE(Holds(&kept, kOther, kPlainB));
}

TEST(RemoteKeptAnswers, ASetOnAKernelDropsItsFunctionsAnswersAndTheOtherWayRound) {
  KeptAnswers kept(2, 1 << 16, 1 << 16);
  kept.Relate(kKernel, kKernelFunction);
  kept.Relate(kKernel, kKernelFunction2);
  kept.Relate(kKernel, kKernelFunction);  // asked again: nothing new
  kept.Relate(kOtherKernel, kOtherFunction);
  const std::vector<uint64_t> family = {kKernel, kKernelFunction, kKernelFunction2};
  const std::vector<uint64_t> others = {kOtherKernel, kOtherFunction, kPlainA};
  for (const uint64_t set_on : family) {
    SCOPED_TRACE(set_on);
    for (uint64_t h : family) KeepFor(&kept, kAttributes, h);
    for (uint64_t h : others) KeepFor(&kept, kAttributes, h);
    kept.DropHandle(kAttributesBit, set_on);
    for (uint64_t h : family) EXPECT_FALSE(Holds(&kept, kAttributes, h)) << h;
    for (uint64_t h : others) EXPECT_TRUE(Holds(&kept, kAttributes, h)) << h;
  }
}

TEST(RemoteKeptAnswers, AFunctionOfALibrarysModuleIsDroppedWithEveryHandleAndDropsTheGroup) {
  KeptAnswers kept(2, 1 << 16, 1 << 16);
  constexpr uint64_t kLibraryModule = 0x3000, kPlainModule = 0x3100, kLibraryFunction = 0x9900;
  kept.NoteLibraryModule(kLibraryModule);
  kept.NoteModuleFunction(kLibraryModule, kLibraryFunction);
  kept.NoteModuleFunction(kPlainModule, kPlainA);
  for (uint64_t h : {kLibraryFunction, kPlainA, kPlainB, kKernel}) KeepFor(&kept, kAttributes, h);
  // A kernel set may change the library's function (the client cannot tell whose it is).
  kept.DropHandle(kAttributesBit, kKernel);
  EXPECT_FALSE(Holds(&kept, kAttributes, kLibraryFunction));
  EXPECT_TRUE(Holds(&kept, kAttributes, kPlainA));
  // A set on the library's function may change any kernel's: the whole group.
  for (uint64_t h : {kLibraryFunction, kKernel}) KeepFor(&kept, kAttributes, h);
  kept.DropHandle(kAttributesBit, kLibraryFunction);
  EXPECT_EQ(kept.Count(kAttributes), 0u);
}

TEST(RemoteKeptAnswers, AnAnswerInFlightAcrossASetOfAnyHandleIsNotKept) {
  KeptAnswers kept(2, 1 << 16, 1 << 16);
  std::vector<uint8_t> reply;
  uint64_t generation = 0;
  ASSERT_FALSE(kept.LookUp(kAttributes, kPlainA, Key(kPlainA), &reply, &generation));
  kept.DropHandle(kAttributesBit, kPlainB);  // another thread's set while A's answer is in flight
  kept.Keep(kAttributes, generation, kPlainA, Key(kPlainA), {1, 2, 3, 4});
  EXPECT_FALSE(Holds(&kept, kAttributes, kPlainA));
  ASSERT_FALSE(kept.LookUp(kAttributes, kPlainA, Key(kPlainA), &reply, &generation));
  kept.DropGroups(kAttributesBit);
  kept.Keep(kAttributes, generation, kPlainA, Key(kPlainA), {1, 2, 3, 4});
  EXPECT_FALSE(Holds(&kept, kAttributes, kPlainA));
  // Not in flight across a drop: kept. A drop of another group does not count.
  ASSERT_FALSE(kept.LookUp(kAttributes, kPlainA, Key(kPlainA), &reply, &generation));
  kept.DropHandle(1u << 1, kPlainA);
  kept.Keep(kAttributes, generation, kPlainA, Key(kPlainA), {1, 2, 3, 4});
  EXPECT_TRUE(Holds(&kept, kAttributes, kPlainA));
}

TEST(RemoteKeptAnswers, PastTheRelatedLimitAPerHandleDropDropsTheGroup) {
  KeptAnswers kept(2, 1 << 16, 4);
  for (uint64_t k = 0; k < 3; ++k) kept.Relate(0x100 + k, 0x200 + k);  // 6 related handles
  for (uint64_t h : {kPlainA, kPlainB}) KeepFor(&kept, kAttributes, h);
  kept.DropHandle(kAttributesBit, kPlainA);
  EXPECT_FALSE(Holds(&kept, kAttributes, kPlainB));
}

TEST(RemoteKeptAnswers, AFullSlotIsEmptiedAndCountsRight) {
  KeptAnswers kept(2, 3, 1 << 16);
  for (uint64_t h : {kPlainA, kPlainB, kKernel}) KeepFor(&kept, kAttributes, h);
  KeepFor(&kept, kAttributes, kPlainA);  // the same answer again: still 3
  EXPECT_EQ(kept.Count(kAttributes), 3u);
  KeepFor(&kept, kAttributes, kOtherKernel);
  EXPECT_EQ(kept.Count(kAttributes), 1u);
  EXPECT_TRUE(Holds(&kept, kAttributes, kOtherKernel));
  EXPECT_FALSE(Holds(&kept, kAttributes, kPlainA));
}

}  // namespace
}  // namespace gslice::remote
