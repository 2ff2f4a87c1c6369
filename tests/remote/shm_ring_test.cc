// The shared-memory rings (remote/protocol/shm_ring.h) within one process: both ends mapped
// from one memfd, bytes through them in order across wrap-arounds, and a peer that scribbles
// over the shared counters or hands over a file it can still resize refused without any
// access outside the mapping.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "shm_ring.h"

namespace gslice::remote {
namespace {

constexpr uint64_t kRing = kMinRingBytes;

// A client end and a worker end of the same rings.
struct Pair {
  SharedRings* client = nullptr;
  SharedRings* worker = nullptr;
  int fd = -1;
  Pair() {
    std::string error;
    client = CreateRings(RingsOptions{.ring_bytes = kRing, .spin_us = 5}, &fd, &error);
    EXPECT_NE(client, nullptr) << error;
    worker = AcceptRings(fd, kRing, 5, &error);
    EXPECT_NE(worker, nullptr) << error;
    BindRings(client, RingSide::kClient, -1);
    BindRings(worker, RingSide::kWorker, -1);
  }
  ~Pair() {
    FreeRings(client);
    FreeRings(worker);
    if (fd >= 0) close(fd);
  }
};

TEST(ShmRing, BytesArriveInOrderAcrossWrapAroundsBothWays) {
  Pair p;
  ASSERT_NE(p.client, nullptr);
  ASSERT_NE(p.worker, nullptr);
  // Messages of awkward sizes, many times the ring: the writer waits for the reader.
  std::vector<uint8_t> sent(5 * kRing + 123);
  std::mt19937 rng(7);
  for (auto& b : sent) b = static_cast<uint8_t>(rng());
  std::thread writer([&] {
    size_t at = 0;
    size_t piece = 1;
    while (at < sent.size()) {
      const size_t n = std::min(piece, sent.size() - at);
      ASSERT_TRUE(RingWriteAll(p.client, sent.data() + at, n));
      at += n;
      piece = piece * 3 + 7;
      if (piece > 3 * kRing) piece = 5;
    }
  });
  std::vector<uint8_t> got(sent.size());
  size_t at = 0;
  size_t piece = 2;
  while (at < got.size()) {
    const size_t n = std::min(piece, got.size() - at);
    ASSERT_TRUE(RingReadAll(p.worker, got.data() + at, n));
    at += n;
    piece = piece * 5 + 1;
    if (piece > 2 * kRing) piece = 3;
  }
  writer.join();
  EXPECT_EQ(got, sent);
  // And back, as one frame of two pieces.
  const char head[] = "head";
  std::vector<uint8_t> body(kRing + 17, 0x5a);
  std::thread replier([&] {
    const iovec pieces[2] = {{const_cast<char*>(head), 4}, {body.data(), body.size()}};
    EXPECT_TRUE(RingWrite(p.worker, pieces, 2));
  });
  std::vector<uint8_t> back(4 + body.size());
  ASSERT_TRUE(RingReadAll(p.client, back.data(), back.size()));
  replier.join();
  EXPECT_EQ(std::memcmp(back.data(), "head", 4), 0);
  EXPECT_TRUE(std::all_of(back.begin() + 4, back.end(), [](uint8_t b) { return b == 0x5a; }));
}

TEST(ShmRing, AReaderWakesFromItsFutexAndCloseEndsAWait) {
  Pair p;
  ASSERT_NE(p.client, nullptr);
  uint32_t value = 0;
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // past the spin: asleep
    const uint32_t v = 42;
    RingWriteAll(p.client, &v, sizeof v);
  });
  ASSERT_TRUE(RingReadAll(p.worker, &value, sizeof value));
  late.join();
  EXPECT_EQ(value, 42u);
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CloseRings(p.worker);
  });
  EXPECT_FALSE(RingReadAll(p.worker, &value, sizeof value));
  closer.join();
  EXPECT_EQ(RingsFailure(p.worker), "closed");
  EXPECT_FALSE(RingsBrokenByPeer(p.worker));
  EXPECT_FALSE(RingWriteAll(p.worker, &value, sizeof value));
}

TEST(ShmRing, AWaitEndsWhenThePeersSocketCloses) {
  Pair p;
  ASSERT_NE(p.client, nullptr);
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  BindRings(p.worker, RingSide::kWorker, pair[0]);
  std::thread peer_dies([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    close(pair[1]);
  });
  uint32_t value = 0;
  EXPECT_FALSE(RingReadAll(p.worker, &value, sizeof value));
  peer_dies.join();
  EXPECT_NE(RingsFailure(p.worker).find("closed its socket"), std::string::npos) << RingsFailure(p.worker);
  close(pair[0]);
}

