// The node ledger: one shared-memory file per node (GSLICE_LEDGER, default
// /dev/shm/gslice-ledger) holding every slice's limits and every process's device-memory
// usage. The shim (inside applications), the CLI and the daemon all map it; this header is
// the ONE definition of its layout (docs/ledger.md explains it).
//
// Invariants that make it safe against processes killed at any instruction:
//  - No lock on the hot path. A charge is fetch_add on the process's own counter followed by
//    a sum over the slice's counters (Dekker-style, seq_cst): two racing chargers can never
//    both push the slice over its limit. A release is fetch_sub on the own counter.
//  - Usage lives only in per-process counters, never in a shared total, so a dead process
//    leaves nothing to repair: reaping zeroes its counters and frees its slot.
//  - The only lock (slice creation, rare) records its holder's pid and is stolen when the
//    holder is dead or has held it for longer than kCreateLockStealNs. (Initialising the
//    file uses its flock, which the kernel drops when the holder dies.)
//  - State words pack (state, pid) into one 64-bit atomic so that a slot is never ALIVE
//    without an owner pid.
//  - Liveness works across pid namespaces (containers): every owner-bearing entry (process
//    slots, compute entries, the create lock) has a lock byte in the ledger FILE, past the
//    mapped layout (LedgerLockByte), on which its owner holds an open-file-description lock
//    (F_OFD_SETLK) while it owns the entry. The kernel drops it when the owner dies, in any
//    namespace. An owner is alive iff its byte is locked AND, when the judge shares its pid
//    namespace (recorded next to the pid), its pid is alive with the recorded start time.
//    Locks are taken and dropped only on attach/claim/detach and read only when reaping.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gslice {

inline constexpr uint32_t kLedgerMagic = 0x4c534c47;  // "GLSL" little-endian: 'G' 'L' 'S' 'L'
inline constexpr uint32_t kLedgerVersion = 3;  // 2: compute table in the header;
                                               // 3: owners' pid namespaces, lock bytes
inline constexpr int kLedgerMaxGpus = 16;      // GPUs per slice (keyed by UUID)
inline constexpr int kLedgerMaxSlices = 64;    // slices per node
inline constexpr int kLedgerMaxSlots = 128;    // processes per slice
inline constexpr int kLedgerNameSize = 64;     // slice name, NUL-terminated
inline constexpr int64_t kCreateLockStealNs = 2'000'000'000;
inline constexpr int64_t kReapIntervalNs = 250'000'000;  // periodic reaping, per slice
// A claim (CLAIMING slot, create lock) whose lock byte is not held yet counts as live for this
// long: the claimer takes the byte right after winning the entry's CAS.
inline constexpr int64_t kClaimGraceNs = 1'000'000'000;

// Slot / entry states (low 8 bits of a state word; the pid is in bits 32..63; process slots
// carry a random claim tag in bits 8..31 so that a CAS on a word read earlier fails once the
// slot went to another owner with the same pid — pid 1 is common in containers).
enum class EntryState : uint32_t {
  kFree = 0,
  kClaiming = 1,  // being filled in by pid; readers skip it
  kReady = 2,     // slice or GPU entry in use
  kAlive = 3,     // process slot owned by a live pid
  kReaping = 4,   // process slot being zeroed by pid (a reaper)
};

inline constexpr uint64_t PackState(EntryState s, uint32_t pid) {
  return (static_cast<uint64_t>(pid) << 32) | static_cast<uint64_t>(s);
}
inline constexpr EntryState StateOf(uint64_t word) { return static_cast<EntryState>(word & 0xff); }
inline constexpr uint32_t PidOf(uint64_t word) { return static_cast<uint32_t>(word >> 32); }
inline constexpr uint64_t PackState(EntryState s, uint32_t pid, uint32_t tag) {
  return PackState(s, pid) | (static_cast<uint64_t>(tag & 0xffffffu) << 8);
}

enum class SliceClass : uint32_t { kGuaranteed = 0, kOpportunistic = 1 };

// Slice flags.
inline constexpr uint32_t kSliceEphemeral = 1u;  // recyclable once no process of it is alive

struct LedgerGpu {
  std::atomic<uint64_t> state;  // kFree / kClaiming|pid / kReady
  uint8_t uuid[16];             // CUuuid bytes
  std::atomic<int64_t> limit;   // bytes; <0: unlimited
  uint8_t reserved[32];
};

