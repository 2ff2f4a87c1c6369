// The node ledger: one DIRECTORY per node (GSLICE_LEDGER, default /dev/shm/gslice) in which
// the kernel's file permissions decide who may write what (docs/ledger.md):
//
//   <dir>/            owned by its writer (root for the node; a user for a daemon-less
//                     per-user ledger), mode 0755
//   <dir>/limits      LedgerLimits: every slice's name, generation, class, flags, owner and
//                     per-GPU limits. Owned by the writer, 0644; everyone else maps it
//                     PROT_READ. Only the writer creates slices and sets limits.
//   <dir>/slice-<i>   LedgerUsage of slice entry i: its process slots, usage counters, cap
//                     state and its processes' compute entries, plus the liveness lock
//                     bytes. Created by the writer with O_EXCL for each generation of the
//                     entry, owned by the slice's owner uid, 0644: writable only by the
//                     slice's processes (and root), readable by the gates of other slices.
//   <dir>/lock        the writer's flock (0600): slice creation and recycling.
//
// The shim (inside applications), the CLI, the daemon and the device plugin all map it; this
// header is the ONE definition of its layout.
//
// Invariants that make it safe against processes killed at any instruction:
//  - No lock on the hot path. A charge is fetch_add on the process's own counter followed by
//    a sum over the slice's counters (Dekker-style, seq_cst): two racing chargers can never
//    both push the slice over its limit. A release is fetch_sub on the own counter.
//  - Usage lives only in per-process counters, never in a shared total, so a dead process
//    leaves nothing to repair: reaping zeroes its counters and frees its slot.
//  - The only lock (the writer's, rare) is a flock the kernel drops when its holder dies.
//  - State words pack (state, pid) into one 64-bit atomic so that a slot is never ALIVE
//    without an owner pid.
//  - Liveness works across pid namespaces (containers): every owner-bearing entry (process
//    slots, compute entries) has a lock byte in its slice's usage FILE, past the mapped
//    layout, on which its owner holds an open-file-description lock (F_OFD_SETLK) while it
//    owns the entry. The kernel drops it when the owner dies, in any namespace. An owner is
//    alive iff its byte is locked AND, when the judge shares its pid namespace (recorded next
//    to the pid), its pid is alive with the recorded start time. Locks are taken and dropped
//    only on attach/claim/detach and read only when reaping.
//  - Nothing is opened through a symlink (O_NOFOLLOW, openat on the directory), created
//    other than with O_EXCL, or trusted when another user owns it or may write it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "gslice/slice_class.h"

