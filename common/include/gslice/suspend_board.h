// The suspend board: a node-wide shared-memory table (GSLICE_SUSPEND_BOARD, default
// /dev/shm/gslice-suspend) through which the shim's resume gate and gsliced's suspend
// service talk about one process each. This header is the ONE definition of its layout
// (docs/suspend.md explains the protocol).
//
// One entry per shimmed process, claimed by the shim (CAS on `owner`, then the entry's lock
// byte) and reusable once its owner is dead. Owners are judged as in the node ledger, so that
// processes in containers (their own pid namespaces) work: the owner holds an
// open-file-description lock on the entry's byte in the board FILE (past the mapped layout)
// while it lives, and the entry records the owner's pid namespace next to its pid and start
// time (gslice/owner_lock.h has the rule). The pid is the owner's own, container-local one;
// the service maps (pid_ns, pid, start_time) to the pid it sees with PidResolver.
// No other locks: every field has one writer.
//   shim writes:    activity (each gated call), resume_request, mem_request_*
//   service writes: gate, mem_reply_*, move_reply_*
//   gslice move:    move_to_gpu, move_seq
// gate is also a futex word: the shim sleeps on it while closed; the service wakes it.
// header.doorbell is a futex word the service sleeps on; the shim bumps and wakes it when
// it sets resume_request or posts a memory request, so the service answers at once.
#pragma once

#include <atomic>
#include <cstdint>

namespace gslice {

inline constexpr uint32_t kSuspendBoardMagic = 0x42535347;  // "GSSB"
inline constexpr uint32_t kSuspendBoardVersion = 2;  // 2: owners' pid namespaces, lock bytes,
                                                    //    claim tags
inline constexpr int kSuspendBoardEntries = 4096;

// gate values.
inline constexpr uint32_t kGateOpen = 0;
inline constexpr uint32_t kGateClosed = 1;  // suspending, suspended or resuming: calls wait

// move_reply values.
inline constexpr uint32_t kMoveReplyMoved = 1;    // restored on the target GPU
inline constexpr uint32_t kMoveReplyRefused = 2;  // not moved (the service logs why); it runs where it was

// mem_reply values.
inline constexpr uint32_t kMemReplyFreed = 1;    // memory was freed: retry the allocation
inline constexpr uint32_t kMemReplyRefused = 2;  // nothing can be freed: the allocation fails

// The owner word: the owner's pid (in its own namespace) in bits 0..31, a random claim tag
// in bits 32..55 (a CAS on a word read earlier fails once the entry went to another owner
// with the same pid: pid 1 is in every container), and kBoardOwnerClaiming while the claimer
// fills the entry in. 0: free.
inline constexpr uint64_t kBoardOwnerClaiming = uint64_t{1} << 56;
inline constexpr uint64_t BoardOwnerWord(uint32_t pid, uint32_t tag) {
  return static_cast<uint64_t>(pid) | (static_cast<uint64_t>(tag & 0xffffffu) << 32);
}
inline constexpr uint32_t BoardOwnerPid(uint64_t word) { return static_cast<uint32_t>(word); }
inline constexpr bool BoardOwnerLive(uint64_t word) { return word != 0 && (word & kBoardOwnerClaiming) == 0; }

struct SuspendBoardEntry {
  std::atomic<uint64_t> owner;       // 0 free, else BoardOwnerWord (claimed by the shim)
  std::atomic<uint64_t> start_time;  // the owner's /proc start time (pid reuse)
  std::atomic<uint64_t> pid_ns;      // inode of the owner's /proc/self/ns/pid (0: unknown)
  std::atomic<int64_t> claimed_ns;   // CLOCK_MONOTONIC of the claim (see kClaimGraceNs)
  std::atomic<uint32_t> gate;        // kGateOpen / kGateClosed (futex word)
  std::atomic<uint32_t> resume_request;  // 1: a call of the owner waits at the gate
  std::atomic<uint32_t> mem_reply;       // kMemReply* (futex word for the shim)
  std::atomic<uint32_t> move_reply;      // kMoveReply* (futex word for the CLI)
  std::atomic<uint64_t> activity;        // gated calls passed (only "has it moved" matters)
  std::atomic<uint64_t> mem_request_seq;    // shim: ++ per request
  std::atomic<uint64_t> mem_request_bytes;  // bytes the failed allocation needed
  uint8_t mem_request_gpu[16];              // GPU UUID of the failed allocation
  std::atomic<uint64_t> mem_reply_seq;      // service: = mem_request_seq when answered
  // `gslice move`: a request to restore the process on another GPU (written by the CLI,
  // which takes a request slot by CAS on move_seq; answered by the service).
  uint8_t move_to_gpu[16];                 // target GPU UUID
  std::atomic<uint64_t> move_seq;          // CLI: ++ per request (after move_to_gpu)
  std::atomic<uint64_t> move_reply_seq;    // service: = move_seq when answered
};
static_assert(sizeof(SuspendBoardEntry) == 128);

struct SuspendBoardHeader {
  uint32_t magic;
  uint32_t version;
  uint64_t size;
  std::atomic<uint32_t> initialised;
  std::atomic<uint32_t> doorbell;         // futex word: bumped by shims wanting attention
  std::atomic<uint64_t> service_pid;      // the suspend service running now (0: none), in
  std::atomic<uint64_t> service_pid_ns;   // this pid namespace; it holds the service lock byte
  uint8_t reserved[4096 - 40];
};
static_assert(sizeof(SuspendBoardHeader) == 4096);

struct SuspendBoardLayout {
  SuspendBoardHeader header;
  SuspendBoardEntry entries[kSuspendBoardEntries];
};

// The liveness lock bytes: file offsets past the mapped layout (fcntl locks need no data
// there). One for the service, one per entry.
inline constexpr int64_t kSuspendBoardLockBase = static_cast<int64_t>(sizeof(SuspendBoardLayout));
inline constexpr int64_t kSuspendBoardServiceLockByte = kSuspendBoardLockBase;
inline constexpr int64_t SuspendBoardEntryLockByte(int entry) { return kSuspendBoardLockBase + 64 + entry; }

// The mapping, shared by the shim and the service. Move-only.
class SuspendBoard {
 public:
  SuspendBoard() = default;
  ~SuspendBoard();
  SuspendBoard(const SuspendBoard&) = delete;
  SuspendBoard& operator=(const SuspendBoard&) = delete;

