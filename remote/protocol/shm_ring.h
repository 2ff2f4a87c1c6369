// The same-host transport: two byte rings in one shared-memory file (a memfd), requests
// client -> worker and replies worker -> client, carrying exactly the bytes the socket would
// (wire.h's frames). Set up after the handshake over a unix socket; the socket stays open and
// keeps telling each side whether the other lives (the worker's watcher, the client's waits).
//
// Set-up (only over unix:, never tcp:// or tls://):
//   client: memfd of kRingsHeader + 2 * ring_bytes, sealed against shrinking and growing,
//           mapped; one frame op kOpRings on the socket, payload u64 ring_bytes | u32 spin_us |
//           u32 0, the memfd attached (SCM_RIGHTS).
//   worker: checks ring_bytes (a power of two in [kMinRingBytes, kMaxRingBytes]), that the fd
//           is a memfd of exactly that size sealed so (a peer that shrank a mapped file could
//           fault the worker), maps it, answers on the socket: op kOpRings | kReplyBit,
//           i32 status (0: every later frame goes on the rings) | string message. A refusal
//           leaves both sides on the socket; the client logs one line.
//
// Each ring is single-producer single-consumer (each side's callers serialise: the client
// sends under one lock and one thread reads at a time; the worker has one reader and writes
// under one lock). head and tail count bytes ever written and read.
//
// Contract against a hostile peer: the shared memory is the peer's to scribble on. Each end
// keeps its own position privately and never reads it back from the shared memory; what it
// reads of the peer's (the other counter) is checked (0 <= written - read <= capacity) before
// use, and every index is a position masked by the capacity this process chose or checked at
// set-up. Bytes are copied out of the ring before anything decodes them (no double fetch).
// A failed check closes the transport (the caller treats it as a lost connection), so a
// client that scribbles can hurt only its own worker. Futex words are only hints: a wait is
// bounded (k*WaitSliceMs) and re-checks the counters, the liveness socket and Close().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "socket_io.h"
#include "wire.h"

struct iovec;

namespace gslice::remote {

inline constexpr uint32_t kOpRings = 0x7fff0004u;
inline constexpr uint64_t kMinRingBytes = 64 * 1024;
inline constexpr uint64_t kMaxRingBytes = 64ull << 20;
inline constexpr uint64_t kDefaultRingBytes = 4ull << 20;
inline constexpr uint64_t kRingsHeader = 4096;
// The longest spin before sleeping that a worker accepts from its client.
inline constexpr uint32_t kMaxSpinUs = 1000;
// A waiting side sleeps at most this long before it looks at the liveness socket again: the
// client notices a dead worker within this (it has nothing else that would tell it); the
// worker's watcher thread already ends it when the client goes, so its sleeps are long.
inline constexpr int kClientWaitSliceMs = 100;
inline constexpr int kWorkerWaitSliceMs = 1000;

struct SharedRings;

struct RingsOptions {
  uint64_t ring_bytes = kDefaultRingBytes;
  uint32_t spin_us = 20;  // busy-wait this long for the peer before sleeping in a futex
};

// Client side: makes the memfd and maps it. nullptr with *error when it cannot (no memfd,
// sealing refused, mmap failed). *fd is the memfd to pass (the caller closes it once sent).
SharedRings* CreateRings(const RingsOptions& options, int* fd, std::string* error);

// Worker side: checks and maps a memfd a client passed (see Set-up). nullptr with *error when
// it does not pass. Takes no ownership of fd.
SharedRings* AcceptRings(int fd, uint64_t ring_bytes, uint32_t spin_us, std::string* error);

// Which ring a side writes: the client writes requests, the worker replies.
enum class RingSide { kClient, kWorker };

// Ties the rings to their side and to the socket whose closing means the peer is gone
// (polled while waiting). Call once, before any transfer.
void BindRings(SharedRings* rings, RingSide side, int liveness_fd);

// Writes all of the pieces (one frame: header and payload), publishing the bytes once they
// are all in or the ring is full. False once the transport is closed, the peer is gone or
// broke the ring. REQUIRES: one writer at a time.
bool RingWrite(SharedRings* rings, const struct iovec* pieces, int count);
bool RingWriteAll(SharedRings* rings, const void* p, size_t n);
// Reads exactly n bytes. Same failures. REQUIRES: one reader at a time.
bool RingReadAll(SharedRings* rings, void* p, size_t n);

// Wakes every waiter of this process and makes every later transfer fail (a lost connection).
// Safe from any thread, also while another waits.
void CloseRings(SharedRings* rings);
// Unmaps. REQUIRES: no thread uses the rings any more.
void FreeRings(SharedRings* rings);
// In a forked child: forgets its parent's rings, whose mapping it did not inherit (the range
// may hold something else of the child's by now: nothing is unmapped).
void ForgetInheritedRings(SharedRings* rings);

// Why the transport closed ("" while open): the peer broke the ring, the socket closed, ...
std::string RingsFailure(const SharedRings* rings);
// Whether it closed because the peer's counters failed their checks (a protocol violation,
// not a peer that went away).
bool RingsBrokenByPeer(const SharedRings* rings);

// Client side, right after an accepted Hello and before any request: offers rings to the
// worker and, when it accepts, moves *channel onto them. kOn: every later frame goes on the
// rings. kRefused: nothing changed, *why says why (no unix socket, no memfd, the worker's
// refusal); the socket carries on. kLost: the socket failed (the connection is lost).
enum class RingsOffer { kOn, kRefused, kLost };
RingsOffer OfferRings(Channel* channel, const RingsOptions& options, int timeout_ms, std::string* why);

// Worker side: answers a kOpRings frame read from the socket (payload, and the descriptor
// that came with it, which this closes). On acceptance, the answer goes on the socket and
// then *rings is the transport for every later frame; else *rings stays nullptr, the answer
// (a refusal, with *why) goes on the socket, which carries on. first: no request was read
// before this one (a later offer is refused: serving threads may be answering meanwhile).
// False when the socket failed. REQUIRES: no other writer on the socket.
bool AnswerRings(int socket, const FrameHeader& h, const std::vector<uint8_t>& payload, int passed, bool first,
                 SharedRings** rings, std::string* why);

// The set-up frame's payload.
struct RingsRequest {
  uint64_t ring_bytes = 0;
  uint32_t spin_us = 0;
};
void EncodeRingsRequest(const RingsRequest& r, Writer* w);
bool DecodeRingsRequest(Reader* r, RingsRequest* out);

// Sends the set-up frame with fd attached (SCM_RIGHTS). False when the socket is gone.
bool SendFrameWithFd(int socket, const FrameHeader& h, const void* payload, size_t n, int fd);
// Reads one frame from a socket like ReadFrame, also receiving a descriptor passed with it
// (*passed: the fd, or -1; the caller owns and closes it). Descriptors beyond the first are
// closed here.
FrameRead ReadFrameWithFd(int socket, uint32_t max_length, FrameHeader* h, std::vector<uint8_t>* payload,
                          int* passed);

// For tests (the fuzz of ring contents): the two rings' control words and data areas of a
// mapping, as the peer sees them.
struct RingView {
  uint64_t* head = nullptr;
  uint64_t* tail = nullptr;
  uint32_t* data_seq = nullptr;
  uint32_t* consumer_waiting = nullptr;
  uint8_t* data = nullptr;
  uint64_t bytes = 0;
};
RingView ViewRing(SharedRings* rings, RingSide writer);

}  // namespace gslice::remote