namespace gslice {

inline constexpr uint32_t kLedgerMagic = 0x4c534c47;       // "GLSL" little-endian: the limits file
inline constexpr uint32_t kLedgerUsageMagic = 0x55534c47;  // "GLSU": a slice's usage file
inline constexpr uint32_t kLedgerVersion = 4;  // 2: compute table in the header;
                                               // 3: owners' pid namespaces, lock bytes;
                                               // 4: a directory: limits + one usage file per slice
inline constexpr int kLedgerMaxGpus = 16;      // GPUs per slice (keyed by UUID)
inline constexpr int kLedgerMaxSlices = 64;    // slices per node
inline constexpr int kLedgerMaxSlots = 128;    // processes per slice
inline constexpr int kLedgerNameSize = 64;     // slice name, NUL-terminated
inline constexpr int kLedgerSliceComputeEntries = 32;  // gated (process, GPU) pairs per slice
// The slice whose compute entries processes outside any slice use (never recycled; a name the
// daemon's registry never gives a slice).
inline constexpr const char* kLedgerUnslicedName = "-unsliced";
inline constexpr int64_t kReapIntervalNs = 250'000'000;  // periodic reaping, per slice
// A claim (CLAIMING slot) whose lock byte is not held yet counts as live for this long: the
// claimer takes the byte right after winning the entry's CAS.
inline constexpr int64_t kClaimGraceNs = 1'000'000'000;
// The slice's owner: "the process creating it" (geteuid()).
inline constexpr uint32_t kLedgerOwnerCaller = 0xffffffffu;

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

// Slice flags.
inline constexpr uint32_t kSliceEphemeral = 1u;  // recyclable once no process of it is alive
// Deleted by its writer while processes still ran in it: found (FindSlice) and listed by no one,
// so a restarted daemon never adopts it and a new slice of the same name gets a new entry; its
// processes hold it by index and run on with their limits. Set with kSliceEphemeral.
inline constexpr uint32_t kSliceSetAside = 2u;

// ---- the limits file (written by the directory's owner only) -------------------------------

struct LedgerGpu {
  std::atomic<uint64_t> state;  // kFree / kClaiming|pid / kReady
  uint8_t uuid[16];             // CUuuid bytes
  std::atomic<int64_t> limit;   // bytes; <0: unlimited. Read live by the slice's processes
                                // (every charge and memory query), so a change reaches them
                                // at their next call.
  // The slice's compute policy on this GPU as its writer last set it (gsliced's `gslice set`):
  // kGpuPolicySet | permille of the GPU's time (kGpuPolicyMask), 0 <= permille <= 1000, where a
  // cap of 0 is "no cap" and a share of 0 is "no share given". A word without kGpuPolicySet
  // (every entry before its writer sets one) means "not set here": the policy the process
  // started with (GSLICE_COMPUTE, GSLICE_SHARE) applies.
  std::atomic<uint32_t> compute_cap;
  std::atomic<uint32_t> compute_share;
  uint8_t reserved[24];
};
static_assert(sizeof(LedgerGpu) == 64);
inline constexpr uint32_t kGpuPolicySet = 0x80000000u;
inline constexpr uint32_t kGpuPolicyMask = 0xffffu;

// A slice GPU's compute policy as its writer set it, decoded from the two words: -1 where a
// word is not set (the process's own GSLICE_COMPUTE / GSLICE_SHARE apply), else permille of
// the GPU's time, 0..1000 (a cap of 0: no cap; a share of 0: none given). For a launch gate
// that follows `gslice set` while it runs: Ledger::ComputePolicy is two atomic loads on the
// mapped limits file, no lock and no system call, so the gate's own thread may read it every
// period and apply what changed.
struct LedgerComputePolicy {
  int cap_permille = -1;
  int share_permille = -1;
};
inline constexpr int PolicyPermille(uint32_t word) {
  return (word & kGpuPolicySet) != 0 ? static_cast<int>(word & kGpuPolicyMask) : -1;
}

// A guaranteed slice's protection level (LedgerSlice::protect_permille): the fraction of its
// solo speed, in thousandths, that opportunistic work on the same GPU must leave it. Higher
// protects the guaranteed job more and leaves opportunistic work less of the GPU. 0 in the
// ledger means kProtectDefaultPermille; any other value lies in [kProtectMinPermille,
// kProtectMaxPermille] (the writer's methods refuse others). Opportunistic slices have none.
inline constexpr uint32_t kProtectDefaultPermille = 970;
inline constexpr uint32_t kProtectMinPermille = 500;
inline constexpr uint32_t kProtectMaxPermille = 1000;

struct LedgerSlice {
  std::atomic<uint64_t> state;       // kFree / kClaiming|pid / kReady
  std::atomic<uint64_t> generation;  // bumped whenever the entry is recycled; the usage
                                     // file slice-<i> carries the generation it belongs to
  char name[kLedgerNameSize];
  uint32_t slice_class;  // SliceClass
  uint32_t flags;        // kSlice*
  uint32_t owner_uid;    // the uid that owns the usage file (may charge into the slice)
  uint32_t protect_permille;  // guaranteed: the floor of its solo speed kept against opportunistic work (0: default)
  // A recording the writer asked the slice's processes for (gslice trace, docs/trace.md): 0
  // none; else the request's id, for as long as they are to record. Each process's shim reads
  // it with one relaxed load per traced call and, once it changes, writes what it recorded
  // into the request's folder (TraceRequestFolder). Written by the writer only.
  std::atomic<uint32_t> trace_request;
  uint32_t reserved_trace;
  uint8_t reserved[40];
  LedgerGpu gpus[kLedgerMaxGpus];
};

struct LedgerLimitsHeader {
  uint32_t magic;  // kLedgerMagic
  uint32_t version;
  uint64_t size;                      // sizeof(LedgerLimits)
  std::atomic<uint32_t> initialised;  // 1 once the creator finished writing
  uint32_t max_gpus, max_slices, max_slots, compute_per_slice;
  uint8_t reserved[4096 - 36];
};
static_assert(sizeof(LedgerLimitsHeader) == 4096);

struct LedgerLimits {
  LedgerLimitsHeader header;
  LedgerSlice slices[kLedgerMaxSlices];
};

// ---- a slice's usage file (written by the slice's processes only) --------------------------

struct LedgerProcess {
  std::atomic<uint64_t> state;       // kFree / kClaiming|pid / kAlive|pid / kReaping|reaper pid
  std::atomic<uint64_t> start_time;  // /proc/<pid>/stat field 22; 0 while attaching
  std::atomic<uint64_t> pid_ns;      // inode of the owner's /proc/self/ns/pid (0: unknown)
  std::atomic<int64_t> claimed_ns;   // MonotonicNs of the claim (kClaimGraceNs)
};

// One gated process on one GPU (interpose/compute, docs/compute.md): what the launch gates
// of other processes on that GPU read to share it. Written only by its owner (atomics);
// a dead owner's entry only ever expires (its *_until_ns times pass) and is freed by a
// process of its slice (or gsliced) once Ledger::ComputeOwnerAlive says its owner is gone.
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
  // 1 + the index of the slice whose cap this entry charges (LedgerUsageHead::cap_tat), 0
  // for none: processes of one capped slice take exclusive turns on a GPU (docs/compute.md).
  std::atomic<uint32_t> cap_slice;
  // A guaranteed process on a GPU shared through MPS: its kernels' speed beside opportunistic
  // work, once per control period (interpose/compute/kernel_clock.h, packed; 0: none).
  std::atomic<uint32_t> kernel_signal;
};
static_assert(sizeof(LedgerComputeEntry) == 88);
inline constexpr uint32_t kComputeShareMask = 0xffffu;        // share_permille: the weight, 1..1000
inline constexpr uint32_t kComputeShareSet = 0x80000000u;      // the share was given explicitly
inline constexpr uint32_t kComputeShareRunning = 0x40000000u;  // holds the share turn
inline constexpr uint32_t kComputeTakesTurns = 0x20000000u;    // takes exclusive turns with peers

