#include "gslice/suspend/manager.h"

#include <signal.h>

#include <cerrno>
#include <utility>

#include "gslice/clock.h"
#include "gslice/units.h"

namespace gslice::suspend {

namespace {

bool KillZeroAlive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

double SecondsSince(int64_t start_ns) { return static_cast<double>(MonotonicNs() - start_ns) / 1e9; }

std::string Size(uint64_t bytes) {
  char buf[32];
  return FormatSize(bytes, buf, sizeof(buf));
}

}  // namespace

SuspendManager::SuspendManager(CheckpointDriver* driver, HostMemoryBudget* budget,
                               ManagerOptions options, StateObserver* observer,
                               std::function<bool(int)> is_alive)
    : driver_(driver),
      budget_(budget),
      options_(options),
      observer_(observer),
      is_alive_(is_alive ? std::move(is_alive) : KillZeroAlive) {}

void SuspendManager::Track(const ProcessInfo& info) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = procs_.try_emplace(info.pid);
  ProcessStatus& s = it->second;
  if (inserted) {
    s.info = info;
    s.since_ns = MonotonicNs();
    return;
  }
  // A suspended process's usage reads low in the ledger while its memory is on the host;
  // keep the size it had when checkpointed.
  const uint64_t keep_bytes = s.state == State::kRunning ? info.device_bytes : s.info.device_bytes;
  const std::string keep_gpu = s.info.gpu_uuid;
  s.info = info;
  s.info.device_bytes = keep_bytes;
  if (s.moved) s.info.gpu_uuid = keep_gpu;
}

void SuspendManager::Forget(int pid) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = procs_.find(pid);
    if (it == procs_.end()) return;
    budget_->Release(it->second.host_bytes);
    procs_.erase(it);
  }
  if (observer_ != nullptr) observer_->OnForgotten(pid, "forgotten");
}

ProcessStatus SuspendManager::SetStateLocked(ProcessStatus& s, State to, std::string reason) {
  // Invalid edges are programming errors; record them rather than crash the daemon.
  if (!IsValidTransition(s.state, to)) {
    reason = std::string("internal: unexpected transition ") + StateName(s.state) + " -> " +
             StateName(to) + (reason.empty() ? "" : "; " + reason);
  }
  s.state = to;
  s.reason = std::move(reason);
  s.since_ns = MonotonicNs();
  return s;
}

void SuspendManager::Publish(const ProcessStatus& status, State previous) {
  if (observer_ != nullptr && status.state != previous) observer_->OnStateChanged(status, previous);
}

std::string SuspendManager::DriverError(const char* step, CUresult r) {
  return std::string(step) + " failed: " + driver_->ErrorName(r);
}

bool SuspendManager::HandleExitAfterFailure(int pid, Outcome* out) {
  if (is_alive_(pid)) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = procs_.find(pid);
    if (it != procs_.end()) {
      budget_->Release(it->second.host_bytes);
      // A reservation for a checkpoint that never finished is given back by the caller.
      procs_.erase(it);
    }
  }
  out->ok = false;
  out->exited = true;
  out->reason = "process " + std::to_string(pid) + " exited";
  if (observer_ != nullptr) observer_->OnForgotten(pid, out->reason);
  return true;
}

bool SuspendManager::BeginSuspend(int pid, Cause cause, Outcome* out, uint64_t* bytes) {
  ProcessStatus published;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = procs_.find(pid);
    if (it == procs_.end()) {
      out->reason = "process " + std::to_string(pid) + " is not a known GPU process";
      return false;
    }
    ProcessStatus& s = it->second;
    out->state = s.state;
    if (s.state == State::kSuspended) {
      out->ok = true;
      return false;  // already there
    }
    if (s.state != State::kRunning) {
      out->busy = IsTransitional(s.state);
      out->reason = "process " + std::to_string(pid) + " is " + StateName(s.state);
      return false;
    }
    if (!is_alive_(pid)) {
      out->reason = "process " + std::to_string(pid) + " exited";
      out->exited = true;
      procs_.erase(it);
      if (observer_ != nullptr) observer_->OnForgotten(pid, out->reason);
      return false;
    }
    *bytes = s.info.device_bytes;
    Admission a = budget_->Reserve(*bytes);
    if (!a.ok) {
      s.reason = a.reason;
      out->reason = a.reason;
      return false;
    }
    s.cause = cause;
    published = SetStateLocked(s, State::kSuspending, "");
  }
  Publish(published, State::kRunning);
  return true;
}

