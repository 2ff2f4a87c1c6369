// The daemon's side of the node ledger (the shared memory every shimmed process reads its
// limits from and reports its usage to). gsliced publishes slice limits there and reads
// per-process usage back; it never resets usage, so publishing again after a restart is
// harmless to running work.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model.h"
#include "status.h"

namespace gslice {

// A slice as the ledger holds it.
struct PublishedSlice {
  std::string name;
  SliceClass slice_class = SliceClass::kGuaranteed;
  std::vector<SliceGpu> gpus;
  bool throttled = false;  // the compute gate is holding it back right now
};

class NodeLedger {
 public:
  virtual ~NodeLedger() = default;
  // Where it lives, for messages ("/dev/shm/gslice-ledger").
  virtual std::string Describe() const = 0;
  virtual Result<std::vector<PublishedSlice>> Slices() = 0;
  // Live processes with the slice and GPU they use.
  virtual Result<std::vector<ProcessUsage>> Processes() = 0;
  // Creates the slice or updates its limits in place. Idempotent.
  virtual Status Publish(const Slice& slice) = 0;
  // Removes the slice; processes still attached keep running and lose their limit.
  virtual Status Withdraw(const std::string& name) = 0;
};

// A ledger held in this process only: for tests, and for nodes where no shared ledger is
// configured (then slices exist in the registry but nothing enforces them).
std::unique_ptr<NodeLedger> MakeMemoryLedger();

}  // namespace gslice
