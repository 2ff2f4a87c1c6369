// The simulated node: devices, per-process usage, device scheduling and checkpoint
// mailboxes, kept in one shared-memory file so that every process on the node (the
// simulated libcuda, the simulated NVML, test programs) sees the same GPUs.
//
// Robustness contract: no process can leave the node unusable by dying. The one lock
// (NodeLock) is a robust process-shared mutex held only for short bookkeeping; a holder
// that dies hands it over with EOWNERDEAD and the data it guards is written so that every
// single store leaves it consistent. Usage is kept per process slot and summed on demand,
// so reaping a dead process is just freeing its slot.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "gslice/clock.h"

namespace gslice::sim {

inline constexpr uint32_t kMaxDevices = 16;
inline constexpr uint32_t kMaxProcesses = 256;
inline constexpr uint32_t kMaxWaiters = 64;
inline constexpr uint32_t kUtilBuckets = 10;
inline constexpr uint64_t kUtilBucketNs = 100'000'000;  // 10 x 100 ms = the ~1 s window
inline constexpr uint32_t kMaxGpuPairs = 16;
inline constexpr uint64_t kLayoutMagic = 0x676c696365534d31ull;  // "gliceSM1"
inline constexpr uint32_t kLayoutVersion = 4;
inline constexpr uint32_t kNoMps = 0xffffffffu;  // NodeState::mps_interference_pct: time-slicing

// Node configuration, read from the environment by the process that creates the file.
struct Config {
  uint32_t device_count = 2;
  uint64_t memory[kMaxDevices] = {};
  uint32_t sm_count = 132;
  std::string name = "gslice simulated GPU";
  uint8_t uuids[kMaxDevices][16] = {};
  uint32_t timeslice_us = 2000;
  // GSLICE_SIM_MPS: the node behaves as if an MPS server ran on every device. Contexts of
  // different processes then run kernels at the same time instead of taking turns, and
  // each one running slows the others' kernels by this many percent (shared SMs, memory
  // bandwidth and caches, modelled as one number). kNoMps: no MPS, time-slicing.
  uint32_t mps_interference_pct = kNoMps;
};

// Reads GSLICE_SIM_DEVICES, _MEMORY, _SMS, _NAME, _UUIDS, _TIMESLICE_US, _MPS. On bad input
// returns false and a message naming the variable and what is wrong.
bool ReadConfigFromEnv(Config* config, std::string* error);

// Formats 16 UUID bytes as the driver prints them: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
std::string FormatGpuUuid(const uint8_t uuid[16]);
// Parses a full "GPU-..." UUID. Returns false for anything else.
bool ParseGpuUuid(const std::string& text, uint8_t uuid[16]);

// Path of the state file: GSLICE_SIM_STATE, else /dev/shm/gslice-sim-<uid>.
std::string StatePath();

// Identity of a process that survives pid reuse: pid plus its start time.
struct ProcessId {
  int32_t pid = 0;
  uint64_t start_time = 0;  // field 22 of /proc/<pid>/stat
};
// Reads /proc/<pid>/stat; false when the process is gone or a zombie.
bool ReadProcessId(int32_t pid, ProcessId* out);
bool ProcessAlive(const ProcessId& id);

enum class Checkpoint : uint32_t {
  // Mirrors CUprocessState (cuda.h) without depending on it.
  kRunning = 0,
  kLocked = 1,
  kCheckpointed = 2,
  kFailed = 3,
};

enum class MailboxOp : uint32_t { kNone = 0, kLock, kCheckpoint, kRestore, kUnlock };

struct MailboxRequest {
  MailboxOp op;
  uint32_t timeout_ms;
  uint32_t gpu_pair_count;
  uint32_t fail;  // the requester asked for an injected failure (GSLICE_SIM_FAIL_*)
  uint8_t gpu_pairs[kMaxGpuPairs][2][16];  // old uuid, new uuid
};

struct DeviceRecord {
  char name[96];
  char uuid_text[48];
  uint8_t uuid[16];
  uint64_t total_memory;
  uint32_t sm_count;
  uint32_t pci_bus;

  // Scheduler (guarded by the node lock except the atomics read on the hot path).
  std::atomic<uint32_t> sched_word;  // futex word: bumped whenever the holder changes
  std::atomic<uint32_t> waiter_count;
  uint64_t holder;  // context code, 0 = idle
  uint64_t holder_since_ns;
  uint64_t next_ticket;
  uint64_t waiter_code[kMaxWaiters];
  uint64_t waiter_ticket[kMaxWaiters];
  uint64_t released_at_ns;