void SuspendManager::Finish(int pid, State to, const std::string& reason, Outcome* out,
                            const std::function<void(ProcessStatus&)>& account) {
  ProcessStatus st;
  State prev;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = procs_.find(pid);
    if (it == procs_.end()) return;
    prev = it->second.state;
    account(it->second);
    it->second.last = out->times;
    st = SetStateLocked(it->second, to, reason);
  }
  out->state = to;
  Publish(st, prev);
}

void SuspendManager::FinishSuspend(int pid, uint64_t bytes, State to, const std::string& reason, Outcome* out) {
  Finish(pid, to, reason, out, [&](ProcessStatus& s) {
    if (to == State::kSuspended) {
      budget_->Commit(bytes);
      s.host_bytes = bytes;
      ++s.suspends;
    } else {
      budget_->CancelReservation(bytes);
      if (to == State::kFailed) ++s.failures;
    }
  });
}

bool SuspendManager::GoneDuringSuspend(int pid, uint64_t bytes, Outcome* out) {
  if (is_alive_(pid)) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    budget_->CancelReservation(bytes);
  }
  return HandleExitAfterFailure(pid, out);
}

Outcome SuspendManager::Suspend(int pid, Cause cause) {
  Outcome out;
  out.pid = pid;
  uint64_t bytes = 0;
  if (!BeginSuspend(pid, cause, &out, &bytes)) return out;

  // From here on the process is ours until it is running or suspended again.
  auto finish = [&](State to, const std::string& reason) { FinishSuspend(pid, bytes, to, reason, &out); };
  auto gone = [&]() { return GoneDuringSuspend(pid, bytes, &out); };

  int64_t t0 = MonotonicNs();
  CUresult r = driver_->Lock(pid, options_.lock_timeout_ms);
  out.times.lock_s = SecondsSince(t0);
  if (r != CUDA_SUCCESS) {
    if (gone()) return out;
    std::string why = DriverError("lock", r);
    if (r == CUDA_ERROR_NOT_READY || r == CUDA_ERROR_TIMEOUT) {
      why = "lock timed out after " + std::to_string(options_.lock_timeout_ms) +
            " ms (a CUDA call of the process did not return)";
    } else if (r == CUDA_ERROR_NOT_SUPPORTED) {
      why = "the driver cannot checkpoint this process (" + std::string(driver_->ErrorName(r)) + ")";
    }
    // Lock failed: the driver left the process running. Make sure of it.
    CUprocessState ds = CU_PROCESS_STATE_RUNNING;
    if (driver_->GetState(pid, &ds) == CUDA_SUCCESS && ds == CU_PROCESS_STATE_LOCKED) {
      driver_->Unlock(pid);
    }
    out.reason = "suspend refused: " + why + "; the process keeps running";
    finish(State::kRunning, out.reason);
    return out;
  }

  t0 = MonotonicNs();
  r = driver_->Checkpoint(pid);
  out.times.checkpoint_s = SecondsSince(t0);
  if (r != CUDA_SUCCESS) {
    if (gone()) return out;
    const std::string why = DriverError("checkpoint", r);
    CUprocessState ds = CU_PROCESS_STATE_FAILED;
    CUresult qs = driver_->GetState(pid, &ds);
    if (qs == CUDA_SUCCESS && ds == CU_PROCESS_STATE_CHECKPOINTED) {
      // The driver reports an error yet holds the checkpoint: the process is suspended.
      finish(State::kSuspended, why + " (but the driver holds the checkpoint)");
      out.ok = true;
      return out;
    }
    if (qs == CUDA_SUCCESS && ds == CU_PROCESS_STATE_LOCKED) {
      t0 = MonotonicNs();
      CUresult ur = driver_->Unlock(pid);
      out.times.unlock_s = SecondsSince(t0);
      if (ur == CUDA_SUCCESS) {
        out.reason = "suspend failed: " + why + "; the process was unlocked and keeps running";
        finish(State::kRunning, out.reason);
        return out;
      }
      out.reason = "suspend failed: " + why + ", then " + DriverError("unlock", ur);
      finish(State::kFailed, out.reason);
      return out;
    }
    if (qs == CUDA_SUCCESS && ds == CU_PROCESS_STATE_RUNNING) {
      out.reason = "suspend failed: " + why + "; the process keeps running";
      finish(State::kRunning, out.reason);
      return out;
    }
    out.reason = "suspend failed: " + why + "; the driver reports the process " +
                 (qs == CUDA_SUCCESS ? DriverProcessStateName(ds) : driver_->ErrorName(qs));
    finish(State::kFailed, out.reason);
    return out;
  }
  out.ok = true;
  finish(State::kSuspended, "");
  return out;
}

