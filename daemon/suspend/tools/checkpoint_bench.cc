// gslice-checkpoint-bench: suspends and resumes one process through the driver's checkpoint
// API, either with the raw calls (lock, checkpoint, restore, unlock) or through gslice's
// SuspendManager (state machine, host-memory admission, failure handling), and prints how
// long each step took. The GPU suite uses it to compare the two and to drive the PyTorch
// cases; it is also a handy tool when a process must be paused by hand.
//
//   gslice-checkpoint-bench --pid PID [--mode raw|gslice] [--action cycle|suspend|resume|state]
//                           [--bytes N] [--hold-ms N] [--to GPU-UUID --from GPU-UUID]
//                           [--driver PATH]
//
// Output: one line "TIMES mode=... action=... lock_s=... checkpoint_s=... restore_s=...
// unlock_s=... total_s=... state=..." (or an error on stderr and exit status 1).
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gslice/clock.h"
#include "gslice/suspend/driver.h"
#include "gslice/suspend/host_memory.h"
#include "gslice/suspend/manager.h"
#include "gslice/units.h"

namespace {

using gslice::suspend::CheckpointDriver;
using gslice::suspend::GpuPair;
using gslice::MonotonicNs;
using gslice::suspend::StepTimes;

struct Args {
  int pid = 0;
  std::string mode = "gslice";
  std::string action = "cycle";
  uint64_t bytes = 0;
  long hold_ms = 0;
  std::string from, to, driver;
};

void Usage() {
  std::fprintf(stderr,
               "usage: gslice-checkpoint-bench --pid PID [--mode raw|gslice]\n"
               "         [--action cycle|suspend|resume|state] [--bytes SIZE] [--hold-ms N]\n"
               "         [--from GPU-UUID --to GPU-UUID] [--driver PATH]\n"
               "  cycle: suspend, hold, resume; suspend/resume: one half; state: driver state.\n"
               "  --bytes: device memory the process holds (host-memory admission, gslice mode).\n");
}

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&](const char* what) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gslice-checkpoint-bench: %s needs a value\n", what);
        return nullptr;
      }
      return argv[++i];
    };
    const char* v = nullptr;
    if (k == "--help" || k == "-h") {
      Usage();
      std::exit(0);
    } else if (k == "--pid") {
      if (!(v = next("--pid"))) return false;
      a->pid = std::atoi(v);
    } else if (k == "--mode") {
      if (!(v = next("--mode"))) return false;
      a->mode = v;
    } else if (k == "--action") {
      if (!(v = next("--action"))) return false;
      a->action = v;
    } else if (k == "--bytes") {
      if (!(v = next("--bytes"))) return false;
      gslice::ParsedSize s = gslice::ParseSize(v);
      if (!s.ok) {
        std::fprintf(stderr, "gslice-checkpoint-bench: --bytes %s: %s\n", v, s.error);
        return false;
      }
      a->bytes = s.bytes;
    } else if (k == "--hold-ms") {
      if (!(v = next("--hold-ms"))) return false;
      a->hold_ms = std::atol(v);
    } else if (k == "--from") {
      if (!(v = next("--from"))) return false;
      a->from = v;
    } else if (k == "--to") {
      if (!(v = next("--to"))) return false;
      a->to = v;
    } else if (k == "--driver") {
      if (!(v = next("--driver"))) return false;
      a->driver = v;
    } else {
      std::fprintf(stderr, "gslice-checkpoint-bench: unknown argument %s\n", k.c_str());
      Usage();
      return false;
    }
  }
  if (a->pid <= 0) {
    std::fprintf(stderr, "gslice-checkpoint-bench: --pid PID is required\n");
    return false;
  }
  if (a->mode != "raw" && a->mode != "gslice") {
    std::fprintf(stderr, "gslice-checkpoint-bench: --mode must be raw or gslice\n");
    return false;
  }
  if (a->action != "cycle" && a->action != "suspend" && a->action != "resume" &&
      a->action != "state") {
    std::fprintf(stderr, "gslice-checkpoint-bench: --action must be cycle, suspend, resume or state\n");
    return false;
  }
  if (a->from.empty() != a->to.empty()) {
    std::fprintf(stderr, "gslice-checkpoint-bench: --from and --to go together\n");
    return false;
  }
  return true;
}

double Since(int64_t t0) { return static_cast<double>(MonotonicNs() - t0) / 1e9; }

void PrintTimes(const Args& a, const StepTimes& t, const char* state, const char* extra) {
  std::printf("TIMES mode=%s action=%s pid=%d lock_s=%.6f checkpoint_s=%.6f restore_s=%.6f "
              "unlock_s=%.6f total_s=%.6f state=%s%s%s\n",
              a.mode.c_str(), a.action.c_str(), a.pid, t.lock_s, t.checkpoint_s, t.restore_s,
              t.unlock_s, t.total_s(), state, *extra ? " " : "", extra);
  std::fflush(stdout);
}

bool Check(CheckpointDriver& d, const char* step, CUresult r) {
  if (r == CUDA_SUCCESS) return true;
  std::fprintf(stderr, "gslice-checkpoint-bench: %s failed: %s\n", step, d.ErrorName(r));
  return false;
}

