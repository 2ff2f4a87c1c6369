// SuspendManager: the per-process suspend state machine, driving the driver's checkpoint
// API. One instance per daemon; thread-safe. Driver calls run without the internal lock
// held (a 40 GiB checkpoint takes seconds), so readers (API, metrics) never wait on them;
// while a call is in flight the process sits in a transitional state and other requests
// for it are answered "busy".
//
// Guarantees, whatever the driver answers:
// - A suspend that fails before the checkpoint completes leaves the process running (the
//   driver lock is released again).
// - A resume that fails while the driver still holds the checkpoint leaves the process
//   suspended and resumable.
// - Host memory is reserved before a checkpoint starts and given back when the process
//   resumes or exits; a suspend that does not fit is refused with the budget's reason.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gslice/suspend/driver.h"
#include "gslice/suspend/host_memory.h"
#include "gslice/suspend/state.h"

namespace gslice::suspend {

struct ProcessInfo {
  int pid = 0;
  std::string slice;
  std::string gpu_uuid;       // GPU it runs on ("GPU-..."), empty when unknown
  uint64_t device_bytes = 0;  // device memory it holds: what a checkpoint moves to RAM
  bool opportunistic = false;
};

// Seconds each driver step took in the last suspend or resume (0 = not run).
struct StepTimes {
  double lock_s = 0, checkpoint_s = 0, restore_s = 0, unlock_s = 0;
  double total_s() const { return lock_s + checkpoint_s + restore_s + unlock_s; }
};

struct ProcessStatus {
  ProcessInfo info;
  State state = State::kRunning;
  Cause cause = Cause::kManual;  // of the current or last suspension
  std::string reason;            // last refusal or failure, "" when none
  uint64_t host_bytes = 0;       // RAM held by its checkpoint while suspended
  int64_t since_ns = 0;          // CLOCK_MONOTONIC time the state was entered
  StepTimes last;                // last suspend or resume
  uint64_t suspends = 0, resumes = 0, failures = 0;  // counters for metrics
  // Set by a move: the ledger still charges the process under the GPU it started on, so
  // later refreshes keep the GPU it was moved to.
  bool moved = false;
};

struct Outcome {
  bool ok = false;
  int pid = 0;
  State state = State::kRunning;  // state after the call
  std::string reason;             // when !ok, what happened and what the process does now
  StepTimes times;
  bool busy = false;   // refused because another operation on the process is in flight
  bool exited = false; // the process is gone (forgotten)
};

// Told about every state change, with the internal lock NOT held; the daemon publishes the
// state to the process's ledger slot (so the shim's resume gate sees it), SQLite, metrics.
class StateObserver {
 public:
  virtual ~StateObserver() = default;
  virtual void OnStateChanged(const ProcessStatus& status, State previous) = 0;
  virtual void OnForgotten(int pid, const std::string& why) = 0;
};

struct ManagerOptions {
  unsigned lock_timeout_ms = 10000;  // how long a suspend waits for in-flight CUDA calls
};

class SuspendManager {
 public:
  // `driver` and `budget` must outlive the manager. is_alive defaults to kill(pid, 0).
  SuspendManager(CheckpointDriver* driver, HostMemoryBudget* budget, ManagerOptions options,
                 StateObserver* observer = nullptr, std::function<bool(int)> is_alive = nullptr);

  // Adds a running process, or refreshes the info of a known one (state kept).
  void Track(const ProcessInfo& info);
  // After a daemon restart: asks the driver where the process is and takes it from there
  // (RUNNING: running; CHECKPOINTED: suspended, its RAM counted; LOCKED: an interrupted
  // suspend or resume, finished by unlocking so the process runs; FAILED: failed).
  Outcome Adopt(const ProcessInfo& info);
  void Forget(int pid);

  Outcome Suspend(int pid, Cause cause);
  // Restores onto the GPUs it ran on, or through `pairs` onto others (a move); on success
  // a move updates info.gpu_uuid to `new_gpu_uuid`.
  Outcome Resume(int pid, std::span<const GpuPair> pairs = {}, const std::string& new_gpu_uuid = "");

  // Every tracked process of the slice, one after another. A suspend that fails for one
  // process resumes those of the slice already suspended by this call, so a slice is never
  // left half-suspended by it.
  std::vector<Outcome> SuspendSlice(const std::string& slice, Cause cause);
  std::vector<Outcome> ResumeSlice(const std::string& slice);

  // Forgets processes that have exited, releasing the RAM their checkpoints held; returns
  // their pids. Exits during a driver call are noticed by that call.
  std::vector<int> ReapExited();

  std::optional<ProcessStatus> Get(int pid) const;
  std::vector<ProcessStatus> Snapshot() const;
  State SliceState(const std::string& slice) const;
  HostMemoryBudget& budget() { return *budget_; }

 private:
  // Sets the state (checked against IsValidTransition) and returns the status to publish.
  ProcessStatus SetStateLocked(ProcessStatus& s, State to, std::string reason);
  void Publish(const ProcessStatus& status, State previous);
  // After a failed driver call: if the process is gone, forgets it and fills `out`.
  bool HandleExitAfterFailure(int pid, Outcome* out);
  std::string DriverError(const char* step, CUresult r);
  // Leaves pid in `to` (a process no longer tracked is left alone): account(its status) under
  // the lock, out's times recorded, the change published.
  void Finish(int pid, State to, const std::string& reason, Outcome* out,
              const std::function<void(ProcessStatus&)>& account);
  // Suspend's steps. BeginSuspend: moves a running, live process to kSuspending with `bytes`
  // of host memory reserved for it; false with *out saying why not. FinishSuspend: leaves it
  // in `to` (kSuspended commits the reservation, anything else cancels it). GoneDuringSuspend:
  // after a failed driver call, whether the process exited (its reservation cancelled).
  bool BeginSuspend(int pid, Cause cause, Outcome* out, uint64_t* bytes);
  void FinishSuspend(int pid, uint64_t bytes, State to, const std::string& reason, Outcome* out);
  bool GoneDuringSuspend(int pid, uint64_t bytes, Outcome* out);
  // Leaves a resuming process in `to`: kRunning releases its host memory and, after a move
  // (pairs not empty), records its new GPU.
  void FinishResume(int pid, bool moved, const std::string& new_gpu_uuid, State to, const std::string& reason,
                    Outcome* out);

  CheckpointDriver* driver_;
  HostMemoryBudget* budget_;
  ManagerOptions options_;
  StateObserver* observer_;
  std::function<bool(int)> is_alive_;
  mutable std::mutex mu_;
  std::map<int, ProcessStatus> procs_;  // guarded by mu_
};

}  // namespace gslice::suspend