void SuspendManager::FinishResume(int pid, bool moved, const std::string& new_gpu_uuid, State to,
                                  const std::string& reason, Outcome* out) {
  Finish(pid, to, reason, out, [&](ProcessStatus& s) {
    if (to == State::kRunning) {
      budget_->Release(s.host_bytes);
      s.host_bytes = 0;
      ++s.resumes;
      if (moved && !new_gpu_uuid.empty()) {
        s.info.gpu_uuid = new_gpu_uuid;
        s.moved = true;
      }
    } else if (to == State::kFailed) {
      ++s.failures;
    }
  });
}

Outcome SuspendManager::Resume(int pid, std::span<const GpuPair> pairs,
                               const std::string& new_gpu_uuid) {
  Outcome out;
  out.pid = pid;
  ProcessStatus published;
  State previous;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = procs_.find(pid);
    if (it == procs_.end()) {
      out.reason = "process " + std::to_string(pid) + " is not a known GPU process";
      return out;
    }
    ProcessStatus& s = it->second;
    out.state = s.state;
    if (s.state == State::kRunning && pairs.empty()) {
      out.ok = true;
      return out;
    }
    if (s.state != State::kSuspended && s.state != State::kFailed) {
      out.busy = IsTransitional(s.state);
      out.reason = "process " + std::to_string(pid) + " is " + StateName(s.state) +
                   (s.state == State::kRunning ? ": only a suspended process can move" : "");
      return out;
    }
    previous = s.state;
    published = SetStateLocked(s, State::kResuming, "");
  }
  Publish(published, previous);

  auto finish = [&](State to, const std::string& reason) {
    FinishResume(pid, !pairs.empty(), new_gpu_uuid, to, reason, &out);
  };

  CUprocessState ds = CU_PROCESS_STATE_CHECKPOINTED;
  CUresult qs = driver_->GetState(pid, &ds);
  if (qs != CUDA_SUCCESS) {
    if (HandleExitAfterFailure(pid, &out)) return out;
    out.reason = "resume failed: " + DriverError("state query", qs) + "; the process stays suspended";
    finish(State::kSuspended, out.reason);
    return out;
  }
  if (ds == CU_PROCESS_STATE_RUNNING) {
    out.ok = true;
    finish(State::kRunning, "");
    return out;
  }
  if (ds == CU_PROCESS_STATE_FAILED) {
    out.reason = "resume failed: the driver reports the process FAILED";
    finish(State::kFailed, out.reason);
    return out;
  }
  if (ds == CU_PROCESS_STATE_CHECKPOINTED) {
    int64_t t0 = MonotonicNs();
    CUresult r = driver_->Restore(pid, pairs);
    out.times.restore_s = SecondsSince(t0);
    if (r != CUDA_SUCCESS) {
      if (HandleExitAfterFailure(pid, &out)) return out;
      const std::string why = DriverError("restore", r);
      CUprocessState after = CU_PROCESS_STATE_FAILED;
      if (driver_->GetState(pid, &after) == CUDA_SUCCESS && after == CU_PROCESS_STATE_CHECKPOINTED) {
        out.reason = "resume failed: " + why + "; the process stays suspended and can be resumed";
        finish(State::kSuspended, out.reason);
      } else if (after == CU_PROCESS_STATE_LOCKED) {
        ds = CU_PROCESS_STATE_LOCKED;  // restored despite the error: unlock below
      } else {
        out.reason = "resume failed: " + why;
        finish(State::kFailed, out.reason);
      }
      if (ds != CU_PROCESS_STATE_LOCKED) return out;
    }
  }
  int64_t t0 = MonotonicNs();
  CUresult r = driver_->Unlock(pid);
  out.times.unlock_s = SecondsSince(t0);
  if (r != CUDA_SUCCESS) {
    if (HandleExitAfterFailure(pid, &out)) return out;
    CUprocessState after = CU_PROCESS_STATE_FAILED;
    if (driver_->GetState(pid, &after) == CUDA_SUCCESS && after == CU_PROCESS_STATE_RUNNING) {
      out.ok = true;
      finish(State::kRunning, "");
      return out;
    }
    out.reason = "resume failed: " + DriverError("unlock", r);
    finish(State::kFailed, out.reason);
    return out;
  }
  out.ok = true;
  finish(State::kRunning, "");
  return out;
}

