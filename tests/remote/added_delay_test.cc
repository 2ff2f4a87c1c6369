// The added delay's policy (remote/client/added_delay.h) on a synthetic clock: each piece is
// held the whole round trip from its own send time, pieces sent together travel together
// (latency, not throughput), and GSLICE_REMOTE_ADDED_DELAY_US's values.
#include "added_delay.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace gslice::remote {
namespace {

constexpr int64_t kUs = 1000;

DelayLine::Piece PieceAt(int64_t sent_ns, uint8_t tag) { return DelayLine::Piece{.sent_ns = sent_ns, .bytes = {tag}}; }

TEST(AddedDelay, ASynchronousRequestIsHeldTheWholeRoundTrip) {
  DelayLine line(50 * kUs);
  line.Push(PieceAt(1000 * kUs, 7));
  EXPECT_EQ(line.NextDue(), 1050 * kUs);
  std::vector<DelayLine::Piece> due;
  line.TakeDue(1050 * kUs - 1, &due);
  EXPECT_TRUE(due.empty()) << "handed out before the round trip passed";
  line.TakeDue(1050 * kUs, &due);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].bytes, std::vector<uint8_t>{7});
  EXPECT_EQ(line.stats().least_held_ns, 50 * kUs);
  EXPECT_EQ(line.stats().pieces, 1u);
  EXPECT_TRUE(line.empty());
  EXPECT_EQ(line.NextDue(), -1);
}

TEST(AddedDelay, PipelinedRequestsTravelTogetherNotOneDelayAfterAnother) {
  // 100 pieces sent 1 us apart on a 50 us line: the last is due 50 us after it was sent (at
  // 149 us), not 100 delays after the first; each is held exactly the round trip.
  DelayLine line(50 * kUs);
  for (int i = 0; i < 100; ++i) line.Push(PieceAt(i * kUs, static_cast<uint8_t>(i)));
  EXPECT_EQ(line.stats().most_on_line, 100u);
  std::vector<DelayLine::Piece> due;
  line.TakeDue(99 * kUs, &due);
  EXPECT_EQ(due.size(), 50u) << "the pieces sent in the first 50 us are due by 99 us";
  line.TakeDue(149 * kUs, &due);
  ASSERT_EQ(due.size(), 100u) << "every piece is due one round trip after its own send";
  for (int i = 0; i < 100; ++i) EXPECT_EQ(due[i].bytes[0], i) << "pieces leave in the order they were sent";
  EXPECT_EQ(line.stats().least_held_ns, 50 * kUs);
  EXPECT_EQ(line.stats().pieces, 100u);
  EXPECT_EQ(line.bytes(), 0u);
}

TEST(AddedDelay, BytesOnTheLineAreCounted) {
  DelayLine line(20 * kUs);
  line.Push(DelayLine::Piece{.sent_ns = 0, .bytes = std::vector<uint8_t>(300)});
  line.Push(DelayLine::Piece{.sent_ns = 5 * kUs, .bytes = std::vector<uint8_t>(200)});
  EXPECT_EQ(line.bytes(), 500u);
  std::vector<DelayLine::Piece> due;
  line.TakeDue(20 * kUs, &due);
  EXPECT_EQ(line.bytes(), 200u);
}

TEST(AddedDelay, ClearClosesTheDescriptorsOfPiecesNotSent) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  DelayLine line(20 * kUs);
  line.Push(DelayLine::Piece{.sent_ns = 0, .bytes = {1}, .pass_fd = fds[0]});
  line.Clear();
  EXPECT_TRUE(line.empty());
  EXPECT_EQ(fcntl(fds[0], F_GETFD), -1) << "the line owned the descriptor";
  close(fds[1]);
}

TEST(AddedDelay, TheKnobTakesWholeMicrosecondsAndRefusesAnythingElse) {
  int64_t ns = -1;
  std::string error;
  EXPECT_TRUE(ParseAddedDelay("", &ns, &error));
  EXPECT_EQ(ns, 0);
  EXPECT_TRUE(ParseAddedDelay(nullptr, &ns, &error));
  EXPECT_EQ(ns, 0);
  EXPECT_TRUE(ParseAddedDelay("0", &ns, &error));
  EXPECT_EQ(ns, 0);
  EXPECT_TRUE(ParseAddedDelay("50", &ns, &error));
  EXPECT_EQ(ns, 50 * kUs);
  EXPECT_TRUE(ParseAddedDelay("1000000", &ns, &error));
  EXPECT_EQ(ns, 1'000'000 * kUs);
  for (const char* bad : {"abc", "-5", "5us", " 5", "1.5", "1000001", "99999999999999999999999"}) {
    error.clear();
    EXPECT_FALSE(ParseAddedDelay(bad, &ns, &error)) << bad;
    EXPECT_EQ(ns, 0) << bad << ": a refused value adds no delay";
    EXPECT_NE(error.find(std::string("GSLICE_REMOTE_ADDED_DELAY_US=") + bad), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace gslice::remote