// The raw calls, timed one by one: the baseline gslice is compared against.
int RunRaw(CheckpointDriver& d, const Args& a, std::vector<GpuPair>& pairs) {
  StepTimes t;
  int64_t wall = MonotonicNs();
  if (a.action == "cycle" || a.action == "suspend") {
    int64_t t0 = MonotonicNs();
    if (!Check(d, "lock", d.Lock(a.pid, 0))) return 1;
    t.lock_s = Since(t0);
    t0 = MonotonicNs();
    if (!Check(d, "checkpoint", d.Checkpoint(a.pid))) return 1;
    t.checkpoint_s = Since(t0);
  }
  if (a.action == "cycle" && a.hold_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(a.hold_ms));
  }
  if (a.action == "cycle") wall = MonotonicNs();  // resume wall time only, below
  if (a.action == "cycle" || a.action == "resume") {
    int64_t t0 = MonotonicNs();
    if (!Check(d, "restore", d.Restore(a.pid, pairs))) return 1;
    t.restore_s = Since(t0);
    t0 = MonotonicNs();
    if (!Check(d, "unlock", d.Unlock(a.pid))) return 1;
    t.unlock_s = Since(t0);
  }
  (void)wall;
  CUprocessState s = CU_PROCESS_STATE_RUNNING;
  d.GetState(a.pid, &s);
  PrintTimes(a, t, gslice::suspend::DriverProcessStateName(s), "");
  return 0;
}

// The same through SuspendManager: what gsliced does for `gslice suspend|resume|move`.
int RunGslice(CheckpointDriver& d, const Args& a, std::vector<GpuPair>& pairs) {
  gslice::suspend::HostMemoryBudget budget({});
  gslice::suspend::SuspendManager mgr(&d, &budget, {});
  gslice::suspend::ProcessInfo info;
  info.pid = a.pid;
  info.slice = "bench";
  info.gpu_uuid = a.from;
  info.device_bytes = a.bytes;
  // A separate resume invocation finds the process CHECKPOINTED: the restart path.
  gslice::suspend::Outcome adopt = mgr.Adopt(info);
  if (adopt.exited) {
    std::fprintf(stderr, "gslice-checkpoint-bench: %s\n", adopt.reason.c_str());
    return 1;
  }
  StepTimes t;
  // Wall time of the manager's calls beyond the driver steps: what gslice itself adds.
  double added_s = 0;
  if (a.action == "cycle" || a.action == "suspend") {
    const int64_t w0 = MonotonicNs();
    gslice::suspend::Outcome o = mgr.Suspend(a.pid, gslice::suspend::Cause::kManual);
    added_s += Since(w0) - o.times.total_s();
    if (!o.ok) {
      std::fprintf(stderr, "gslice-checkpoint-bench: %s\n", o.reason.c_str());
      return 1;
    }
    t.lock_s = o.times.lock_s;
    t.checkpoint_s = o.times.checkpoint_s;
  }
  if (a.action == "cycle" && a.hold_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(a.hold_ms));
  }
  if (a.action == "cycle" || a.action == "resume") {
    const int64_t w0 = MonotonicNs();
    gslice::suspend::Outcome o = mgr.Resume(a.pid, pairs, a.to);
    added_s += Since(w0) - o.times.total_s();
    if (!o.ok) {
      std::fprintf(stderr, "gslice-checkpoint-bench: %s\n", o.reason.c_str());
      return 1;
    }
    t.restore_s = o.times.restore_s;
    t.unlock_s = o.times.unlock_s;
  }
  auto st = mgr.Get(a.pid);
  char added[32];
  std::snprintf(added, sizeof added, "%.6f", added_s);
  std::string extra = "host_held_bytes=" + std::to_string(budget.held_bytes()) + " added_s=" + added;
  PrintTimes(a, t, st ? gslice::suspend::StateName(st->state) : "gone", extra.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, &a)) return 2;
  std::string error;
  auto driver = gslice::suspend::DlopenCheckpointDriver::Open(a.driver.c_str(), &error);
  if (!driver) {
    std::fprintf(stderr, "gslice-checkpoint-bench: %s\n", error.c_str());
    return 1;
  }
  std::vector<GpuPair> pairs;
  if (!a.from.empty()) {
    GpuPair p;
    if (!gslice::suspend::ParseGpuUuid(a.from, &p.from) ||
        !gslice::suspend::ParseGpuUuid(a.to, &p.to)) {
      std::fprintf(stderr, "gslice-checkpoint-bench: --from/--to: expected GPU-xxxxxxxx-xxxx-...\n");
      return 2;
    }
    pairs.push_back(p);
  }
  if (a.action == "state") {
    CUprocessState s = CU_PROCESS_STATE_RUNNING;
    int64_t t0 = MonotonicNs();
    CUresult r = driver->GetState(a.pid, &s);
    if (!Check(*driver, "state", r)) return 1;
    std::printf("STATE pid=%d state=%s query_s=%.6f\n", a.pid,
                gslice::suspend::DriverProcessStateName(s), Since(t0));
    return 0;
  }
  return a.mode == "raw" ? RunRaw(*driver, a, pairs) : RunGslice(*driver, a, pairs);
}
