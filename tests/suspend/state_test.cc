#include "gslice/suspend/state.h"

#include <gtest/gtest.h>

#include <vector>

namespace gslice::suspend {
namespace {

TEST(State, NamesRoundTrip) {
  for (State s : kAllStates) {
    auto parsed = ParseState(StateName(s));
    ASSERT_TRUE(parsed.has_value()) << StateName(s);
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_FALSE(ParseState("paused").has_value());
  EXPECT_STREQ(StateName(State::kSuspended), "suspended");
}

TEST(State, TransitionsFollowTheMachine) {
  EXPECT_TRUE(IsValidTransition(State::kRunning, State::kSuspending));
  EXPECT_TRUE(IsValidTransition(State::kSuspending, State::kSuspended));
  EXPECT_TRUE(IsValidTransition(State::kSuspending, State::kRunning));  // rolled back
  EXPECT_TRUE(IsValidTransition(State::kSuspended, State::kResuming));
  EXPECT_TRUE(IsValidTransition(State::kResuming, State::kRunning));
  EXPECT_TRUE(IsValidTransition(State::kResuming, State::kSuspended));  // restore failed
  EXPECT_TRUE(IsValidTransition(State::kFailed, State::kResuming));
  EXPECT_FALSE(IsValidTransition(State::kRunning, State::kSuspended));  // no skipping
  EXPECT_FALSE(IsValidTransition(State::kRunning, State::kResuming));
  EXPECT_FALSE(IsValidTransition(State::kSuspended, State::kRunning));
  EXPECT_FALSE(IsValidTransition(State::kSuspended, State::kSuspending));
}

TEST(State, SliceAggregate) {
  using V = std::vector<State>;
  EXPECT_EQ(AggregateState(V{}), State::kRunning);
  EXPECT_EQ(AggregateState(V{State::kRunning, State::kRunning}), State::kRunning);
  EXPECT_EQ(AggregateState(V{State::kSuspended, State::kSuspended}), State::kSuspended);
  EXPECT_EQ(AggregateState(V{State::kSuspended, State::kRunning}), State::kSuspending);
  EXPECT_EQ(AggregateState(V{State::kSuspended, State::kResuming}), State::kResuming);
  EXPECT_EQ(AggregateState(V{State::kSuspending, State::kResuming}), State::kSuspending);
  EXPECT_EQ(AggregateState(V{State::kRunning, State::kFailed, State::kSuspended}), State::kFailed);
}

}  // namespace
}  // namespace gslice::suspend