  // Busy time: total and a ring of 100 ms buckets for utilisation.
  std::atomic<uint64_t> busy_ns_total;
  std::atomic<uint64_t> bucket_epoch[kUtilBuckets];
  std::atomic<uint64_t> bucket_busy_ns[kUtilBuckets];
};

enum class SlotState : uint32_t { kFree = 0, kLive = 1 };

struct ProcessSlot {
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> generation;
  int32_t pid;
  uint64_t start_time;
  std::atomic<uint64_t> used[kMaxDevices];      // device bytes charged (node lock for writes)
  std::atomic<uint32_t> contexts[kMaxDevices];  // contexts this process holds per device
  std::atomic<uint64_t> busy_ns[kMaxDevices];   // kernel time run per device
  // Under MPS: until when this process runs a kernel chunk on each device (a time, so a
  // process that dies mid-chunk stops counting by itself).
  std::atomic<uint64_t> mps_running_until_ns[kMaxDevices];

  // Checkpoint mailbox, serviced by a thread of the owning process.
  std::atomic<uint32_t> process_state;  // Checkpoint
  std::atomic<int32_t> service_tid;
  std::atomic<uint32_t> request_seq;   // futex word the service thread waits on
  std::atomic<uint32_t> response_seq;  // futex word requesters wait on
  std::atomic<int64_t> mailbox_owner;  // requester pid holding the mailbox, 0 = free
  MailboxRequest request;
  std::atomic<int32_t> response;  // a CUresult
};

struct NodeState {
  uint64_t magic;
  uint32_t layout_version;
  std::atomic<uint32_t> ready;
  pthread_mutex_t lock;
  uint32_t device_count;
  uint32_t timeslice_us;
  uint32_t mps_interference_pct;  // Config::mps_interference_pct
  DeviceRecord devices[kMaxDevices];
  ProcessSlot slots[kMaxProcesses];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// One process's mapping of the node.
class Node {
 public:
  Node() = default;
  // Maps the state file, creating and initialising it from the environment when it does not
  // exist (or when a creator died half-way). Returns false with a message on failure.
  // The mapping lives as long as the process.
  static bool Open(Node* out, std::string* error);

  NodeState& state() { return *state_; }
  uint32_t device_count() const { return state_->device_count; }
  const DeviceRecord& device(uint32_t i) const { return state_->devices[i]; }
  DeviceRecord& device(uint32_t i) { return state_->devices[i]; }

  // Claims a slot for the calling process (idempotent per pid). -1 when the node is full.
  int ClaimSlot();
  ProcessSlot& slot(int i) { return state_->slots[i]; }
  // Slot of a live process, or -1.
  int FindSlot(int32_t pid);
  void ReleaseSlot(int i);

  // Frees the slots of processes that are gone. Returns how many.
  int Reap();

  // Charges bytes to slot on device if the device has room (reaping dead processes
  // before giving up). False: out of memory, nothing charged.
  bool Charge(int slot, uint32_t dev, uint64_t bytes);
  // Charges several devices at once, all or nothing.
  bool ChargeAll(int slot, const uint64_t bytes[kMaxDevices]);
  void Uncharge(int slot, uint32_t dev, uint64_t bytes);
  // Bytes used on dev by all live processes (reaps first).
  uint64_t Used(uint32_t dev);

  // Device scheduling: a device runs one context at a time. code identifies the context
  // node-wide (MakeContextCode). Acquire blocks until the context holds the device;
  // waiting contexts are served in arrival order. A holder that died, or that held the
  // device far past its slice while others waited, loses it.
  uint64_t MakeContextCode(int slot, uint32_t context_serial) const;
  void AcquireDevice(uint32_t dev, uint64_t code);
  // True when the device still belongs to code (it may have been taken from a stalled
  // holder); renews the holder's lease. Holders call it at every slice boundary.
  bool KeepDevice(uint32_t dev, uint64_t code);
  void ReleaseDevice(uint32_t dev, uint64_t code);
  bool OthersWaiting(uint32_t dev) const {
    return state_->devices[dev].waiter_count.load(std::memory_order_acquire) > 0;
  }
  void AddBusy(int slot, uint32_t dev, uint64_t ns);
  // Under MPS: how many other processes run a kernel chunk on dev now.
  uint32_t MpsOthersRunning(int slot, uint32_t dev, uint64_t now) const;
  // Busy fraction (0..1) of dev over the last ~1 s.
  double Utilization(uint32_t dev);

  uint32_t timeslice_us() const { return state_->timeslice_us; }
  bool mps() const { return state_->mps_interference_pct != kNoMps; }
  uint32_t mps_interference_pct() const { return state_->mps_interference_pct; }

 private:
  friend class NodeLock;
  bool SlotAlive(int i);
  int ReapLocked();
  uint64_t UsedLocked(uint32_t dev);

  NodeState* state_ = nullptr;
};

// Scoped holder of the node's robust mutex.
class NodeLock {
 public:
  explicit NodeLock(Node* node);
  ~NodeLock();
  NodeLock(const NodeLock&) = delete;
  NodeLock& operator=(const NodeLock&) = delete;

 private:
  pthread_mutex_t* mutex_;
};

// Futex on a 32-bit word in shared memory (not private: works across processes).
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, uint64_t timeout_ns);
void FutexWakeAll(std::atomic<uint32_t>* word);

}  // namespace gslice::sim
