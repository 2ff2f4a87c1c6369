// The daemon's side of the node ledger (the shared memory every shimmed process reads its
// limits from and reports its usage to). gsliced publishes slice limits there and reads
// per-process usage back; it never resets usage, so publishing again after a restart is
// harmless to running work.
#pragma once

#include <map>
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
  uint32_t protect_permille = 0;  // LedgerSlice::protect_permille
  // LedgerSlice::owner_uid: the uid whose processes charge the slice (the pod's runAsUser for
  // Kubernetes' slices); -1 when not known.
  int64_t owner_uid = -1;
};

class NodeLedger {
 public:
  virtual ~NodeLedger() = default;
  // Where it lives, for messages ("/dev/shm/gslice-ledger").
  virtual std::string Describe() const = 0;
  virtual Result<std::vector<PublishedSlice>> Slices() = 0;
  // Live processes with the slice and GPU they use.
  virtual Result<std::vector<ProcessUsage>> Processes() = 0;
  // Creates the slice or updates its class, protection level and limits in place. Idempotent: publishing
  // again (after a restart) never resets usage.
  virtual Status Publish(const Slice& slice) = 0;
  // Publishes a slice the registry has just created, in an entry of its own: nothing of an
  // earlier slice of that name carries over (GPUs, limits, usage, processes). An entry of
  // that name that was withdrawn, or that no live process uses, is set aside first (its
  // processes, if any, keep their limits until they exit). Conflict when live processes use
  // an entry of that name that the registry never took (a `gslice run` slice not adopted yet).
  virtual Status PublishNew(const Slice& slice) = 0;
  // Sets the slice's class in the ledger and nothing else (limits and usage stay).
  virtual Status SetClass(const std::string& name, SliceClass slice_class) = 0;
  // Changes a published slice in place while its processes run (gslice set): its class and,
  // on each of its GPUs, its memory limit and (with `compute`) its compute policy
  // (LedgerGpu::compute_cap, compute_share); GPUs not in the ledger yet are added, as Publish
  // does. The processes see the new limit at their next charge or memory query. With `held`,
  // where a GPU's new limit is below what the slice's processes hold there, nothing changes:
  // Conflict, and *held gets what they hold on each such GPU, by UUID. A limit is lowered
  // before the usage is summed, so no allocation racing the change slips past it
  // (Ledger::Charge). With held null the limits are set whatever the slice holds (a suspended
  // slice, whose memory is on the host: what it restores counts against the new limit; an undo).
  // The default suits a ledger no process charges (in-process, tests): it publishes.
  virtual Status Resize(const Slice& slice, bool compute, std::map<std::string, uint64_t>* held) {
    (void)compute;
    (void)held;
    return Publish(slice);
  }

  enum class Withdrawal {
    // Deleted: the entry is never listed by Slices() again, so no restart adopts it back.
    // Processes still attached keep their limits until they exit; processes that start
    // later under the name make a new entry, which gsliced admits like any slice it finds.
    kDeleted,
    // Expired (no process left): the entry is freed once nobody uses it; if processes of it
    // show up after all, Slices() lists it again.
    kExpired,
  };
  // Stops publishing the slice. Succeeds when there is no such entry.
  virtual Status Withdraw(const std::string& name, Withdrawal how) = 0;
  // Undoes this process's last Withdraw of `name` (when a database change it belonged to
  // failed), if the entry was not reused meanwhile. Succeeds when there is nothing to undo.
  virtual Status Restore(const std::string& name) = 0;

  // Timelines (docs/trace.md). StartTrace makes the request's folder (owned by the slice's
  // owner, 0700; gslice/trace_format.h: TraceRequestFolder) and sets the slice's trace request
  // word to `request` (non-zero), so that its processes record; it says where their parts will
  // be and how many processes the slice has now. StopTrace clears the word: each process then
  // writes its part there. A ledger no process reads (in-process, tests) cannot record.
  struct TraceTarget {
    std::string folder;
    int processes = 0;
  };
  virtual Result<TraceTarget> StartTrace(const std::string& name, uint32_t request) {
    (void)name;
    (void)request;
    return Status::Unavailable("this gsliced has no node ledger its slices' processes read: nothing to record");
  }
  virtual Status StopTrace(const std::string& name) {
    (void)name;
    return Status::Ok();
  }
};

// A ledger held in this process only: for tests, and for nodes where no shared ledger is
// configured (then slices exist in the registry but nothing enforces them).
std::unique_ptr<NodeLedger> MakeMemoryLedger();

}  // namespace gslice
