// A network's latency added to the worker's connection, for benchmarks only
// (GSLICE_REMOTE_ADDED_DELAY_US; off unless asked for): what a program would see with its
// worker on another host N microseconds of round trip away, measured on one host.
//
// The model. A real wire delays each message by its one-way latency, and messages sent one
// after another travel together: latency is not throughput. So every piece of bytes the
// client sends is due at the time it was sent plus the whole round trip N, independently of
// the pieces before it (a piece sent while others are on the line is not held behind their
// delay), and pieces leave in the order they were sent. The whole round trip goes on the
// request, none on the answer: the worker sends nothing that is not caused by a request (an
// answer, or a deferred copy's bytes ahead of a later answer), and it is driven by nothing
// else, so delaying its requests by N/2 more and its answers by N/2 less moves every answer's
// arrival at the client by nothing. Each answer then arrives at least N after the request it
// answers left, and a queue of requests sent without waiting reaches the worker N later but
// at the rate it was sent. (The worker's clock, as a timeline measures it, is off by N/4.)
//
// DelayLine is the policy, on a clock its caller passes (tested on a synthetic one); the
// transport (transport.cc) runs it on one thread that hands each due piece to the real
// connection. Not thread-safe: the transport holds its lock around every call.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace gslice::remote {

// GSLICE_REMOTE_ADDED_DELAY_US's value as a round trip in nanoseconds: empty or "0" is none
// (0); a whole number of microseconds from 1 to kMaxAddedDelayUs is that delay. Anything
// else: false, with *error saying what is wrong, for a log line (the caller adds no delay).
constexpr int64_t kMaxAddedDelayUs = 1'000'000;
bool ParseAddedDelay(const char* text, int64_t* round_trip_ns, std::string* error);

// What a delay line did so far (read by benchmarks and tests: gslice_remote_added_delay).
struct DelayLineStats {
  int64_t round_trip_ns = 0;   // the delay each piece gets
  uint64_t pieces = 0;         // pieces handed out (each a write on the real connection)
  int64_t least_held_ns = -1;  // the shortest time a handed out piece was held (-1: none yet)
  uint64_t most_on_line = 0;   // the most pieces on the line at once
};

class DelayLine {
 public:
  // A piece of bytes to write on the connection, and a descriptor to pass before them
  // (>= 0: wire.h's kOpHostShare; the line owns it until handed out).
  struct Piece {
    int64_t sent_ns = 0;
    std::vector<uint8_t> bytes;
    int pass_fd = -1;
  };

  explicit DelayLine(int64_t round_trip_ns) { stats_.round_trip_ns = round_trip_ns; }

  // Puts piece (sent at piece.sent_ns, which never goes back between calls) on the line.
  void Push(Piece piece);
  // When the oldest piece is due (its send time + the round trip); -1 when the line is empty.
  int64_t NextDue() const;
  // Moves every piece due at now_ns to *out, oldest first: all of them at once, since pieces
  // travel together.
  void TakeDue(int64_t now_ns, std::vector<Piece>* out);
  // Bytes on the line (the transport bounds it: a wire that cannot take more holds the sender).
  size_t bytes() const { return bytes_; }
  bool empty() const { return line_.empty(); }
  // Drops every piece (a failed connection, a forked child's copy), closing their descriptors.
  void Clear();
  const DelayLineStats& stats() const { return stats_; }

 private:
  std::deque<Piece> line_;
  size_t bytes_ = 0;
  DelayLineStats stats_;
};

}  // namespace gslice::remote
