// SuspendService: the running part of suspend/resume inside gsliced (or the standalone
// gslice-suspend-agent). It joins the pieces:
//   node ledger (which processes, which slice and class, how much device memory)
//   + suspend board (the shims' activity, resume requests and preemption requests)
//   -> SuspendController (idle reclaim, resume on demand, preemption, resume when free)
//   -> SuspendManager (state machine, driver checkpoint calls, host-memory budget)
//   -> gate words on the board (a suspended process's calls wait in its shim).
// One thread runs Tick() every tick_ms, and at once when a shim rings the doorbell.
// Restarting the service adopts processes where the driver has them (manager.h).
// Processes in containers are on the board and in the ledger by (pid namespace, their own
// pid); the service names them by the pid it sees (PidResolver), which is what the driver's
// checkpoint calls, the CLI and the manager use.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gslice/ledger.h"
#include "gslice/pid_namespace.h"
#include "gslice/suspend/controller.h"
#include "gslice/suspend/manager.h"
#include "gslice/suspend_board.h"

namespace gslice::suspend {

struct ServiceOptions {
  std::string ledger_path = "/dev/shm/gslice";
  std::string board_path = "/dev/shm/gslice-suspend";  // a directory (suspend_board.h), made if missing
  std::string driver_library;  // "" = libcuda.so.1
  std::string nvml_library;    // "" = libnvidia-ml.so.1
  // The proc mount that names processes as the driver's checkpoint calls want them (the
  // service's own pid namespace; gsliced runs with hostPID). Tests pass a made-up one.
  std::string proc_root = "/proc";
  int tick_ms = 250;
  HostMemoryOptions host;
  ManagerOptions manager;
  ControllerOptions controller;
  // Idle timeout of a slice in seconds (0: never reclaimed). gsliced answers from its
  // registry; the agent from its --idle flags.
  std::function<int64_t(const std::string& slice)> idle_timeout_s;
  // Device memory free on a GPU now; default: NVML (nvmlDeviceGetMemoryInfo by UUID).
  std::function<uint64_t(const std::string& gpu_uuid)> free_bytes;
  // Told about every state change (after the board's gate is updated).
  std::function<void(const ProcessStatus&)> on_state;
};

class SuspendService {
 public:
  // Opens the ledger, the board and the driver. Null with *error set when one cannot be
  // used ("cannot load libcuda.so.1 ...").
  static std::unique_ptr<SuspendService> Create(ServiceOptions options, std::string* error);
  // For tests: a given driver instead of dlopen.
  static std::unique_ptr<SuspendService> CreateWithDriver(ServiceOptions options,
                                                          std::unique_ptr<CheckpointDriver> driver,
                                                          std::string* error);
  ~SuspendService();

  // Runs Tick() on a thread until Stop(). Marks the board as served (the shims' preemption
  // requests need a live service).
  void Start();
  void Stop();
  // One pass: adopt new processes, reap exited ones, idle reclaim, resume on demand and
  // after preemption, answer preemption requests.
  TickReport Tick();

  // Manual control (gslice suspend/resume/move through gsliced). Processes are looked up in
  // the ledger first, so a pid need not have been seen by a tick.
  Outcome Suspend(int pid);
  Outcome Resume(int pid);
  Outcome Move(int pid, const GpuInfo& from, const GpuInfo& to);
  std::vector<Outcome> SuspendPids(const std::vector<int>& pids);  // all or none
  std::vector<Outcome> ResumePids(const std::vector<int>& pids);

  SuspendManager& manager() { return *manager_; }
  std::vector<ProcessStatus> Snapshot() const { return manager_->Snapshot(); }

 private:
  class BoardObserver;
  SuspendService() = default;
  bool Init(ServiceOptions options, std::unique_ptr<CheckpointDriver> driver, std::string* error);
  std::vector<ProcessSample> Sample();
  void AnswerMemoryRequests(int64_t now);
  void AnswerMoveRequests();
  // Name and free memory of a GPU from NVML; false when NVML does not know it.
  bool DescribeGpu(const std::string& uuid, GpuInfo* out);
  void* Nvml();
  void TrackFromLedger(int pid);
  // The pid (as we see it) of a live board entry's owner, once that process is seen to map
  // the entry's partition writable (so the entry is its own); 0 when it is not visible from
  // our pid namespace or the entry names somebody else's process.
  // known_host_pid: the pid as we see it when the caller knows it already.
  int Verified(const SuspendServiceBoard::Ref& r, int known_host_pid = 0);
  // The board entry of the process we see as host_pid.
  std::optional<SuspendServiceBoard::Ref> EntryOf(int host_pid);
  uint64_t FreeBytes(const std::string& gpu);

  ServiceOptions options_;
  Ledger ledger_;
  SuspendServiceBoard board_;               // under tick_mu_
  std::unique_ptr<PidResolver> resolver_;  // under tick_mu_
  std::mutex entries_mu_;                   // entry_of_
  std::map<int, SuspendServiceBoard::Ref> entry_of_;  // pid as we see it -> its board entry
  // (partition, index, owner word) -> (pid as we see it or 0 when refused, when to look again)
  std::map<std::tuple<int, int, uint64_t>, std::pair<int, int64_t>> verified_;  // under tick_mu_
  std::unique_ptr<CheckpointDriver> driver_;
  std::unique_ptr<HostMemoryBudget> budget_;
  std::unique_ptr<BoardObserver> observer_;
  std::unique_ptr<SuspendManager> manager_;
  std::unique_ptr<SuspendController> controller_;
  std::mutex tick_mu_;  // one Tick (and one manual request) at a time
  std::thread thread_;
  std::thread heartbeat_;
  std::mutex heartbeat_mu_;
  std::condition_variable heartbeat_cv_;
  std::atomic<bool> stop_{false};
  // NVML, dlopened on first use.
  void* nvml_ = nullptr;
  bool nvml_tried_ = false;
};

}  // namespace gslice::suspend
