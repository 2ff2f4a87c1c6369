#include "gslice/suspend/host_memory.h"

#include <gtest/gtest.h>

namespace gslice::suspend {
namespace {

constexpr uint64_t GiB = 1ULL << 30;

TEST(HostMemory, AdmitsWhatFitsAboveTheReserve) {
  uint64_t available = 20 * GiB;
  HostMemoryBudget b({.reserve_bytes = 4 * GiB}, [&] { return available; });
  EXPECT_TRUE(b.Check(16 * GiB).ok);
  Admission a = b.Check(17 * GiB);
  EXPECT_FALSE(a.ok);
  EXPECT_NE(a.reason.find("17 GiB"), std::string::npos) << a.reason;
  EXPECT_NE(a.reason.find("20 GiB available"), std::string::npos) << a.reason;
  EXPECT_NE(a.reason.find("4 GiB kept free"), std::string::npos) << a.reason;
}

TEST(HostMemory, InFlightCheckpointsCountUntilCommitted) {
  uint64_t available = 20 * GiB;
  HostMemoryBudget b({.reserve_bytes = 4 * GiB}, [&] { return available; });
  ASSERT_TRUE(b.Reserve(10 * GiB).ok);
  EXPECT_EQ(b.in_flight_bytes(), 10 * GiB);
  // A second 10 GiB checkpoint would not fit next to the first.
  EXPECT_FALSE(b.Reserve(10 * GiB).ok);
  EXPECT_TRUE(b.Reserve(6 * GiB).ok);
  b.CancelReservation(6 * GiB);
  // The first finishes: its bytes leave MemAvailable and are held.
  available -= 10 * GiB;
  b.Commit(10 * GiB);
  EXPECT_EQ(b.in_flight_bytes(), 0u);
  EXPECT_EQ(b.held_bytes(), 10 * GiB);
  EXPECT_TRUE(b.Check(6 * GiB).ok);
  EXPECT_FALSE(b.Check(7 * GiB).ok);
  b.Release(10 * GiB);
  EXPECT_EQ(b.held_bytes(), 0u);
}

TEST(HostMemory, CapLimitsSuspendedStateTotal) {
  HostMemoryBudget b({.reserve_bytes = 0, .max_suspended_bytes = 12 * GiB},
                     [] { return 1000 * GiB; });
  ASSERT_TRUE(b.Reserve(8 * GiB).ok);
  b.Commit(8 * GiB);
  Admission a = b.Check(5 * GiB);
  EXPECT_FALSE(a.ok);
  EXPECT_NE(a.reason.find("cap of 12 GiB"), std::string::npos) << a.reason;
  EXPECT_TRUE(b.Check(4 * GiB).ok);
}

TEST(HostMemory, ReadsProcMeminfo) {
  // Any Linux machine running the tests has some memory available.
  EXPECT_GT(ReadMemAvailable(), 0u);
}

}  // namespace
}  // namespace gslice::suspend