  // Maps the board at path, creating it (mode 0666) when missing. False on error (errno).
  bool Open(const char* path);
  bool is_open() const { return layout_ != nullptr; }
  SuspendBoardLayout* layout() const { return layout_; }

  // Claims an entry for the caller (pid, start_time: the caller's own, in its namespace): the
  // one it already owns, else a free one or one whose owner is dead. CAS, then the entry's
  // lock byte, reset, publish. Resets the entry's fields. nullptr when the board is full.
  SuspendBoardEntry* Claim(uint32_t pid, uint64_t start_time);
  // The live entry of pid in pid namespace pid_ns, or nullptr.
  SuspendBoardEntry* Find(uint64_t pid_ns, uint32_t pid) const;
  // Is the entry's owner alive (by its lock byte and, in our namespace, its pid)? A claim
  // whose byte is not held yet counts as live for kClaimGraceNs. Free: false.
  bool OwnerAlive(const SuspendBoardEntry& e) const;
  // Frees entries whose owner is dead; returns how many.
  int Reap();
  int IndexOf(const SuspendBoardEntry& e) const { return static_cast<int>(&e - layout_->entries); }

  // The suspend service: marks the board as served by this process (its pid, namespace and
  // the service lock byte), and unmarks it. ServiceAlive: is a live service there?
  void SetService();
  void ClearService();
  bool ServiceAlive() const;

 private:
  void Close();
  SuspendBoardLayout* layout_ = nullptr;
  int fd_ = -1;        // holds this process's lock bytes (open file description locks)
  int probe_fd_ = -1;  // a second open file: F_OFD_GETLK through it sees fd_'s locks too
  bool service_byte_held_ = false;
};

// Futex helpers on shared (non-private) words.
// Waits while *word == expected, at most timeout_ms (<0: no limit). Spurious returns allowed.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms);
void FutexWakeAll(std::atomic<uint32_t>* word);
// Bumps the doorbell and wakes the service.
void RingDoorbell(SuspendBoardLayout* board);

}  // namespace gslice
