// The suspend board: a node-wide shared-memory table (GSLICE_SUSPEND_BOARD, default
// /dev/shm/gslice-suspend) through which the shim's resume gate and gsliced's suspend
// service talk about one process each. This header is the ONE definition of its layout
// (docs/suspend.md explains the protocol).
//
// One entry per shimmed process, claimed by the shim with one CAS on `owner` and reusable
// once that pid is dead (ProcessAlive). No locks: every field has one writer.
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
inline constexpr uint32_t kSuspendBoardVersion = 1;
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

struct SuspendBoardEntry {
  std::atomic<uint64_t> owner;       // 0 free, else pid (claimed by the shim)
  std::atomic<uint64_t> start_time;  // the owner's /proc start time (pid reuse)
  std::atomic<uint32_t> gate;        // kGateOpen / kGateClosed (futex word)
  std::atomic<uint32_t> resume_request;  // 1: a call of the owner waits at the gate
  std::atomic<uint64_t> activity;        // gated calls passed (only "has it moved" matters)
  std::atomic<uint64_t> mem_request_seq;    // shim: ++ per request
  std::atomic<uint64_t> mem_request_bytes;  // bytes the failed allocation needed
  uint8_t mem_request_gpu[16];              // GPU UUID of the failed allocation
  std::atomic<uint64_t> mem_reply_seq;      // service: = mem_request_seq when answered
  std::atomic<uint32_t> mem_reply;          // kMemReply* (futex word for the shim)
  uint32_t reserved0;
  // `gslice move`: a request to restore the process on another GPU (written by the CLI,
  // which takes a request slot by CAS on move_seq; answered by the service).
  uint8_t move_to_gpu[16];                 // target GPU UUID
  std::atomic<uint64_t> move_seq;          // CLI: ++ per request (after move_to_gpu)
  std::atomic<uint64_t> move_reply_seq;    // service: = move_seq when answered
  std::atomic<uint32_t> move_reply;        // kMoveReply* (futex word for the CLI)
  uint32_t reserved1;
  uint8_t reserved[8];
};
static_assert(sizeof(SuspendBoardEntry) == 128);

struct SuspendBoardHeader {
  uint32_t magic;
  uint32_t version;
  uint64_t size;
  std::atomic<uint32_t> initialised;
  std::atomic<uint32_t> doorbell;      // futex word: bumped by shims wanting attention
  std::atomic<uint64_t> service_pid;   // the suspend service running now (0: none)
  uint8_t reserved[4096 - 32];
};
static_assert(sizeof(SuspendBoardHeader) == 4096);

struct SuspendBoardLayout {
  SuspendBoardHeader header;
  SuspendBoardEntry entries[kSuspendBoardEntries];
};

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

  // Claims an entry for (pid, start_time): the one it already owns, else a free one or one
  // whose owner is dead. Resets the entry's fields. nullptr when the board is full.
  SuspendBoardEntry* Claim(uint32_t pid, uint64_t start_time);
  // The live entry of pid, or nullptr.
  SuspendBoardEntry* Find(uint32_t pid) const;
  // Frees entries whose owner is dead; returns how many.
  int Reap();

 private:
  SuspendBoardLayout* layout_ = nullptr;
};

// Futex helpers on shared (non-private) words.
// Waits while *word == expected, at most timeout_ms (<0: no limit). Spurious returns allowed.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms);
void FutexWakeAll(std::atomic<uint32_t>* word);
// Bumps the doorbell and wakes the service.
void RingDoorbell(SuspendBoardLayout* board);

}  // namespace gslice
