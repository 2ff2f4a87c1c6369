// Host-memory accounting for suspended processes. A checkpoint moves a process's device
// memory into that process's host memory, so every suspension spends RAM. The budget
// admits a suspension only when, after it, the node keeps its reserve free and the total
// held by suspended state stays under the configured cap; otherwise it answers with a
// reason a person can act on.
//
// REQUIRES: external synchronization (the SuspendManager's mutex).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace gslice::suspend {

struct HostMemoryOptions {
  // RAM always left free for the node (the processes themselves, page cache, the daemon).
  uint64_t reserve_bytes = 4ULL << 30;
  // Upper bound on RAM held by suspended state at once; 0 = no cap besides the reserve.
  uint64_t max_suspended_bytes = 0;
};

struct Admission {
  bool ok = false;
  std::string reason;  // set when !ok, e.g. "host memory: suspending 40 GiB needs ..."
};

class HostMemoryBudget {
 public:
  // available_bytes reports what the node could still give (MemAvailable); the default
  // reads /proc/meminfo. Tests inject their own.
  explicit HostMemoryBudget(HostMemoryOptions options,
                            std::function<uint64_t()> available_bytes = nullptr);

  // Checks, without reserving, whether `bytes` more of suspended state fit.
  Admission Check(uint64_t bytes) const;

  // Reserves `bytes` for a checkpoint about to start, if Check() admits it.
  Admission Reserve(uint64_t bytes);
  // The checkpoint finished: its bytes now live in the suspended process (and so are no
  // longer in MemAvailable); they stay counted as held until Release().
  void Commit(uint64_t bytes);
  // The checkpoint failed or was abandoned before it held anything.
  void CancelReservation(uint64_t bytes);
  // A suspended process resumed or exited: its checkpoint no longer holds RAM.
  void Release(uint64_t bytes);
  // Counts an existing checkpoint found after a daemon restart (no admission check: the
  // memory is already spent).
  void Adopt(uint64_t bytes) { held_ += bytes; }

  uint64_t held_bytes() const { return held_; }        // held by suspended processes
  uint64_t in_flight_bytes() const { return in_flight_; }  // reserved for running checkpoints
  const HostMemoryOptions& options() const { return options_; }

 private:
  HostMemoryOptions options_;
  std::function<uint64_t()> available_bytes_;
  uint64_t held_ = 0;
  uint64_t in_flight_ = 0;
};

// MemAvailable from /proc/meminfo in bytes; 0 when it cannot be read.
uint64_t ReadMemAvailable();

}  // namespace gslice::suspend