struct LedgerProcess {
  std::atomic<uint64_t> state;       // kFree / kClaiming|pid / kAlive|pid / kReaping|reaper pid
  std::atomic<uint64_t> start_time;  // /proc/<pid>/stat field 22; 0 while attaching
  std::atomic<uint64_t> pid_ns;      // inode of the owner's /proc/self/ns/pid (0: unknown)
  std::atomic<int64_t> claimed_ns;   // MonotonicNs of the claim (kClaimGraceNs)
};

struct LedgerSlice {
  std::atomic<uint64_t> state;       // kFree / kClaiming|pid / kReady
  std::atomic<uint64_t> generation;  // bumped whenever the entry is recycled
  char name[kLedgerNameSize];
  uint32_t slice_class;  // SliceClass
  uint32_t flags;        // kSlice*
  std::atomic<uint32_t> slot_high_water;  // slots [0, high_water) may be in use
  uint32_t reserved0;
  std::atomic<int64_t> last_reap_ns;  // CLOCK_MONOTONIC of the last periodic reap pass
  // The compute cap's GCRA state per slice GPU (interpose/compute: the theoretical arrival
  // time, MonotonicNs), shared by the slice's processes so that a cap holds for the slice.
  std::atomic<int64_t> cap_tat[kLedgerMaxGpus];
  uint8_t reserved[192 - 8 * kLedgerMaxGpus];
  LedgerGpu gpus[kLedgerMaxGpus];
  LedgerProcess slots[kLedgerMaxSlots];
  // used[g][s]: bytes process slot s holds on slice GPU g. Laid out per GPU so that the
  // sum a charge needs is one contiguous run of loads.
  std::atomic<int64_t> used[kLedgerMaxGpus][kLedgerMaxSlots];
};

// One gated process on one GPU (interpose/compute, docs/compute.md): what the launch gates
// of other processes on that GPU read to share it. Written only by its owner (atomics);
// a dead owner's entry only ever expires (its *_until_ns times pass) and is freed once
// Ledger::ComputeOwnerAlive says its owner is gone.
inline constexpr int kLedgerMaxComputeEntries = 48;
struct LedgerComputeEntry {
  std::atomic<uint64_t> state;             // kFree / kClaiming|pid / kAlive|pid
  std::atomic<uint64_t> pid_ns;            // the owner's pid namespace (see LedgerProcess)
  std::atomic<uint64_t> start_time;        // the owner's start time
  uint8_t uuid[16];                        // the GPU
  std::atomic<uint32_t> slice_class;       // SliceClass
  std::atomic<uint32_t> share_permille;    // share weight (kComputeShareMask) and flags
  std::atomic<int64_t> active_until_ns;    // wants the GPU until then (MonotonicNs)
  std::atomic<int64_t> inflight_until_ns;  // has work queued on the GPU until then
  std::atomic<int64_t> vtime_ns;           // measured busy time / share (share scheduler)
  std::atomic<uint64_t> launches;          // launches issued: with inflight_until_ns, a
                                           // guaranteed job's speed while busy, for the
                                           // opportunistic rate controller
};
static_assert(sizeof(LedgerComputeEntry) == 80);
inline constexpr uint32_t kComputeShareMask = 0xffffu;        // share_permille: the weight, 1..1000
inline constexpr uint32_t kComputeShareSet = 0x80000000u;      // the share was given explicitly
inline constexpr uint32_t kComputeShareRunning = 0x40000000u;  // holds the share turn
inline constexpr uint32_t kComputeTakesTurns = 0x20000000u;    // takes exclusive turns with peers

struct LedgerHeader {
  uint32_t magic;
  uint32_t version;
  uint64_t size;                       // sizeof(LedgerLayout)
  std::atomic<uint32_t> initialised;   // 1 once the creator finished writing
  uint32_t max_gpus, max_slices, max_slots;
  std::atomic<uint64_t> create_lock;   // 0, or holder pid
  std::atomic<int64_t> create_lock_ns; // CLOCK_MONOTONIC when taken
  std::atomic<uint64_t> create_lock_pid_ns;  // the holder's pid namespace
  LedgerComputeEntry compute[kLedgerMaxComputeEntries];
  // compute_cap_slice[e]: 1 + the index of the slice whose cap compute entry e charges
  // (LedgerSlice::cap_tat), 0 for none. Written by the entry's owner; processes of one capped
  // slice take exclusive turns on a GPU (docs/compute.md).
  std::atomic<uint32_t> compute_cap_slice[kLedgerMaxComputeEntries];
  uint8_t reserved[4096 - 56 - (sizeof(LedgerComputeEntry) + 4) * kLedgerMaxComputeEntries];
};
static_assert(sizeof(LedgerHeader) == 4096);

