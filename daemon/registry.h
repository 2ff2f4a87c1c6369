// The registry: the daemon's one owner of slices, projects and users. It keeps them in the
// Store, publishes limits to the node ledger, applies admission control, drives the
// suspend/resume state machine, and samples usage for metrics and the dashboard.
//
// Thread-safe: every public method may be called from any API thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gpu_inventory.h"
#include "gslice/ledger.h"
#include "gslice/pid_namespace.h"
#include "history.h"
#include "model.h"
#include "mps_plan.h"
#include "mps_service.h"
#include "node_ledger.h"
#include "pod_resolver.h"
#include "store.h"
#include "suspender.h"

namespace gslice {

// How a slice shares one of its GPUs (mps_plan.h): on its MPS server, or time-sliced, and why.
struct SliceGpuSharing {
  bool mps = false;
  std::string why;
  int64_t uid = -1;                 // on MPS: the uid its server serves (its programs must run as it)
  std::optional<SliceClass> slice_class = std::nullopt;  // on MPS: the class it serves; nullopt: both
  std::string pipe_directory = {};  // on MPS: CUDA_MPS_PIPE_DIRECTORY
  std::string log_directory = {};   // on MPS: CUDA_MPS_LOG_DIRECTORY
};

// Live view of one slice: the record plus what its processes use now.
struct SliceView {
  Slice slice;
  std::map<std::string, uint64_t> memory_used;  // by GPU UUID
  double compute_used = -1;                      // 0..1, -1 unknown
  bool throttled = false;
  std::vector<ProcessUsage> processes;
  // "running", "throttled", "idle" (no process) or the lifecycle state when not running.
  std::string activity;
  std::map<std::string, SliceGpuSharing> sharing;  // by GPU UUID
};

struct ProjectView {
  Project project;
  uint64_t guaranteed_memory = 0;
  double guaranteed_compute = 0;
  int slices = 0;
};

struct GpuView {
  GpuInfo gpu;
  uint64_t guaranteed_memory = 0;
  double guaranteed_compute = 0;
  int slices = 0;
  GpuSharing sharing = {};  // MPS or time-sliced, why, and its MPS tenant (mps_plan.h)
  int mps_restarts = 0;     // times its MPS control daemon was found dead and started again
};

// Everything the API, the metrics and the dashboard show, taken at one instant.
struct NodeSnapshot {
  int64_t time_ms = 0;
  std::vector<GpuView> gpus;
  std::vector<SliceView> slices;
  std::vector<ProjectView> projects;
  std::vector<User> users;
  std::string ledger;  // where the ledger lives
};

// Counters for the metrics page (monotonic since start).
struct RegistryCounters {
  std::atomic<uint64_t> slices_created{0};
  std::atomic<uint64_t> slices_deleted{0};
  std::atomic<uint64_t> admission_refusals{0};
  std::atomic<uint64_t> slices_adopted{0};
  std::atomic<uint64_t> suspend_requests{0};
  std::atomic<uint64_t> resume_requests{0};
  std::atomic<uint64_t> samples{0};
};

// Who calls the API, as the kernel (unix socket: SO_PEERCRED) or the token (TCP) says;
// never as a request body says.
struct Caller {
  std::string user;  // user name (passwd), or "uid-N" when it has none usable as a name
  int64_t uid = -1;  // -1: no kernel identity (a token caller)
  bool admin = false;  // root, a member of admin_group, or the token's holder
  std::string Describe() const;  // "alice (uid 1000)", "token holder"
  // The daemon itself and in-process callers that act with its authority.
  static Caller Daemon() { return Caller{.user = "root", .uid = 0, .admin = true}; }
};

// Whether `caller` may change, suspend, resume or delete `slice`: admins may change any;
// others only slices they own (same uid, or the same user name where the owner's uid is
// not known). The error (403) says whose slice it is and who may change it.
Status MayChange(const Slice& slice, const Caller& caller);

// The answer (404) for a slice name that names no slice, and, where callers may read only their
// own slices (config.h: SliceReads), for another's: the same words, so it tells nothing.
Status NoSuchSlice(const std::string& name);

// What a caller asks for. GPUs are named by UUID or NVML index ("0").
struct SliceRequest {
  std::string name;  // empty: "<user>-<n>"
  std::string user;
  int64_t owner_uid = -1;  // the owner's uid when known
  std::string project;  // empty: default project
  SliceClass slice_class = SliceClass::kGuaranteed;
  uint32_t protect_permille = 0;  // guaranteed only (Slice::protect_permille); 0: the default
  struct Gpu {
    std::string ref;
    uint64_t memory = 0;
    double compute = 0;  // 0: no compute guarantee, it shares what guaranteed work leaves
  };
  std::vector<Gpu> gpus;
  std::string origin = "api";
  std::string pod, pod_namespace;
  int64_t idle_timeout_s = 0;
  std::string remote_client;  // Slice::remote_client
  // The process that holds a registration of origin "run" (`gslice run`, which stays the
  // program's parent), pid 0 when not given. While it lives the registration does not
  // expire, even before the program's processes show in the ledger.
  PidIdentity holder;
};

// Shares of the node's slice table: the node ledger's entries, one per slice on the node (the
// API's, `gslice run`'s, pods'), so that no one user or project fills it and admins can always
// create and run. 0: no such limit.
struct SliceTableShares {
  int entries = kLedgerMaxSlices;  // the table's size (smaller in tests)
  int per_user = 0;                // slices one owner who is not an admin may hold
  int per_project = 0;             // slices a project other than the default one may hold
  int reserved_for_admins = 0;     // the table's last free entries, which only admins' slices take
};

// Whether one more slice, `candidate` (owner and project set), may take an entry of the table.
// Its owner is `admin` or not (Registry::CreateSlice says who is). Not an admin: refused when
// the owner would hold more than per_user, its project (unless `default_project`) more than
// per_project, or the table would have fewer than reserved_for_admins entries free. An admin's
// slice is refused only when the table is full. What holds entries now: `slices` (the
// registry's), `deleted_running` (deleted while their processes run on: their entries stay
// taken until those exit) and `other_entries` held by none of them. An owner holds the slices
// it may change as their owner (MayChange). The refusal (409, as a project's quota) says which
// limit, what the owner or project holds, and who may raise it.
Status AdmitToTable(const Slice& candidate, bool admin, const std::vector<Slice>& slices,
                    const std::vector<Slice>& deleted_running, int other_entries, const SliceTableShares& shares,
                    const std::string& default_project);

// What `gslice set` and PATCH /v1/slices/NAME change in a slice; what is not given stays.
struct SliceChange {
  // Memory limits: empty: unchanged; one size for every GPU of the slice, or one per GPU in
  // the slice's order.
  std::vector<uint64_t> memory;
  std::optional<double> compute_cap;    // 0..1 on every GPU; 0: no cap
  std::optional<double> compute_share;  // 0..1 on every GPU; 0: no guaranteed share
  std::optional<SliceClass> slice_class;
  std::optional<uint32_t> protect_permille;  // guaranteed slices only (ValidateProtect)
  std::optional<int64_t> idle_timeout_s;
  // A shrink below what the slice holds suspends it (its memory moves to the host) instead of
  // being refused; it stays suspended under the new limit until resumed.
  bool make_room = false;
};

// A changed slice, and what was done to make the change fit ("" when nothing was).
struct SliceUpdate {
  Slice slice;
  std::string note;
};

class Registry {
 public:
  struct Options {
    std::string default_project = "default";
    size_t history_samples = 600;
    // A registration of origin "run" or "adopted" expires when no process of it is left in
    // the ledger and its holder is gone, or unknown (after a restart) and the registration is
    // older than this: time for a program to reach the driver after `gslice run` registered it.
    int64_t registration_grace_s = 30;
    // Enforced by CreateSlice (AdmitToTable); gsliced sets them from its configuration.
    SliceTableShares shares;
    // Owners who are members of this group (their primary group, or by the group database) are
    // admins for `shares`, as root is; empty: root only. See CreateSlice.
    std::string admin_group = {};
  };
  // `pods` (may be null: not on Kubernetes) names the pod of each sampled process. `mps` (may
  // be null: every GPU time-sliced) runs the GPUs' MPS control daemons; the registry plans
  // which slices use them (mps_plan.h) and gives each GPU to its tenant.
  Registry(Options options, std::unique_ptr<Store> store, std::unique_ptr<GpuInventory> gpus,
           std::unique_ptr<NodeLedger> ledger, std::unique_ptr<Suspender> suspender,
           std::unique_ptr<PodResolver> pods = nullptr, std::unique_ptr<MpsService> mps = nullptr);