TEST(ShmRing, ScribbledCountersAreRefusedNotFollowed) {
  // The worker's view: the client (the peer) writes the request ring's head and the reply
  // ring's tail; whatever it puts there, the worker reads and writes only inside the rings.
  const uint64_t bad_heads[] = {kRing + 1, ~0ull, 1ull << 63};
  for (uint64_t head : bad_heads) {
    Pair p;
    ASSERT_NE(p.client, nullptr);
    *ViewRing(p.client, RingSide::kClient).head = head;
    uint8_t buf[16];
    EXPECT_FALSE(RingReadAll(p.worker, buf, sizeof buf)) << head;
    EXPECT_TRUE(RingsBrokenByPeer(p.worker));
    EXPECT_NE(RingsFailure(p.worker).find("broke"), std::string::npos) << RingsFailure(p.worker);
  }
  const uint64_t bad_tails[] = {1, kRing + 1, kRing * 3};
  for (uint64_t tail : bad_tails) {
    Pair p;
    ASSERT_NE(p.client, nullptr);
    *ViewRing(p.client, RingSide::kWorker).tail = tail;  // read more than was ever written
    const uint8_t reply[8] = {};
    EXPECT_FALSE(RingWriteAll(p.worker, reply, sizeof reply)) << tail;
    EXPECT_TRUE(RingsBrokenByPeer(p.worker));
    EXPECT_NE(RingsFailure(p.worker).find("broke"), std::string::npos) << RingsFailure(p.worker);
  }
  {
    // Futex words and flags are hints: garbage there costs wake-ups, not correctness.
    Pair p;
    ASSERT_NE(p.client, nullptr);
    RingView v = ViewRing(p.client, RingSide::kClient);
    *v.data_seq = 0xdeadbeef;
    *v.consumer_waiting = 7;
    const uint64_t word = 0x0123456789abcdefull;
    ASSERT_TRUE(RingWriteAll(p.client, &word, sizeof word));
    uint64_t got = 0;
    ASSERT_TRUE(RingReadAll(p.worker, &got, sizeof got));
    EXPECT_EQ(got, word);
  }
}

TEST(ShmRing, OnlyASealedMemfdOfTheAnnouncedSizeIsAccepted) {
  std::string error;
  const int unsealed = memfd_create("gslice-test-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(ftruncate(unsealed, static_cast<off_t>(kRingsHeader + 2 * kRing)), 0);
  EXPECT_EQ(AcceptRings(unsealed, kRing, 0, &error), nullptr);
  EXPECT_NE(error.find("sealed"), std::string::npos) << error;
  ASSERT_EQ(fcntl(unsealed, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  EXPECT_EQ(AcceptRings(unsealed, 2 * kRing, 0, &error), nullptr);  // a size the file does not have
  EXPECT_NE(error.find("bytes"), std::string::npos) << error;
  EXPECT_EQ(AcceptRings(unsealed, kRing + 1, 0, &error), nullptr);  // not a power of two
  EXPECT_EQ(AcceptRings(unsealed, kMaxRingBytes * 2, 0, &error), nullptr);
  SharedRings* fine = AcceptRings(unsealed, kRing, 0, &error);
  EXPECT_NE(fine, nullptr) << error;
  FreeRings(fine);
  close(unsealed);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  EXPECT_EQ(AcceptRings(pipe_fds[0], kRing, 0, &error), nullptr);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

TEST(ShmRing, TheSetUpFrameDecodesOnlyWhole) {
  Writer w;
  EncodeRingsRequest(RingsRequest{.ring_bytes = kRing, .spin_us = 3}, &w);
  RingsRequest got;
  Reader r(w.buffer().data(), w.size());
  ASSERT_TRUE(DecodeRingsRequest(&r, &got));
  EXPECT_EQ(got.ring_bytes, kRing);
  EXPECT_EQ(got.spin_us, 3u);
  for (size_t cut = 0; cut < w.size(); ++cut) {
    Reader shorter(w.buffer().data(), cut);
    EXPECT_FALSE(DecodeRingsRequest(&shorter, &got)) << cut;
  }
  Writer longer = w;
  longer.Put<uint8_t>(0);
  Reader l(longer.buffer().data(), longer.size());
  EXPECT_FALSE(DecodeRingsRequest(&l, &got));
}

}  // namespace
}  // namespace gslice::remote
