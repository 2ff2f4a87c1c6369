// gsliced's MPS control daemons: one per GPU that serves MPS (mps_plan.h says which and
// why), each started with `nvidia-cuda-mps-control -d` on that GPU alone, with pipe and log
// folders of gslice's own (never the world-reachable /tmp/nvidia-mps), watched, started again
// when it dies, and asked to quit when gsliced stops.
//
// Folders (options.directory, root's):
//   <directory>/                    0711  passable, not listable
//   <directory>/<GPU-uuid>/         0711  (0700 while its daemon starts)
//   <directory>/<GPU-uuid>/pipe/    0711  CUDA_MPS_PIPE_DIRECTORY: the daemon's socket
//                                         `control`, its pid file, the servers' log pipe
//   <directory>/<GPU-uuid>/log/     0700  CUDA_MPS_LOG_DIRECTORY: the daemon's logs
//   <directory>/<GPU-uuid>/tenant   0644  whether it serves, to which uid and class
//                                         (gslice/mps_client.h), for the Kubernetes plugins
//   <directory>/<GPU-uuid>/draining 0644  the pid of a daemon asked to quit that still has
//                                         clients: closed to all, it is waited for, never adopted
// Who reaches a daemon: its socket `control` is given to the GPU's tenant (Hand), mode 0600,
// so that only that uid (and root) can connect to it: as an MPS client, as the server the
// daemon starts for it, or with control commands, which then reach that uid's own server
// alone. A program of any other uid that is pointed at the folder cannot connect and runs
// without MPS (what CUDA does when it cannot reach a daemon); it never queues behind the
// tenant. Nothing under <directory> is writable by anyone but root, so the pid file and the
// socket gsliced talks to are the daemon's. The class a GPU serves (mps_plan.h) is not a
// matter of the socket (both classes of a uid run as that uid): it is kept by where gslice run
// and the plugins put each slice, which they read from the API and the tenant file.
//
// Thread-safe. Reconcile, Hand and Stop may take seconds (they run the control program); they
// are serialised among themselves, and States never waits for them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "model.h"
#include "mps_plan.h"
#include "status.h"

namespace gslice {

struct MpsServiceOptions {
  MpsMode mode = MpsMode::kAuto;
  MpsClasses classes = MpsClasses::kOne;  // which classes of its uid a GPU's MPS serves
  std::string control = "nvidia-cuda-mps-control";  // a path, or a name looked up in $PATH
  std::string directory = "/run/gsliced/mps";
  std::chrono::milliseconds start_timeout{5000};    // for `-d` to return and the pid file to show
  std::chrono::milliseconds command_timeout{5000};  // for one control command
  std::chrono::milliseconds stop_timeout{10000};    // for `quit` to end a daemon (Stop)
  std::chrono::milliseconds max_retry{60000};       // a daemon that fails to start is tried again
                                                    // after 1 s, then twice as long each time, up to this
};

// What the service knows of one GPU.
struct MpsDaemonState {
  MpsGpuState gpu;          // what PlanMps needs: sharing (with the daemon's state), tenant, busy
  int pid = 0;              // its control daemon, 0: none
  int restarts = 0;         // times it was found dead and started again
  std::string pipe_directory, log_directory;
};

class MpsService {
 public:
  explicit MpsService(MpsServiceOptions options);
  MpsService(const MpsService&) = delete;
  MpsService& operator=(const MpsService&) = delete;

  // Checks the options against this machine: the control program (found or not: `auto` runs
  // without it, `on` refuses to start without it) and the directory (a path, not a file).
  // Makes the directory. gsliced's start calls it once; a refusal says what to do.
  Status Prepare();
  // One line for gsliced's log: the mode, the control program and the directory, or why MPS is
  // not used.
  std::string Describe() const;

  // Runs a control daemon for every GPU of `gpus` that may serve MPS (DecideGpuSharing): adopts
  // one that runs already (a gsliced restarted), starts one that does not, starts again one
  // that died (its GPU's socket is given to the same tenant again), and asks those of GPUs no
  // longer listed or no longer allowed to quit. Called at start and by the sampler.
  void Reconcile(const std::vector<GpuInfo>& gpus);

  // Gives GPU `uuid`'s daemon to `uid` (-1: to no one but root) for its slices of class `cls`
  // (nullopt: both; ignored without a uid). Before another uid gets it the socket is closed to
  // all and the daemon asked for its servers: while one of another uid still has clients the
  // GPU stays closed and its busy_uid says whose they are (the next Hand asks again). Another
  // class of the same uid is given once that uid's server has no clients (whatever their class:
  // the daemon cannot tell); meanwhile the socket stays the uid's, its class is pending
  // (tenant_class nullopt) and busy_uid is the uid itself. Does nothing for a GPU without a
  // running daemon.
  void Hand(const std::string& uuid, int64_t uid, std::optional<SliceClass> cls);

  // The options' mps_classes, for the plan.
  MpsClasses classes() const { return options_.classes; }

  // Every GPU the service knows, in the order Reconcile was given them.
  std::vector<MpsDaemonState> States() const;

  // Closes every daemon's socket to all but root, asks it to quit and waits (stop_timeout) for
  // each; one whose server still has clients ends when they do (the log says so), and a later
  // gsliced waits for it to end before it starts the GPU's next. The folders stay.
  void Stop();

 private:
  struct Gpu {
    MpsDaemonState state;
    int compute_mode = -1;
    bool adopted_checked = false;
    int draining_pid = 0;  // a daemon asked to quit that still serves its last clients
    std::string problem;  // why its daemon is not running
    std::chrono::steady_clock::time_point next_attempt{};
    std::chrono::milliseconds backoff{1000};
    std::string published_tenant;  // what its tenant file says (gslice/mps_client.h)
  };
  bool ShouldServe(const Gpu& g) const;
  // REQUIRES: work_mu_ held (these run the control program or start processes).
  bool Start(Gpu* g);
  void StopDaemon(Gpu* g, const char* why);
  bool GiveSocket(const Gpu& g, int64_t uid, std::string* error) const;
  // Asks g's daemon for its servers and their clients: the uid of the first server whose uid
  // `counts` and that still has clients, or does not say them (-1: none); nullopt when the
  // daemon does not say its servers. *said: what was found, for the log.
  // REQUIRES: work_mu_ held.
  std::optional<int64_t> BusyServer(const Gpu& g, const std::function<bool(int64_t)>& counts,
                                    std::string* said) const;
  // Copies g's state for States() and writes its tenant file where that changed.
  // REQUIRES: work_mu_ held.
  void Publish(Gpu& g);

  const MpsServiceOptions options_;
  std::string control_path_;  // resolved; empty: not found
  mutable std::mutex work_mu_;  // serialises Reconcile, Hand, Stop
  std::map<std::string, Gpu> gpus_;  // REQUIRES: work_mu_ held
  std::vector<std::string> order_;   // REQUIRES: work_mu_ held
  mutable std::mutex state_mu_;
  std::vector<MpsDaemonState> published_;  // REQUIRES: state_mu_ held
};

}  // namespace gslice