  // Loads the store, scans GPUs, and reconciles with the ledger: registrations whose
  // processes are gone expire (ExpireRegistrations), slices in both are re-adopted
  // untouched, slices only in the store are published again, and slices only in the ledger
  // (started by `gslice run` with no daemon) are adopted through admission (AdoptFromLedger).
  Status Start();

  // Samples GPUs and the ledger into the history, adopts slices new in the ledger and
  // expires registrations whose processes are gone, keeps the GPUs' MPS control daemons
  // running and gives each GPU's MPS to its tenant; the sampler thread calls it.
  void Sample();

  // Asks the GPUs' MPS control daemons to quit (gsliced stops).
  void StopMps();

  NodeSnapshot Snapshot();
  std::vector<HistorySample> HistorySince(int64_t since_ms);
  Result<SliceView> GetSlice(const std::string& name);

  // Every new slice the API makes (`gslice create`, a `gslice run` registration, a pod's claim)
  // passes here: its name, its project, its share of the slice table (Options::shares,
  // AdmitToTable) and admission (admission.h). The table's shares are not applied when the
  // caller is an admin (by_admin: the kernel or the token said so, never the request), nor
  // when the slice's owner is one: root, a member of Options::admin_group, or an owner without
  // a uid (the API gives every slice a non-admin creates its creator's uid; only admins make
  // others). Slices found in the ledger are adopted without this check (their processes
  // already run) but count.
  Result<Slice> CreateSlice(const SliceRequest& request, bool by_admin = false);
  // Each checks MayChange(slice, caller) under the registry's lock, so the slice checked is
  // the slice changed.
  Status DeleteSlice(const std::string& name, const Caller& caller = Caller::Daemon());
  Result<Slice> SuspendSlice(const std::string& name, const Caller& caller = Caller::Daemon());
  Result<Slice> ResumeSlice(const std::string& name, const Caller& caller = Caller::Daemon());
  // Changes a slice in place, admitted like a create against every other slice (GPU capacity,
  // the project's quotas), while its processes run: the store first, the ledger inside the same
  // transaction, so the processes see the new limits before the answer. Refusals: 404 no such
  // slice, 403 not the caller's (MayChange), 400 a malformed change, 409 while it is suspending or
  // resuming, an admission refusal, or (without make_room) a new limit below what the slice
  // holds on a GPU: nothing changes, and the message says what it holds. A suspended slice
  // (make_room suspends one) takes any limit that admission allows: what it restores on resume
  // counts against it, so it allocates nothing more until it is back under.
  Result<SliceUpdate> UpdateSlice(const std::string& name, const SliceChange& change,
                                  const Caller& caller = Caller::Daemon());