struct LedgerLayout {
  LedgerHeader header;
  LedgerSlice slices[kLedgerMaxSlices];
};

// The liveness lock bytes: file offsets past the mapped layout (fcntl locks need no data
// there). One byte for the create lock, one per compute entry, one per process slot.
inline constexpr int64_t kLedgerLockBase = static_cast<int64_t>(sizeof(LedgerLayout));
inline constexpr int64_t kLedgerCreateLockByte = kLedgerLockBase;
inline constexpr int64_t LedgerComputeLockByte(int entry) { return kLedgerLockBase + 64 + entry; }
inline constexpr int64_t LedgerSlotLockByte(int slice, int slot) {
  return kLedgerLockBase + 128 + static_cast<int64_t>(slice) * kLedgerMaxSlots + slot;
}
static_assert(kLedgerMaxComputeEntries <= 64);

static_assert(std::atomic<int64_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

enum class LedgerError {
  kOk = 0,
  kOpenFailed,        // open/ftruncate/mmap failed (errno in detail)
  kIncompatible,      // wrong magic, version or size
  kInitTimeout,       // another process held the initialisation lock for too long
  kNoSliceEntry,      // all kLedgerMaxSlices entries are in use
  kNoGpuEntry,        // the slice already has kLedgerMaxGpus GPUs
  kNoProcessSlot,     // all kLedgerMaxSlots slots of the slice are in use
  kBadArgument,
};
const char* LedgerErrorString(LedgerError e);

enum class ChargeResult { kOk = 0, kOverLimit };

// A process's handle on one slice: which slice entry, which process slot.
struct SliceHandle {
  int slice = -1;
  int slot = -1;
  uint64_t generation = 0;
  uint64_t word = 0;  // the slot's state word while this handle owns it (claim tag included)
  bool valid() const { return slice >= 0 && slot >= 0; }
};

// The mapping. Cheap to copy? No: owns the mapping; move-only.
class Ledger {
 public:
  Ledger() = default;
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;
  Ledger(Ledger&& o) noexcept;
  Ledger& operator=(Ledger&& o) noexcept;

  // Maps the ledger at path, creating it (mode 0666) when missing. Initialisation happens
  // under the file's exclusive flock and is idempotent, so a creator killed half-way is
  // finished by the next opener; init_timeout_ms bounds the wait for that lock. The file stays
  // open (O_CLOEXEC) for the liveness locks: entries this Ledger owns look dead to everyone
  // once it is destroyed.
  LedgerError Open(const char* path, int init_timeout_ms = 2000);
  // A private, process-local ledger (anonymous mapping): used when the node ledger cannot be
  // opened, so limits still hold within the process. Liveness there is judged by pid alone.
  LedgerError OpenPrivate();
  bool is_open() const { return layout_ != nullptr; }
  LedgerLayout* layout() const { return layout_; }

  // Finds the READY slice named name or creates it (class, flags). Returns its index.
  LedgerError FindOrCreateSlice(const char* name, SliceClass cls, uint32_t flags, int* slice);
  // Finds the READY slice named name; -1 when there is none.
  int FindSlice(const char* name) const;

  // Finds or adds the slice's entry for the GPU with this UUID. limit is set when the entry
  // is added (bytes, <0 unlimited); an existing entry keeps its limit.
  LedgerError FindOrAddGpu(int slice, const uint8_t uuid[16], int64_t limit, int* gpu);
  int FindGpu(int slice, const uint8_t uuid[16]) const;

  // Takes a free process slot in slice for (pid, start_time): one CAS, then the slot's lock
  // byte (one fcntl). pid is taken to be in the caller's pid namespace, and the caller holds
  // the slot's liveness lock, so pass the caller's own pid (tests pass others to model
  // processes that share the caller's lock but not its pid).
  LedgerError Attach(int slice, uint32_t pid, uint64_t start_time, SliceHandle* out);
  // Releases everything the slot holds, drops its lock and frees it.
  void Detach(const SliceHandle& h);
  // Attach = FindOrCreateSlice + Attach, retried if the slice is recycled under us.
  LedgerError AttachByName(const char* name, SliceClass cls, uint32_t flags, uint32_t pid,
                           uint64_t start_time, SliceHandle* out);

  // Adds bytes to the slot's usage on slice GPU gpu if the slice stays within its limit.
  // Refusals reap dead processes and retry a few times (a racing charger's transient add
  // can cause a spurious refusal right at the limit).
  ChargeResult Charge(const SliceHandle& h, int gpu, int64_t bytes);
  // Adds bytes without checking the limit (memory the driver already handed out).
  void ForceCharge(const SliceHandle& h, int gpu, int64_t bytes);
  // Gives bytes back. O(1).
  void Release(const SliceHandle& h, int gpu, int64_t bytes);

  int64_t SliceUsage(int slice, int gpu) const;
  int64_t SlotUsage(const SliceHandle& h, int gpu) const;
  int64_t Limit(int slice, int gpu) const;
  void SetLimit(int slice, int gpu, int64_t limit);

  // Frees the slots of dead processes in slice (SlotOwnerAlive false). Returns how many were
  // reaped.
  int Reap(int slice);
  // Reap(slice) if the last pass was more than kReapIntervalNs ago (one process does it).
  void MaybeReap(int slice);
  // Number of ALIVE slots whose owner is alive.
  int AliveCount(int slice) const;

  // Liveness of the owner of a process slot (CLAIMING, ALIVE or REAPING): its lock byte is
  // held (a CLAIMING slot: or its claim is younger than kClaimGraceNs) and, when the owner is
  // in the caller's pid namespace, its pid is alive with the recorded start time. A FREE slot
  // has no owner: false.
  bool SlotOwnerAlive(int slice, int slot) const;

  // Compute entries (header.compute, written by interpose/compute). The claimer wins the
  // entry's CAS (FREE -> CLAIMING|pid) and then calls AcquireComputeEntry, which records its
  // pid namespace and start time and takes the entry's lock byte; false: the byte is still
  // held by another open file (a forked child of a dead earlier owner): put the entry back to
  // FREE and take another. Publish ALIVE only after it returned true.
  bool AcquireComputeEntry(int entry);
  // Drops the entry's lock byte. Call it before storing FREE (a same-file claimer of the entry
  // must never lose the byte to a late unlock).
  void ReleaseComputeEntry(int entry);
  // Liveness of an ALIVE compute entry's owner, as SlotOwnerAlive.
  bool ComputeOwnerAlive(int entry) const;

  // True when liveness is judged by lock bytes (a node ledger), false for a private one.
  bool uses_lock_bytes() const { return fd_ >= 0; }

 private:
  bool LockCreate(bool* byte_held);
  void UnlockCreate(bool byte_held);
  bool RecycleIfIdle(int slice);
  void Close();
  bool LockByte(int64_t offset);
  void UnlockByte(int64_t offset);
  bool ByteLocked(int64_t offset) const;
  bool OwnerAlive(int64_t lock_byte, uint32_t pid, uint64_t pid_ns, uint64_t start_time, uint64_t self_ns) const;
  bool SlotOwnerAlive(int slice, int slot, uint64_t word, uint64_t self_ns) const;

  LedgerLayout* layout_ = nullptr;
  size_t map_size_ = 0;
  int fd_ = -1;        // holds this process's lock bytes (open file description locks)
  int probe_fd_ = -1;  // a second open file: F_OFD_GETLK through it sees fd_'s locks too
};

// Process liveness by pid in the caller's pid namespace: /proc/<pid>/stat exists, is not a
// zombie, and (when expected_start_time != 0) its start time matches. Entries of a shared
// ledger are judged with Ledger::SlotOwnerAlive / ComputeOwnerAlive, which also work across
// namespaces.
bool ProcessAlive(uint32_t pid, uint64_t expected_start_time);
// Field 22 of /proc/<pid>/stat (clock ticks since boot), 0 on error.
uint64_t ProcessStartTime(uint32_t pid);
int64_t MonotonicNs();

}  // namespace gslice