// Page 0 of a usage file: what the gates of other slices map (read-only) to see this slice's
// compute entries. One page, so that a gate can map every slice's page side by side into one
// window (ComputeWindow) and index the node's entries as one table.
struct LedgerUsageHead {
  uint32_t magic;  // kLedgerUsageMagic
  uint32_t version;
  uint64_t size;                      // sizeof(LedgerUsage)
  std::atomic<uint32_t> initialised;  // 1 once the writer finished creating it
  uint32_t slice;                     // its index in the limits file
  std::atomic<uint64_t> generation;   // the limits entry's generation it belongs to
  std::atomic<uint32_t> slot_high_water;  // slots [0, high_water) may be in use
  uint32_t reserved0;
  std::atomic<int64_t> last_reap_ns;  // CLOCK_MONOTONIC of the last periodic reap pass
  // The compute cap's GCRA state per slice GPU (interpose/compute: the theoretical arrival
  // time, MonotonicNs), shared by the slice's processes so that a cap holds for the slice.
  std::atomic<int64_t> cap_tat[kLedgerMaxGpus];
  LedgerComputeEntry compute[kLedgerSliceComputeEntries];
  uint8_t reserved[4096 - 48 - 8 * kLedgerMaxGpus - sizeof(LedgerComputeEntry) * kLedgerSliceComputeEntries];
};
static_assert(sizeof(LedgerUsageHead) == 4096);

struct LedgerUsage {
  LedgerUsageHead head;
  LedgerProcess slots[kLedgerMaxSlots];
  // used[g][s]: bytes process slot s holds on slice GPU g. Laid out per GPU so that the
  // sum a charge needs is one contiguous run of loads.
  std::atomic<int64_t> used[kLedgerMaxGpus][kLedgerMaxSlots];
};

// The liveness lock bytes of a usage file: offsets past the mapped layout (fcntl locks need
// no data there). One per process slot, one per compute entry.
inline constexpr int64_t kLedgerLockBase = static_cast<int64_t>(sizeof(LedgerUsage));
inline constexpr int64_t LedgerSlotLockByte(int slot) { return kLedgerLockBase + slot; }
inline constexpr int64_t LedgerComputeLockByte(int entry) { return kLedgerLockBase + kLedgerMaxSlots + entry; }

// Compute entries are named node-wide by one index: slice * kLedgerSliceComputeEntries + entry.
inline constexpr int kLedgerMaxComputeEntries = kLedgerMaxSlices * kLedgerSliceComputeEntries;
inline constexpr int ComputeSliceOf(int index) { return index / kLedgerSliceComputeEntries; }
inline constexpr int ComputeEntryOf(int index) { return index % kLedgerSliceComputeEntries; }

