// A thread's copies of kept answers (remote/client/kept_answers.h: AnswerCopies): found only
// for the same call, handle and arguments, and only while the slot's generation is the one
// the copy was taken at, so that any drop in the slot makes them stale.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kept_answers.h"

namespace gslice::remote {
namespace {

constexpr uint32_t kOp = 17;
constexpr uint64_t kHandle = 0x7000;
const uint8_t kContext[8] = {1, 2, 3, 4, 5, 6, 7, 8};
const uint8_t kArgs[12] = {9, 9, 9, 9, 0, 0, 0, 1, 0, 0, 0, 2};
const uint8_t kReply[8] = {0, 0, 0, 0, 42, 0, 0, 0};

const uint8_t* FindIn(const AnswerCopies& copies, uint32_t op, uint64_t handle, const uint8_t* context,
                      const uint8_t* args, size_t args_size, uint64_t now, size_t* size) {
  return copies.Find(op, handle, context, context != nullptr ? 8 : 0, args, args_size, now, size);
}

TEST(AnswerCopies, ACopyIsFoundForTheSameCallAtItsGeneration) {
  auto copies = std::make_unique<AnswerCopies>();
  copies->Put(kOp, kHandle, kContext, 8, kArgs, sizeof kArgs, 5, kReply, sizeof kReply);
  size_t size = 0;
  const uint8_t* got = FindIn(*copies, kOp, kHandle, kContext, kArgs, sizeof kArgs, 5, &size);
  ASSERT_NE(got, nullptr);
  ASSERT_EQ(size, sizeof kReply);
  EXPECT_EQ(memcmp(got, kReply, size), 0);
}

TEST(AnswerCopies, ACopyIsNotFoundForAnythingElse) {
  auto copies = std::make_unique<AnswerCopies>();
  copies->Put(kOp, kHandle, kContext, 8, kArgs, sizeof kArgs, 5, kReply, sizeof kReply);
  size_t size = 0;
  EXPECT_EQ(FindIn(*copies, kOp, kHandle, kContext, kArgs, sizeof kArgs, 6, &size), nullptr) << "a later generation";
  EXPECT_EQ(FindIn(*copies, kOp + 1, kHandle, kContext, kArgs, sizeof kArgs, 5, &size), nullptr) << "another call";
  EXPECT_EQ(FindIn(*copies, kOp, kHandle + 1, kContext, kArgs, sizeof kArgs, 5, &size), nullptr) << "another handle";
  const uint8_t other_context[8] = {1, 2, 3, 4, 5, 6, 7, 9};
  EXPECT_EQ(FindIn(*copies, kOp, kHandle, other_context, kArgs, sizeof kArgs, 5, &size), nullptr) << "another context";
  uint8_t other_args[sizeof kArgs];
  memcpy(other_args, kArgs, sizeof kArgs);
  other_args[sizeof kArgs - 1] = 3;
  EXPECT_EQ(FindIn(*copies, kOp, kHandle, kContext, other_args, sizeof kArgs, 5, &size), nullptr) << "other arguments";
  EXPECT_EQ(FindIn(*copies, kOp, kHandle, kContext, kArgs, sizeof kArgs - 4, 5, &size), nullptr) << "fewer arguments";
}

TEST(AnswerCopies, KeysAndRepliesLargerThanAnEntryAreNotCopied) {
  auto copies = std::make_unique<AnswerCopies>();
  std::vector<uint8_t> long_args(AnswerCopies::kKeyBytes, 7);
  std::vector<uint8_t> long_reply(AnswerCopies::kReplyBytes + 1, 1);
  copies->Put(kOp, kHandle, kContext, 8, long_args.data(), long_args.size(), 1, kReply, sizeof kReply);
  copies->Put(kOp, kHandle, kContext, 8, kArgs, sizeof kArgs, 1, long_reply.data(), long_reply.size());
  size_t size = 0;
  EXPECT_EQ(FindIn(*copies, kOp, kHandle, kContext, long_args.data(), long_args.size(), 1, &size), nullptr);
  EXPECT_EQ(FindIn(*copies, kOp, kHandle, kContext, kArgs, sizeof kArgs, 1, &size), nullptr);
}

TEST(AnswerCopies, AnyDropInTheSlotMakesItsCopiesStale) {
  // Slot 1: a group whose answers are indexed by handle. A copy of handle A's answer goes
  // stale with a drop of another handle's answers, or of the whole group; slot 2's stays.
  KeptAnswers kept(2, 1024, 1024);
  auto copies = std::make_unique<AnswerCopies>();
  copies->Put(kOp, kHandle, kContext, 8, kArgs, sizeof kArgs, kept.Generation(1), kReply, sizeof kReply);
  copies->Put(kOp + 1, 0, kContext, 8, kArgs, sizeof kArgs, kept.Generation(2), kReply, sizeof kReply);
  size_t size = 0;
  EXPECT_NE(FindIn(*copies, kOp, kHandle, kContext, kArgs, sizeof kArgs, kept.Generation(1), &size), nullptr);
  kept.DropHandle(1u << 0, kHandle + 0x100);
  EXPECT_EQ(FindIn(*copies, kOp, kHandle, kContext, kArgs, sizeof kArgs, kept.Generation(1), &size), nullptr);
  EXPECT_NE(FindIn(*copies, kOp + 1, 0, kContext, kArgs, sizeof kArgs, kept.Generation(2), &size), nullptr);
  kept.DropGroups(1u << 1);
  EXPECT_EQ(FindIn(*copies, kOp + 1, 0, kContext, kArgs, sizeof kArgs, kept.Generation(2), &size), nullptr);
}

}  // namespace
}  // namespace gslice::remote
