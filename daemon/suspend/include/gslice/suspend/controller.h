// SuspendController: the policies built on SuspendManager, run from the daemon's loop.
// - Idle reclaim: a process of a slice with an idle timeout whose activity counter has not
//   moved for that long is suspended (a suspend that host memory cannot take waits for a
//   later tick: it is queued, with the budget's reason kept on the process).
// - Resume on demand: the shim's resume gate caught a call of a suspended process.
// - Memory preemption: Preempt() suspends opportunistic processes on a GPU (planner) so a
//   guaranteed allocation fits; they resume when their memory is free again.
// - Move: resume a suspended process onto another GPU of the same type with room.
// Not thread-safe: one daemon thread calls it (the manager underneath is thread-safe).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "gslice/suspend/manager.h"
#include "gslice/suspend/planner.h"

namespace gslice::suspend {

// One process as the daemon sees it on a tick (ledger slot + slice settings).
struct ProcessSample {
  ProcessInfo info;
  uint64_t activity = 0;          // grows with every CUDA call the shim passes
  bool resume_requested = false;  // the shim's gate holds a call of this (suspended) process
  int64_t idle_timeout_ns = 0;    // its slice's idle timeout; 0 = never reclaimed
};

struct GpuInfo {
  std::string uuid;
  std::string name;         // product name; a move needs the same on both sides
  uint64_t free_bytes = 0;  // device memory free now
};

struct ControllerOptions {
  // A preempted process resumes once its GPU has its size free plus this margin, and no
  // preemption happened on that GPU for `preemption_quiet_ns`.
  uint64_t resume_margin_bytes = 256ULL << 20;
  int64_t preemption_quiet_ns = 2'000'000'000;
};

struct TickReport {
  std::vector<Outcome> idle_suspended;
  std::vector<Outcome> resumed;  // on demand or after preemption
  std::vector<std::string> queued;  // idle suspends host memory could not take, with reasons
  std::vector<int> exited;
};

struct PreemptResult {
  bool ok = false;
  PreemptionPlan plan;
  std::vector<Outcome> outcomes;
  std::string reason;  // when !ok: why the allocation cannot be satisfied
};

struct MovePlan {
  bool ok = false;
  GpuPair pair;
  std::string reason;
};

// Checks that a process of `bytes` checkpointed on `from` can be restored on `to`.
MovePlan PlanMove(const GpuInfo& from, const GpuInfo& to, uint64_t bytes);

class SuspendController {
 public:
  SuspendController(SuspendManager* manager, ControllerOptions options = {});

  // Reconciles the manager with `samples` (new processes tracked, exited ones reaped),
  // then applies idle reclaim, resume on demand and resume after preemption.
  // free_bytes(gpu_uuid) reports the device memory free on a GPU now.
  TickReport Tick(std::span<const ProcessSample> samples,
                  const std::function<uint64_t(const std::string&)>& free_bytes, int64_t now_ns);

  // Frees `need_bytes` on `gpu_uuid` (beyond `free_now`) by suspending opportunistic
  // processes there. Processes suspended before a failure stay suspended and resume later.
  PreemptResult Preempt(const std::string& gpu_uuid, uint64_t need_bytes, uint64_t free_now,
                        int64_t now_ns);

  // Starts the quiet period of `gpu_uuid` again at now_ns (never earlier than it stands):
  // called when the process that asked for memory is told it is free. The period then covers
  // that process's retry of its allocation, not the checkpoints before it, which can take
  // longer than the period itself (seconds for a large process).
  void HoldResumes(const std::string& gpu_uuid, int64_t now_ns);

  // Restores suspended process `pid` onto `to` (same product as `from`, enough room).
  Outcome Move(int pid, const GpuInfo& from, const GpuInfo& to);

 private:
  struct Activity {
    bool seen = false;
    uint64_t counter = 0;
    int64_t changed_ns = 0;  // when the counter last moved (or was first seen)
  };
  SuspendManager* manager_;
  ControllerOptions options_;
  std::map<int, Activity> activity_;
  std::map<std::string, int64_t> last_preemption_ns_;  // per GPU
};

}  // namespace gslice::suspend