static_assert(std::atomic<int64_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

enum class LedgerError {
  kOk = 0,
  kOpenFailed,        // open/ftruncate/mmap failed (errno in detail)
  kIncompatible,      // wrong magic, version or size (or a ledger FILE of version <= 3)
  kInitTimeout,       // the creator never finished initialising
  kNoSliceEntry,      // all kLedgerMaxSlices entries are in use (or no such slice)
  kNoGpuEntry,        // the slice already has kLedgerMaxGpus GPUs
  kNoProcessSlot,     // all kLedgerMaxSlots slots of the slice are in use
  kBadArgument,
  kUntrusted,         // a symlink, or owned/writable by another user: refused
  kNotPermitted,      // only the ledger's writer may do this (or the usage file is not ours)
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

// Opens the directory path without following a symlink (O_NOFOLLOW on every open, so the
// last component must be the directory itself), creating it (mode 0755) when missing and
// create is set. Refuses a directory that root or the caller does not own, or that group or
// others may write: -1 with errno EPERM and why (if given) filled in. O_CLOEXEC.
int OpenLedgerDirectory(const char* path, bool create, char* why, size_t why_size);
// NVML's "GPU-2b5f0c1e-..." (the "GPU-" prefix and dashes optional) as the ledger's 16
// CUuuid bytes. False when malformed.
bool ParseGpuUuid(const char* text, uint8_t out[16]);
// The daemon-less per-user ledger next to path: "<path>-u<euid>".
void PerUserLedgerPath(const char* path, char* out, size_t out_size);
// A protection level as the ledger stores it: 0 (the default) or kProtectMinPermille..
// kProtectMaxPermille.
inline constexpr bool ValidProtectPermille(uint32_t permille) {
  return permille == 0 || (permille >= kProtectMinPermille && permille <= kProtectMaxPermille);
}
// The level a slice entry's protect_permille stands for (0: kProtectDefaultPermille).
inline constexpr uint32_t EffectiveProtectPermille(uint32_t stored) {
  return stored == 0 ? kProtectDefaultPermille : stored;
}

class Ledger;
// Opens the ledger a process of slice name uses and maps that slice's usage writable: the
// node ledger at path when the slice is there and ours to charge (or when this process owns
// the directory: then it creates the slice when create_slice), else the per-user ledger
// next to it (PerUserLedgerPath, created when missing, where this user is the writer).
// own_usage_path: where a pod's own usage file is mounted ("" for none). note (may be null):
// why the per-user ledger was used, or why neither worked. *slice: the slice's index.
// protect_permille: the protection level of a slice it creates (FindOrCreateSlice).
LedgerError OpenSliceLedger(Ledger* ledger, const char* path, const char* own_usage_path, const char* name,
                            SliceClass cls, uint32_t flags, bool create_slice, int* slice, char* note,
                            size_t note_size, uint32_t protect_permille = 0);

// The mapping. Move-only: it owns descriptors and mappings.
class Ledger {
 public:
  Ledger() = default;
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;
  Ledger(Ledger&& o) noexcept;
  Ledger& operator=(Ledger&& o) noexcept;

  // Opens the ledger directory at path (OpenLedgerDirectory; create: make it when missing,
  // which only its rightful writer should do) and maps its limits file read-only. The caller
  // is the WRITER when it owns the directory: then the limits file is created when missing
  // (O_EXCL, 0644, initialised under the directory's lock file) and a second, writable
  // mapping serves the writer's methods. Waits up to init_timeout_ms for a creator that is
  // still initialising. detail() says what went wrong.
  LedgerError Open(const char* path, int init_timeout_ms = 2000, bool create = true);
  // A private, process-local ledger (anonymous mappings): used when the node ledger cannot be
  // opened, so limits still hold within the process. Liveness there is judged by pid alone.
  // The caller is its writer.
  LedgerError OpenPrivate();
  bool is_open() const { return limits_ != nullptr; }
  // This process may create slices and set limits here (it owns the directory).
  bool writable() const { return limits_rw_ != nullptr; }
  const LedgerLimits* limits() const { return limits_; }
  const char* path() const { return path_; }
  // The last error in words: which file and why.
  const char* detail() const { return detail_; }

  // Usage of slice: mapped by MapUsage (or by creating or attaching), else nullptr.
  LedgerUsage* usage(int slice) const;
  bool usage_writable(int slice) const;
  // Maps slice's usage file, read-write when this process may write it (else read-only),
  // replacing a mapping of an older generation. The file must be a regular file (not
  // followed through a symlink) owned by the slice's owner or root, writable by nobody
  // else, of this generation. own_usage: a path that holds this process's own slice's usage
  // file (a pod's mount), tried first.
  LedgerError MapUsage(int slice);
  void SetOwnUsagePath(const char* path);

  // Finds the READY slice named name or creates it (writer only: kNotPermitted otherwise).
  // owner_uid: who may charge into it (kLedgerOwnerCaller: geteuid()). protect_permille: its
  // protection level when it is created (0: the default; else kProtectMinPermille..
  // kProtectMaxPermille, kBadArgument otherwise); a slice found keeps its own.
  LedgerError FindOrCreateSlice(const char* name, SliceClass cls, uint32_t flags, int* slice,
                                uint32_t owner_uid = kLedgerOwnerCaller, uint32_t protect_permille = 0);
  // Finds the READY slice named name; -1 when there is none.
  int FindSlice(const char* name) const;
  // Writer: the slice's class, flags, owner (re-owning its usage file; usage untouched) and
  // protection level (as FindOrCreateSlice's; pass the entry's own to keep it).
  LedgerError UpdateSlice(int slice, SliceClass cls, uint32_t flags, uint32_t owner_uid, uint32_t protect_permille);

  // Finds or adds (writer only) the slice's entry for the GPU with this UUID. limit is set
  // when the entry is added (bytes, <0 unlimited); an existing entry keeps its limit.
  LedgerError FindOrAddGpu(int slice, const uint8_t uuid[16], int64_t limit, int* gpu);
  int FindGpu(int slice, const uint8_t uuid[16]) const;

  // Takes a free process slot in slice for (pid, start_time): maps the usage file writable,
  // one CAS, then the slot's lock byte (one fcntl). pid is taken to be in the caller's pid
  // namespace, and the caller holds the slot's liveness lock, so pass the caller's own pid
  // (tests pass others to model processes that share the caller's lock but not its pid).
  LedgerError Attach(int slice, uint32_t pid, uint64_t start_time, SliceHandle* out);
  // Releases everything the slot holds, drops its lock and frees it.
  void Detach(const SliceHandle& h);
  // FindSlice (FindOrCreateSlice for a writer) + Attach, retried if the slice is recycled.
  LedgerError AttachByName(const char* name, SliceClass cls, uint32_t flags, uint32_t pid,
                           uint64_t start_time, SliceHandle* out);

  // Adds bytes to the slot's usage on slice GPU gpu if the slice stays within its limit.
  // Refusals reap dead processes and retry a few times (a racing charger's transient add
  // can cause a spurious refusal right at the limit). No system call unless refused.
  ChargeResult Charge(const SliceHandle& h, int gpu, int64_t bytes);
  // Adds bytes without checking the limit (memory the driver already handed out).
  void ForceCharge(const SliceHandle& h, int gpu, int64_t bytes);
  // Gives bytes back. O(1).
  void Release(const SliceHandle& h, int gpu, int64_t bytes);

  int64_t SliceUsage(int slice, int gpu) const;
  int64_t SlotUsage(const SliceHandle& h, int gpu) const;
  int64_t Limit(int slice, int gpu) const;
  // Writer only (ignored otherwise).
  void SetLimit(int slice, int gpu, int64_t limit);
  // The slice's compute policy words on a GPU (LedgerGpu::compute_cap, compute_share): 0 when
  // out of range or never set. The setter is the writer's only (ignored otherwise).
  uint32_t ComputeCapWord(int slice, int gpu) const;
  uint32_t ComputeShareWord(int slice, int gpu) const;
  void SetComputePolicy(int slice, int gpu, uint32_t cap_word, uint32_t share_word);
  // The slice's trace request word (LedgerSlice::trace_request): nullptr when out of range. The
  // setter is the writer's only (ignored otherwise).
  const std::atomic<uint32_t>* TraceRequestWord(int slice) const;
  void SetTraceRequest(int slice, uint32_t request);
  // Both words decoded (LedgerComputePolicy): {-1, -1} when out of range or never set.
  LedgerComputePolicy ComputePolicy(int slice, int gpu) const {
    return {PolicyPermille(ComputeCapWord(slice, gpu)), PolicyPermille(ComputeShareWord(slice, gpu))};
  }

  // Frees the slots of dead processes in slice (SlotOwnerAlive false). Returns how many were
  // reaped. Needs the usage mapped writable (else 0).
  int Reap(int slice);
  // Reap(slice) if the last pass was more than kReapIntervalNs ago (one process does it).
  void MaybeReap(int slice);
  // Number of ALIVE slots whose owner is alive (usage mapped; else 0).
  int AliveCount(int slice) const;

  // Liveness of the owner of a process slot (CLAIMING, ALIVE or REAPING): its lock byte is
  // held (a CLAIMING slot: or its claim is younger than kClaimGraceNs) and, when the owner is
  // in the caller's pid namespace, its pid is alive with the recorded start time. A FREE slot
  // has no owner: false.
  bool SlotOwnerAlive(int slice, int slot) const;

  // Compute entries, by node-wide index (ComputeSliceOf/ComputeEntryOf). The entry lives in
  // its slice's usage file: nullptr unless that is mapped.
  LedgerComputeEntry* ComputeEntry(int index) const;
  // The claimer wins the entry's CAS (FREE -> CLAIMING|pid) and then calls
  // AcquireComputeEntry, which records its pid namespace and start time and takes the
  // entry's lock byte; false: the byte is still held by another open file (a forked child of
  // a dead earlier owner): put the entry back to FREE and take another. Publish ALIVE only
  // after it returned true. Only for entries of a slice mapped writable.
  bool AcquireComputeEntry(int index);
  // Drops the entry's lock byte. Call it before storing FREE (a same-file claimer of the
  // entry must never lose the byte to a late unlock).
  void ReleaseComputeEntry(int index);
  // Liveness of an ALIVE compute entry's owner, as SlotOwnerAlive.
  bool ComputeOwnerAlive(int index) const;

  // True when liveness is judged by lock bytes (a node ledger), false for a private one.
  bool uses_lock_bytes() const { return dir_fd_ >= 0; }
  // The directory's descriptor (-1 for a private ledger), for ComputeWindow.
  int dir_fd() const { return dir_fd_; }
  // Slice's usage descriptor (-1 when not mapped), for ComputeWindow.
  int usage_fd(int slice) const;

 private:
  struct UsageMap {
    LedgerUsage* map = nullptr;
    int fd = -1;     // holds this process's lock bytes (open file description locks)
    int probe = -1;  // a second open file: F_OFD_GETLK through it sees fd's locks too
    bool writable = false;
    uint64_t generation = 0;
    int guard = -1;  // its shrink guard entry where another uid owns the file (shrink_guard.h)
  };
  bool LockWriter();
  void UnlockWriter();
  LedgerError CreateUsage(int slice, uint64_t generation, uint32_t owner_uid);
  LedgerError MapUsageFile(int fd, uid_t file_owner, bool writable, const char* name, UsageMap* u);
  bool RecycleIfIdle(int slice);
  void UnmapUsage(int slice);
  void Close();
  bool OwnerAlive(const UsageMap& u, int64_t lock_byte, uint32_t pid, uint64_t pid_ns, uint64_t start_time,
                  uint64_t self_ns) const;
  bool SlotOwnerAlive(int slice, int slot, uint64_t word, uint64_t self_ns) const;
  LedgerError Fail(LedgerError e, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

  const LedgerLimits* limits_ = nullptr;  // PROT_READ
  LedgerLimits* limits_rw_ = nullptr;     // the writer's mapping (nullptr: not the writer)
  bool private_ = false;
  int dir_fd_ = -1;
  int limits_fd_ = -1;
  int lock_fd_ = -1;  // the writer's lock file (flock)
  uid_t dir_owner_ = 0;
  UsageMap usage_[kLedgerMaxSlices];
  char path_[256] = {};
  char own_usage_path_[256] = {};
  char detail_[384] = {};
};

// A gate's view of every slice's compute entries as one table (interpose/compute): a window
// of kLedgerMaxSlices pages, page s showing slice s's LedgerUsageHead. The caller's own
// slice's page is its writable mapping of its own usage file (MAP_FIXED over the window).
// Other slices' pages are COPIES, refreshed by the gate thread (Refresh every peer scan, Sync
// every pass for the slices it watches): their files belong to other users, who may shrink
// them at any moment, and a mapping of such a file kills whoever reads it then (SIGBUS). A
// copy only ever shows a whole page or zeros. Slices that are not (yet) adopted, or whose
// file is shrunk, show zero pages: every entry FREE. Entries never move, so launching threads
// read them without locks while the gate thread refreshes the window.
class ComputeWindow {
 public:
  ComputeWindow() = default;
  ~ComputeWindow();
  ComputeWindow(const ComputeWindow&) = delete;
  ComputeWindow& operator=(const ComputeWindow&) = delete;

  // ledger: the caller's open ledger (outlives the window); own_slice: the caller's slice,
  // whose usage the ledger has mapped writable (-1: none). False: no window (out of memory).
  bool Init(Ledger* ledger, int own_slice);
  // Adopts slices that appeared or changed generation, clears those that went away, and
  // copies every adopted slice's page again (one pread each): every peer scan. Refresh and
  // Sync take the window's own lock (the gate thread and a thread adding a GPU may both call).
  void Refresh();
  // Copies the pages of the adopted slices in the mask (bit s: slice s) again: one pread
  // each, as often as the readers need fresh entries.
  void Sync(uint64_t slices);
  LedgerComputeEntry& entry(int index) const {
    return pages_[ComputeSliceOf(index)].compute[ComputeEntryOf(index)];
  }
  int index_of(const LedgerComputeEntry* e) const;
  bool writable(int index) const { return own_slice_ >= 0 && ComputeSliceOf(index) == own_slice_; }
  LedgerUsageHead* own_head() const { return own_slice_ >= 0 ? &pages_[own_slice_] : nullptr; }
  int own_slice() const { return own_slice_; }
  // Whether slice's compute page is mapped or adopted (else its entries are all FREE):
  // scanners skip such slices whole instead of loading each of their entries.
  bool mapped(int slice) const { return mapped_[slice]; }
  // Liveness of an ALIVE entry's owner (as Ledger::ComputeOwnerAlive), any slice.
  bool OwnerAlive(int index) const;

  // The claim protocol of the caller's own compute entries (one per gated process and GPU).
  // ClaimEntry takes a FREE entry of the caller's slice (CAS to CLAIMING|pid, then its lock
  // byte through Ledger::AcquireComputeEntry; an entry whose byte another open file still
  // holds is put back and skipped), fills in the GPU, class and share word with the times and
  // counters at zero, and publishes it ALIVE. When no entry is FREE, entries whose owner died
  // are freed and taken. nullptr: no slice of its own, or every entry has a live owner.
  LedgerComputeEntry* ClaimEntry(const uint8_t uuid[16], SliceClass cls, uint32_t share_word);
  // Gives back an entry ClaimEntry returned: clears its times (peers stop waiting for it at
  // once), drops its lock byte, then stores FREE.
  void ReleaseEntry(LedgerComputeEntry* e);
  // Whether the owner of entry index (ALIVE) lives. A dead owner's entry of the caller's own
  // slice is freed here; another slice's only expires until that slice (or gsliced) frees it.
  bool OwnerAliveElseFree(int index);

 private:
  void MapOwnSlice(int fd, uint64_t generation);
  void AdoptSlice(int slice, int fd, uint64_t generation);
  void CopySlice(int slice);
  void StorePage(int slice, const LedgerUsageHead* from);  // nullptr: zeros
  void ClearSlice(int slice);
  Ledger* ledger_ = nullptr;
  LedgerUsageHead* pages_ = nullptr;
  LedgerUsageHead* staging_ = nullptr;  // one page: where a copy is read before it is stored
  std::mutex refresh_mu_;               // Refresh and Sync: staging_, probe_, generation_, mapped_
  int own_slice_ = -1;
  int probe_[kLedgerMaxSlices];
  uint64_t generation_[kLedgerMaxSlices] = {};
  bool mapped_[kLedgerMaxSlices] = {};
};

// Process liveness by pid in the caller's pid namespace: /proc/<pid>/stat exists, is not a
// zombie, and (when expected_start_time != 0) its start time matches. Entries of a shared
// ledger are judged with Ledger::SlotOwnerAlive / ComputeOwnerAlive, which also work across
// namespaces.
bool ProcessAlive(uint32_t pid, uint64_t expected_start_time);
// Field 22 of /proc/<pid>/stat (clock ticks since boot), 0 on error.
uint64_t ProcessStartTime(uint32_t pid);

}  // namespace gslice
