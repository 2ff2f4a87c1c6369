#include "gslice/suspend/controller.h"

#include <algorithm>
#include <set>

#include "gslice/units.h"

namespace gslice::suspend {

namespace {
std::string Size(uint64_t bytes) {
  char buf[32];
  return FormatSize(bytes, buf, sizeof(buf));
}
}  // namespace

MovePlan PlanMove(const GpuInfo& from, const GpuInfo& to, uint64_t bytes) {
  MovePlan m;
  if (from.uuid == to.uuid) {
    m.reason = "move: the process is already on " + to.uuid;
    return m;
  }
  if (from.name != to.name) {
    m.reason = "move: " + to.uuid + " is a " + to.name + " but the process was checkpointed on a " +
               from.name + "; a restore needs a GPU of the same type";
    return m;
  }
  if (to.free_bytes < bytes) {
    m.reason = "move: " + to.uuid + " has " + Size(to.free_bytes) + " free, the process needs " +
               Size(bytes);
    return m;
  }
  if (!ParseGpuUuid(from.uuid, &m.pair.from) || !ParseGpuUuid(to.uuid, &m.pair.to)) {
    m.reason = "move: malformed GPU UUID (expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)";
    return m;
  }
  m.ok = true;
  return m;
}

SuspendController::SuspendController(SuspendManager* manager, ControllerOptions options)
    : manager_(manager), options_(options) {}

TickReport SuspendController::Tick(std::span<const ProcessSample> samples,
                                   const std::function<uint64_t(const std::string&)>& free_bytes,
                                   int64_t now_ns) {
  TickReport report;
  std::set<int> seen;
  for (const ProcessSample& s : samples) {
    seen.insert(s.info.pid);
    manager_->Track(s.info);
  }
  report.exited = manager_->ReapExited();
  for (int pid : report.exited) activity_.erase(pid);
  for (auto it = activity_.begin(); it != activity_.end();) {
    it = seen.count(it->first) ? std::next(it) : activity_.erase(it);
  }

  // GPUs memory comes back to during this tick, so two preempted processes do not both
  // count the same free bytes.
  std::map<std::string, uint64_t> promised;
  for (const ProcessSample& s : samples) {
    const int pid = s.info.pid;
    auto st = manager_->Get(pid);
    if (!st) continue;
    Activity& a = activity_[pid];
    if (!a.seen || s.activity != a.counter) {
      a.seen = true;
      a.counter = s.activity;
      a.changed_ns = now_ns;
    }
    if (st->state == State::kRunning) {
      if (s.idle_timeout_ns > 0 && now_ns - a.changed_ns >= s.idle_timeout_ns) {
        Outcome o = manager_->Suspend(pid, Cause::kIdle);
        if (o.ok) {
          report.idle_suspended.push_back(o);
        } else if (!o.exited && !o.busy) {
          report.queued.push_back("pid " + std::to_string(pid) + ": " + o.reason);
        }
      }
      continue;
    }
    if (st->state != State::kSuspended) continue;
    bool resume = false;
    if (st->cause == Cause::kIdle) {
      resume = s.resume_requested;
    } else if (st->cause == Cause::kPreemption) {
      const std::string& gpu = st->info.gpu_uuid;
      auto last = last_preemption_ns_.find(gpu);
      const bool quiet =
          last == last_preemption_ns_.end() || now_ns - last->second >= options_.preemption_quiet_ns;
      const uint64_t need = st->host_bytes + options_.resume_margin_bytes + promised[gpu];
      resume = quiet && free_bytes(gpu) >= need;
      if (resume) promised[gpu] += st->host_bytes;
    }
    // Manually suspended processes wait for `gslice resume`, calls or not.
    if (!resume) continue;
    Outcome o = manager_->Resume(pid);
    if (o.ok) a.changed_ns = now_ns;  // a resumed process starts a fresh idle period
    report.resumed.push_back(o);
  }
  return report;
}

PreemptResult SuspendController::Preempt(const std::string& gpu_uuid, uint64_t need_bytes,
                                         uint64_t free_now, int64_t now_ns) {
  PreemptResult res;
  if (need_bytes <= free_now) {
    res.ok = true;
    return res;
  }
  const uint64_t missing = need_bytes - free_now;
  std::vector<PreemptionCandidate> candidates;
  for (const ProcessStatus& s : manager_->Snapshot()) {
    if (s.state != State::kRunning || !s.info.opportunistic || s.info.gpu_uuid != gpu_uuid) continue;
    candidates.push_back({s.info.pid, s.info.device_bytes, s.info.device_bytes});
  }
  HostMemoryBudget& budget = manager_->budget();
  // What host memory can take: probe the budget by halving (it answers yes/no only).
  uint64_t host_room = 0;
  for (uint64_t step = 1ULL << 50; step != 0; step >>= 1) {
    if (budget.Check(host_room + step).ok) host_room += step;
  }
  res.plan = PlanPreemption(candidates, missing, host_room);
  if (!res.plan.ok) {
    res.reason = res.plan.reason;
    return res;
  }
  last_preemption_ns_[gpu_uuid] = now_ns;
  for (int pid : res.plan.pids) {
    Outcome o = manager_->Suspend(pid, Cause::kPreemption);
    res.outcomes.push_back(o);
    if (!o.ok && !o.exited) {
      res.reason = "preemption: could not suspend process " + std::to_string(pid) + ": " + o.reason;
      return res;
    }
  }
  res.ok = true;
  return res;
}

void SuspendController::HoldResumes(const std::string& gpu_uuid, int64_t now_ns) {
  int64_t& last = last_preemption_ns_[gpu_uuid];
  if (now_ns > last) last = now_ns;
}

Outcome SuspendController::Move(int pid, const GpuInfo& from, const GpuInfo& to) {
  Outcome out;
  out.pid = pid;
  auto st = manager_->Get(pid);
  if (!st) {
    out.reason = "process " + std::to_string(pid) + " is not a known GPU process";
    return out;
  }
  out.state = st->state;
  if (st->state != State::kSuspended) {
    out.reason = "move: process " + std::to_string(pid) + " is " + StateName(st->state) +
                 "; suspend it first (gslice suspend), then move it";
    return out;
  }
  MovePlan plan = PlanMove(from, to, st->host_bytes);
  if (!plan.ok) {
    out.reason = plan.reason + "; the process stays suspended";
    return out;
  }
  // The driver wants the pairs to map every GPU it checkpointed: pass the swap (from -> to,
  // to -> from), a permutation, so a process that also had the target GPU open keeps a
  // GPU for each of its contexts.
  const GpuPair swapped{plan.pair.to, plan.pair.from};
  const GpuPair pairs[] = {plan.pair, swapped};
  return manager_->Resume(pid, pairs, to.uuid);
}

}  // namespace gslice::suspend