  // Records a timeline of the slice's processes for `seconds` (docs/trace.md): asks them
  // through the node ledger, waits, merges their parts and writes the trace whole to
  // `<trace_dir>/<name>.json` (mode 0640). Blocks for about `seconds`; one recording per slice
  // at a time. Refusals: 404 no such slice, 403 not the caller's (MayChange), 409 one is under
  // way, 503 no ledger the processes read. Returns the trace.
  struct TraceRecording {
    std::string trace;  // the merged trace (JSON)
    std::string path;   // where it was written
    int processes = 0;  // parts merged
    int64_t events = 0;
    int64_t dropped = 0;
  };
  Result<TraceRecording> RecordTrace(const std::string& name, int seconds, const std::string& trace_dir,
                                     const Caller& caller = Caller::Daemon());

  Result<Project> CreateProject(const Project& project);
  Result<Project> UpdateProject(const Project& project);
  Status DeleteProject(const std::string& name);
  Result<User> CreateUser(const std::string& name);

  Result<std::vector<Store::Event>> RecentEvents(int limit);

  const RegistryCounters& counters() const { return counters_; }

  // Changes whenever anything a snapshot shows may have changed (a write, a sample), so
  // callers may cache what they render from one.
  uint64_t generation() const { return generation_.load(); }

