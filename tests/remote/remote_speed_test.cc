// What the forwarding client's calls cost, counted by its own counters, against gslice-remoted
// --sim: the added delay that models a network for benchmarks, and the call sequences of
// training steps that must not wait (docs/remote.md, "Speed"). Counts, never times.
#include <signal.h>
#include <unistd.h>

#include <string>
#include <vector>

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
    setenv("GSLICE_SIM_DEVICES", "2", 1);  // contexts of two devices
    server_ = shared::StartSimServer(SocketPath(), GSLICE_TEST_ASAN_RUNTIME);
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

// out without the lines only one side prints: the client's round trips and answers of its own,
// the simulated driver's own warnings (on the worker's side they go to the server's log).
std::string Comparable(const std::string& out) {
  std::string kept;
  for (size_t at = 0; at < out.size();) {
    size_t end = out.find('\n', at);
    end = end == std::string::npos ? out.size() : end + 1;
    if (out.compare(at, 13, "round trips: ") != 0 && out.compare(at, 24, "answered on the client: ") != 0 &&
        out.compare(at, 12, "gslice sim: ") != 0) {
      kept.append(out, at, end - at);
    }
    at = end;
  }
  return kept;
}

// Runs a mode of the speed probe on the simulated driver and through the client: the same
// answers, and each of `trips` ("round trips: WHAT: N") among the client's lines.
void ExpectAnswersAndTrips(const std::string& address, const std::string& mode, std::vector<std::string> trips) {
  Result direct = RunProgram(Direct("1GiB", {kProbe, mode}));
  Result remote = RunProgram(Remote(address, "1GiB", {kProbe, mode}));
  ASSERT_EQ(direct.code, 0) << direct.out;
  ASSERT_EQ(remote.code, 0) << remote.out;
  EXPECT_EQ(Comparable(remote.out), Comparable(direct.out));
  for (const std::string& line : trips) {
    EXPECT_NE(remote.out.find("round trips: " + line + "\n"), std::string::npos) << line << "\n" << remote.out;
  }
}

TEST_F(RemoteSpeed, AttributeSetsTheDriverIsKnownToAcceptAreNotWaitedFor) {
  // cuDNN sets a kernel's dynamic shared memory before its launches, alternating between a few
  // values: after a set to V succeeded, a set to at most V cannot fail.
  ExpectAnswersAndTrips(Address(), "sets",
                        {"the first set of a kernel and of a function: 2",
                         "20 sets of each at or below its first, launches between: 0",
                         "a carveout of a function whose set was accepted: 0", "a set above the largest accepted: 1",
                         "a set after an unload: 1"});
  Result direct = RunProgram(Direct("1GiB", {kProbe, "sets"}));
  for (const char* must : {"a set the driver refuses: CUDA_ERROR_INVALID_VALUE\n", "then a synchronisation: CUDA_SUCCESS\n",
                           "the kernel reads 1024, the function 16384\n", "the last launch wrote 19\n"}) {
    EXPECT_NE(direct.out.find(must), std::string::npos) << must << "\n" << direct.out;
  }
}

TEST_F(RemoteSpeed, EventsAreMadeAheadAndDestroyedWithoutWaiting) {
  // 400 events made and destroyed: batches of 16, 32, 64, 128, 128 and 128 (one round trip
  // each), no destroy waited for.
  ExpectAnswersAndTrips(Address(), "events",
                        {"400 events made, recorded and destroyed: 6", "an event's destroy after its context went: 1"});
  Result direct = RunProgram(Direct("1GiB", {kProbe, "events"}));
  for (const char* must : {"a fresh event: CUDA_SUCCESS\n", "timed: yes\n", "a second destroy: CUDA_ERROR_INVALID_HANDLE\n",
                           "after a context with events went: CUDA_SUCCESS\n",
                           "an event of that context destroyed: CUDA_ERROR_INVALID_HANDLE\n"}) {
    EXPECT_NE(direct.out.find(must), std::string::npos) << must << "\n" << direct.out;
  }
}

TEST_F(RemoteSpeed, KeptAnswersAreEachContextsOwn) {
  // A context's device and limits, kept on the client, are that context's: two devices'
  // primary contexts and a context with a limit of its own, made current in turn.
  Result direct = RunProgram(Direct("1GiB", {kProbe, "contexts"}));
  Result remote = RunProgram(Remote(Address(), "1GiB", {kProbe, "contexts"}));
  ASSERT_EQ(direct.code, 0) << direct.out;
  ASSERT_EQ(remote.code, 0) << remote.out;
  for (const char* must : {"device 1's primary: device 1, stack 1024\n", "its own: device 0, stack 8192\n",
                           "device 0's primary: device 0, stack 1024\n"}) {
    EXPECT_NE(direct.out.find(must), std::string::npos) << must << "\n" << direct.out;
  }
  EXPECT_EQ(remote.out, direct.out);
}

TEST_F(RemoteSpeed, APointerTheWorkerSaidIsNotCudaMemoryIsAnsweredAgainUntilMemoryMayBeMapped) {
  // XLA asks for a host buffer's memory type before each copy: asked again, with other
  // attributes or by a copy that tells its direction from the addresses, the worker's answer is
  // the client's; a call that may map memory forgets it (an address reserved, then mapped, is
  // device memory); graph launches forget once the process made a stream-ordered allocation.
  ExpectAnswersAndTrips(Address(), "pointers",
                        {"a host buffer asked twice: 1", "its attributes together: 0",
                         "a copy from the host buffer told from its addresses: 2", "a reserved address asked twice: 1",
                         "a graph launched, then the host buffer asked twice: 0",
                         "then a graph launched, and the host buffer asked twice: 2", "then asked a third time: 0"});
  // Counted where the client's calls are: answered from what it keeps, not a round trip.
  Result remote = RunProgram(Remote(Address(), "1GiB", {kProbe, "pointers"}));
  EXPECT_NE(remote.out.find("answered on the client: the second: 1\n"), std::string::npos) << remote.out;
  Result direct = RunProgram(Direct("1GiB", {kProbe, "pointers"}));
  for (const char* must : {"a host buffer: CUDA_ERROR_INVALID_VALUE\n", "asked again: CUDA_ERROR_INVALID_VALUE\n",
                           "its attributes together: CUDA_SUCCESS, context none, type 0, device 0\n",
                           "a reserved address: CUDA_ERROR_INVALID_VALUE\n",
                           "the address once mapped: CUDA_SUCCESS, device memory\n",
                           "the host buffer after a launch: CUDA_ERROR_INVALID_VALUE\n"}) {
    EXPECT_NE(direct.out.find(must), std::string::npos) << must << "\n" << direct.out;
  }
}

TEST_F(RemoteSpeed, AQueuedCallNoFurtherCallFollowsReachesTheWorker) {
  // The flusher sends a queue that no call comes to, also once it had found the queue empty
  // and waits for the next one. The worker names the refused memset in the server's log.
  Child program(Remote(Address(), "1GiB", {kProbe, "alone"}));
  ASSERT_NE(program.ReadUntil("queued", 20000), "");
  std::string line;
  bool named = false;
  while (!named && server_->ReadLine(&line, 20000)) {
    named = line.find("cuMemsetD32Async (not waited for) failed") != std::string::npos;
  }
  EXPECT_TRUE(named) << "the queued memset never reached the worker";
  program.Kill(SIGTERM);
  program.Wait(nullptr, 10000);
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