Outcome SuspendManager::Adopt(const ProcessInfo& info) {
  Outcome out;
  out.pid = info.pid;
  Track(info);
  CUprocessState ds = CU_PROCESS_STATE_RUNNING;
  CUresult qs = driver_->GetState(info.pid, &ds);
  if (qs != CUDA_SUCCESS) {
    if (HandleExitAfterFailure(info.pid, &out)) return out;
    // No CUDA state the driver can report (not initialised yet, or no checkpoint support):
    // the process runs as far as anyone can tell.
    out.ok = true;
    out.state = State::kRunning;
    return out;
  }
  State to = State::kRunning;
  std::string reason;
  if (ds == CU_PROCESS_STATE_LOCKED) {
    // An interrupted suspend (before the checkpoint) or resume (after the restore): either
    // way the process's memory is on the GPU, so unlocking lets it run on.
    CUresult r = driver_->Unlock(info.pid);
    if (r != CUDA_SUCCESS) {
      to = State::kFailed;
      reason = "adopted LOCKED and " + DriverError("unlock", r);
    } else {
      reason = "adopted LOCKED (interrupted suspend or resume): unlocked";
    }
  } else if (ds == CU_PROCESS_STATE_CHECKPOINTED) {
    to = State::kSuspended;
  } else if (ds == CU_PROCESS_STATE_FAILED) {
    to = State::kFailed;
    reason = "the driver reports the process FAILED";
  }
  ProcessStatus st;
  State prev;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = procs_.find(info.pid);
    if (it == procs_.end()) return out;
    ProcessStatus& s = it->second;
    prev = s.state;
    // Adoption overrides whatever was assumed before the restart; no transition check.
    s.state = to;
    s.reason = reason;
    s.since_ns = MonotonicNs();
    if (to == State::kSuspended && s.host_bytes == 0) {
      s.host_bytes = s.info.device_bytes;
      budget_->Adopt(s.host_bytes);
    }
    st = s;
  }
  Publish(st, prev);
  out.ok = to != State::kFailed;
  out.state = to;
  out.reason = reason;
  return out;
}

std::vector<Outcome> SuspendManager::SuspendSlice(const std::string& slice, Cause cause) {
  std::vector<int> pids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [pid, s] : procs_) {
      if (s.info.slice == slice) pids.push_back(pid);
    }
  }
  std::vector<Outcome> outs;
  std::vector<int> done;
  for (int pid : pids) {
    Outcome o = Suspend(pid, cause);
    const bool ok = o.ok || o.exited;
    outs.push_back(o);
    if (o.ok && o.state == State::kSuspended) done.push_back(pid);
    if (!ok) {
      for (int back : done) {
        Outcome r = Resume(back);
        r.reason = "rolled back: " + (r.reason.empty() ? std::string("resumed") : r.reason);
        outs.push_back(r);
      }
      break;
    }
  }
  return outs;
}

std::vector<Outcome> SuspendManager::ResumeSlice(const std::string& slice) {
  std::vector<int> pids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [pid, s] : procs_) {
      if (s.info.slice == slice) pids.push_back(pid);
    }
  }
  std::vector<Outcome> outs;
  for (int pid : pids) outs.push_back(Resume(pid));
  return outs;
}

std::vector<int> SuspendManager::ReapExited() {
  std::vector<std::pair<int, std::string>> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = procs_.begin(); it != procs_.end();) {
      // Transitional processes belong to the call in flight, which notices the exit.
      if (!IsTransitional(it->second.state) && !is_alive_(it->first)) {
        std::string why = "process exited";
        if (it->second.host_bytes != 0) {
          why += " while suspended; its checkpoint (" + Size(it->second.host_bytes) +
                 " of host memory) was freed with it";
        }
        budget_->Release(it->second.host_bytes);
        gone.emplace_back(it->first, why);
        it = procs_.erase(it);
      } else {
        ++it;
      }
    }
  }
  std::vector<int> pids;
  for (auto& [pid, why] : gone) {
    pids.push_back(pid);
    if (observer_ != nullptr) observer_->OnForgotten(pid, why);
  }
  return pids;
}

std::optional<ProcessStatus> SuspendManager::Get(int pid) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = procs_.find(pid);
  if (it == procs_.end()) return std::nullopt;
  return it->second;
}

std::vector<ProcessStatus> SuspendManager::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ProcessStatus> v;
  v.reserve(procs_.size());
  for (const auto& [pid, s] : procs_) v.push_back(s);
  return v;
}

State SuspendManager::SliceState(const std::string& slice) const {
  std::vector<State> states;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [pid, s] : procs_) {
      if (s.info.slice == slice) states.push_back(s.state);
    }
  }
  return AggregateState(states);
}

}  // namespace gslice::suspend