 private:
  Status ResolveGpus(const SliceRequest& request, Slice* slice);  // REQUIRES: mu_ held
  const Project* FindProject(const std::string& name) const;      // REQUIRES: mu_ held
  Slice* FindSlice(const std::string& name);                      // REQUIRES: mu_ held
  // The named slice, if the caller may change it (MayChange) and it is not suspending or
  // resuming: else NotFound, Forbidden or Conflict, the message ending in "then VERB it".
  // REQUIRES: mu_ held.
  Result<Slice*> SliceToChange(const std::string& name, const Caller& caller, const char* verb);
  Result<Slice> Transition(const std::string& name, bool suspend, const Caller& caller);
  // Takes slices found only in the ledger into the registry, each admitted like a create
  // (and GPUs an adopted slice takes later, likewise):
  // one that does not fit as guaranteed is adopted as opportunistic (its ledger class
  // changed too), so guaranteed commitments never exceed a GPU; one that does not fit even
  // so (a limit above the GPU, an unknown GPU) is adopted as opportunistic and flagged in
  // last_error. Each adoption is an "adopt" event saying which and why. Returns how many
  // were adopted. REQUIRES: mu_ held.
  int AdoptFromLedger(const std::vector<PublishedSlice>& in_ledger);
  // Admits a slice found in the ledger against `others` as AdoptFromLedger says, changing
  // its class and last_error as needed; returns what happened, for the event log.
  // REQUIRES: mu_ held.
  std::string AdmitFound(Slice* s, const std::vector<Slice>& others) const;
  // Stores a slice found in the ledger, with an event, and sets its class in the ledger when
  // it differs from `ledger_class`: all or nothing. REQUIRES: mu_ held.
  Status StoreFound(const Slice& s, SliceClass ledger_class, const std::string& event, const std::string& detail);
  // Removes registrations of origin "run" or "adopted" whose processes are gone (see
  // Options::registration_grace_s), each with an "expire" event. `processes`: the ledger's
  // live processes. Returns how many expired. REQUIRES: mu_ held.
  int ExpireRegistrations(const std::vector<ProcessUsage>& processes);
  // Removes `name` from the store and withdraws it from the ledger, in that order and all or
  // nothing: the ledger is changed only inside the database transaction and put back when
  // the commit fails. REQUIRES: mu_ held.
  Status RemoveSlice(const std::string& name, NodeLedger::Withdrawal how, const std::string& event,
                     const std::string& detail);
  // Entries of the ledger held by no slice of the registry, as the last sample saw them: deleted
  // slices' processes, the ledger's own, processes of a slice not adopted yet. REQUIRES: mu_ held.
  int OtherEntries() const;
  // The slices as the MPS plan sees them: every slice and every deleted one whose processes
  // run on, with the uid its processes run as (the ledger's owner of its usage, else its
  // owner's). REQUIRES: mu_ held.
  std::vector<MpsCandidate> MpsCandidates() const;
  // Gives each GPU's MPS to the tenant the plan names for it (mps_service.h: Hand), where that
  // uid has slices there that would use it; else closes it. Called without mu_ held (the
  // hand-over asks the control daemon), after every change of the slices and each sample.
  void ApplyMpsPlan();
  // Gives slices without pod labels those of their processes, when they all run in one
  // pod. REQUIRES: mu_ held.
  void LabelSlicesWithPods();
  // The changes that pods' annotations (gslice.io/memory, gslice.io/compute-cap,
  // gslice.io/class) ask of their slices, each acted on once per annotation value: a change
  // refused (or malformed) is logged with an event and tried again only when the annotation
  // changes. Sample applies them with UpdateSlice once the lock is dropped. REQUIRES: mu_ held.
  std::vector<std::pair<std::string, SliceChange>> ChangesFromPods();

  Options options_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<GpuInventory> inventory_;
  std::unique_ptr<NodeLedger> ledger_;
  std::unique_ptr<Suspender> suspender_;
  std::unique_ptr<PodResolver> pods_;
  std::unique_ptr<MpsService> mps_;

  std::mutex mu_;
  std::set<std::string> tracing_;  // slices being recorded (RecordTrace); REQUIRES: mu_ held
  std::vector<GpuInfo> gpus_;
  std::vector<Slice> slices_;
  std::vector<Project> projects_;
  std::vector<User> users_;
  std::vector<ProcessUsage> processes_;  // as of the last sample
  std::map<std::string, bool> throttled_;
  std::map<std::string, int64_t> ledger_owners_;  // by slice: PublishedSlice::owner_uid, as last sampled
  std::map<std::string, PidIdentity> holders_;  // by slice; see SliceRequest::holder
  // Slices deleted while their processes ran on: their ledger entries stay taken until those
  // processes exit (the next sample that shows none drops them), and count for their owner and
  // project meanwhile (AdmitToTable).
  std::vector<Slice> deleted_running_;
  std::map<std::string, std::string> pod_asked_;  // by slice: the annotations last acted on
  PidResolver holder_pids_;                      // REQUIRES: mu_ held
  std::map<std::string, double> compute_used_;  // by slice, 0..1 per GPU summed
  // Busy time by (pid, GPU) at recent samples, oldest first, back to one a second old.
  std::deque<std::pair<int64_t, std::map<std::pair<int, std::string>, uint64_t>>> busy_history_;
  History history_;
  RegistryCounters counters_;
  std::atomic<uint64_t> generation_{1};
};

}  // namespace gslice
