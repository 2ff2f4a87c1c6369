// What the forwarding client's calls cost, counted by its own counters, against gslice-remoted
// --sim: the added delay that models a network for benchmarks, and the call sequences of
// training steps that must not wait (docs/remote.md, "Speed"). Counts, never times.
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "remote_test_support.h"
#include "test_support.h"

namespace gslice::remote {
namespace {

using gslice::test::Child;
using shared::Direct;
using shared::Remote;
using shared::Result;
using shared::RunProgram;

const std::string kBin = GSLICE_TEST_BIN;
const std::string kProbe = GSLICE_TEST_SPEED_PROBE;

std::string Prefix() { return "/dev/shm/gslice-test-" + std::to_string(getpid()) + "-rspeed"; }
std::string SocketPath() { return "/tmp/gslice-test-" + std::to_string(getpid()) + "-rspeed.sock"; }

class RemoteSpeed : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared::SetUpSimWorld(Prefix(), {"GSLICE_REMOTE_ADDED_DELAY_US", "GSLICE_REMOTE_WAIT"});
    // The sanitize build: the ASan runtime first, before the shim gslice run preloads.
    if (const std::string asan = GSLICE_TEST_ASAN_RUNTIME; !asan.empty()) setenv("LD_PRELOAD", asan.c_str(), 1);
    unlink(SocketPath().c_str());
    server_ = new Child({kBin + "/gslice-remoted", "--listen", "unix:" + SocketPath(), "--sim", "--allow-root-tenant"});
    ASSERT_NE(server_->ReadUntil("gslice-remoted: listening on", 20000), "");
  }

  static void TearDownTestSuite() {
    shared::StopServer(&server_, SocketPath());
    shared::RemoveSimWorld(Prefix());
  }

  static std::string Address() { return "unix:" + SocketPath(); }

  static Child* server_;
};

Child* RemoteSpeed::server_ = nullptr;

TEST_F(RemoteSpeed, TheAddedDelayHoldsEveryMessageAtLeastTheRoundTripOnBothTransports) {
  for (const char* shm : {"on", "off"}) {
    SCOPED_TRACE(std::string("GSLICE_REMOTE_SHM=") + shm);
    Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "delay"}),
                          {"GSLICE_REMOTE_ADDED_DELAY_US=2000", std::string("GSLICE_REMOTE_SHM=") + shm});
    ASSERT_EQ(r.code, 0) << r.out;
    for (const char* must : {"memsets done: the last wrote 199\n", "added delay: round trip 2000 us\n",
                             "added delay: at least 8 pieces sent\n",
                             "added delay: every piece held at least the round trip: yes\n",
                             "every message to the worker is delayed by 2000 us"}) {
      EXPECT_NE(r.out.find(must), std::string::npos) << must << "\n" << r.out;
    }
  }
}

TEST_F(RemoteSpeed, NoDelayIsAddedUnlessAskedFor) {
  Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "delay"}));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("added delay: none\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("delayed by"), std::string::npos) << r.out;
}

TEST_F(RemoteSpeed, ABadAddedDelayIsLoggedWithItsValueAndAddsNone) {
  for (const char* bad : {"fast", "-20", "2000001"}) {
    Result r = RunProgram(Remote(Address(), "1GiB", {kProbe, "delay"}), {std::string("GSLICE_REMOTE_ADDED_DELAY_US=") + bad});
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find(std::string("remote: GSLICE_REMOTE_ADDED_DELAY_US=") + bad), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("no delay is added"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("added delay: none\n"), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace gslice::remote
