// What the daemon knows about: GPUs, projects, users and slices, and how they look in the
// API's JSON. One definition of each record, shared by the store, the admission logic,
// the API, the metrics and the CLI.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gslice/ledger.h"
#include "gslice/slice_class.h"
#include "status.h"

namespace gslice {

// A GPU as NVML reports it. `uuid` ("GPU-…") is the identity; `index` is NVML's order.
struct GpuInfo {
  unsigned index = 0;
  std::string uuid;
  std::string name;
  uint64_t memory_total = 0;  // bytes
  uint64_t memory_used = 0;   // bytes, whole device, every process
  double utilization = -1;    // 0..1, -1 when the driver does not say
  int compute_mode = -1;      // NVML's nvmlComputeMode_t; -1 when the driver does not say
};

// SliceClass (guaranteed, opportunistic), its names and its parser: gslice/slice_class.h.

// Lifecycle of a slice. Transitions (see slice_state.h): running -> suspending ->
// suspended -> resuming -> running; suspending/resuming -> failed on a mechanism error;
// failed -> running when the processes are known to run on.
enum class SliceState { kRunning, kSuspending, kSuspended, kResuming, kFailed };

std::string_view ToString(SliceState s);
bool ParseSliceState(std::string_view text, SliceState* out);

// A slice's share of one GPU.
struct SliceGpu {
  std::string uuid;
  uint64_t memory_limit = 0;  // bytes
  double compute_share = 0;   // 0..1 of the GPU's compute; 0: no compute guarantee
  double compute_cap = 0;     // 0..1: at most this much of the GPU's time, even when alone
                              // (`gslice run --cap`); 0: no cap
};

// The largest uid a slice's owner may have (uid_t is 32 bits; (uid_t)-1 means "none").
inline constexpr int64_t kMaxUid = 0xfffffffe;
// The largest size any field takes: 1 EiB, well inside SQLite's signed 64-bit integers.
inline constexpr uint64_t kMaxSizeBytes = 1ull << 60;
// The longest idle timeout: 366 days, far from where seconds overflow as nanoseconds.
inline constexpr int64_t kMaxIdleTimeoutS = 366 * 86400;
// A project's compute quota, in GPUs, and the range of its priority.
inline constexpr double kMaxComputeQuotaGpus = 4096;
inline constexpr int64_t kMaxProjectPriority = 1000000;
// The longest trace a request records (POST /v1/slices/NAME/trace), in seconds.
inline constexpr int64_t kMaxTraceSeconds = 300;
// A guaranteed slice's protection level as the API writes it: a fraction of its solo speed.
// The ledger (ledger.h, where the shims read it) keeps it in thousandths and defines it.
inline constexpr double kMinProtect = kProtectMinPermille / 1000.0;
inline constexpr double kMaxProtect = kProtectMaxPermille / 1000.0;
inline constexpr double kDefaultProtect = kProtectDefaultPermille / 1000.0;

struct Slice {
  std::string name;  // identity; see ValidateName
  std::string user;  // the owner's name
  // The owner's uid, as the kernel named the caller that created the slice; -1 when not
  // known (created over TCP with the token, adopted from the ledger, or stored before
  // owners were recorded): then only the user name and admins decide who may change it.
  int64_t owner_uid = -1;
  std::string project;
  SliceClass slice_class = SliceClass::kGuaranteed;
  // Guaranteed: the fraction of its solo speed, in thousandths, that opportunistic work on its
  // GPUs must leave it (ledger.h); 0: the default. Opportunistic slices have none (ignored).
  uint32_t protect_permille = 0;
  SliceState state = SliceState::kRunning;
  std::vector<SliceGpu> gpus;
  std::string origin;  // "api", "run" (gslice run) or "adopted" (found in the ledger)
  std::string pod;     // Kubernetes labels when known
  std::string pod_namespace;
  int64_t idle_timeout_s = 0;  // 0: never reclaimed when idle
  // A remote slice's client (the slice of a gslice-remoted worker): its host and peer as the
  // server saw them; empty for a local slice.
  std::string remote_client;
  int64_t created_at = 0;      // unix seconds
  std::string last_error;      // why the last state change failed, if it did
};

struct Project {
  std::string name;
  uint64_t memory_quota = 0;  // bytes of guaranteed memory over all GPUs; 0: unlimited
  double compute_quota = 0;   // sum of guaranteed compute shares (1.0 = one GPU); 0: unlimited
  int priority = 0;           // higher wins when opportunistic work must yield
  int64_t created_at = 0;
};

struct User {
  std::string name;
  int64_t created_at = 0;
};

// A process using a slice, as the node ledger reports it.
struct ProcessUsage {
  int pid = 0;
  std::string slice;
  std::string gpu_uuid;
  uint64_t memory_used = 0;  // bytes
  uint64_t busy_ns = 0;      // GPU time its launches have used (0 when not gated); may jump
                             // forward when its gate catches up with others' virtual time
  bool active = false;       // wants the GPU now (its launch gate says so)
  // The Kubernetes pod the process runs in, when gsliced can name it (PodResolver).
  // Default member initializers let the ledger's readers leave them out.
  std::string pod = {};
  std::string pod_namespace = {};
  std::string container = {};
};

// A protection level asked for a slice of class cls (permille as the ledger stores it): a
// level outside kProtectMinPermille..kProtectMaxPermille, or one for an opportunistic slice,
// is a bad request that says what to do instead.
Status ValidateProtect(SliceClass cls, uint32_t permille);
// A level in thousandths as people write it: 900 -> "0.9", 975 -> "0.975", 1000 -> "1".
std::string FormatProtect(uint32_t permille);

// Names of slices, users and projects: 1-63 characters of [a-z0-9._-] starting with a letter
// or digit; a name never contains '/', so it is safe in a URL path and a file name.
Status ValidateName(std::string_view what, std::string_view name);

}  // namespace gslice
