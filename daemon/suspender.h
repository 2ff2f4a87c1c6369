// The mechanism that suspends and resumes a slice's processes (the driver's checkpoint
// API; see the suspend/resume design). The registry drives the state machine
// (running -> suspending -> suspended -> resuming -> running, or failed) and calls a
// Suspender for the work itself, without holding its lock.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model.h"
#include "status.h"

namespace gslice {

class Suspender {
 public:
  virtual ~Suspender() = default;
  // Suspends every process in `pids` (all of the slice's); ok only when all are suspended.
  virtual Status Suspend(const Slice& slice, const std::vector<int>& pids) = 0;
  virtual Status Resume(const Slice& slice, const std::vector<int>& pids) = 0;
  // What the mechanism did on its own (idle reclaim, memory preemption) to a running
  // slice's processes: "suspending", "suspended", "resuming", "failed", or "" when they run.
  virtual std::string ObservedState(const std::string& /*slice*/) { return ""; }
};

// The suspender of a gsliced built without the checkpoint mechanism: every request is
// answered 501 with that reason, and the slice keeps running.
std::unique_ptr<Suspender> MakeUnavailableSuspender();

}  // namespace gslice
