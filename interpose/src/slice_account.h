// This process's view of its slice: limits from the environment (GSLICE_MEMORY,
// GSLICE_SLICE), the node ledger, and the process slot charges go to. Owned by the shim;
// every counted allocation goes through Charge/Release here.
#pragma once

#include <atomic>
#include <cstdint>

#include "gslice/ledger.h"

namespace gslice::shim {

inline constexpr int kMaxDevices = 64;

// The protection level (ledger.h, LedgerSlice::protect_permille) of a slice this process
// creates from its environment: GSLICE_PROTECT for guaranteed work, 0 (the default) when it
// is unset, malformed or given to opportunistic work (GSLICE_CLASS), which has none; those
// two are logged. A slice that exists keeps its own level.
uint32_t ProtectFromEnvironment();

class SliceAccount {
 public:
  constexpr SliceAccount() = default;

  // Reads the environment and, when a limit is configured, maps the ledger. attach: take a
  // process slot (the libcuda shim); the NVML shim only reads. Returns active().
  // Bad values are logged and ignored (no limit for that GPU), never fatal.
  bool Init(bool attach);
  // Frees the process slot (normal exit); later charges are ignored.
  void Shutdown();
  // In a child after fork(): drop the parent's slot (never charged or freed by the child).
  void OnForkChild();
  bool active() const { return active_.load(std::memory_order_acquire); }

  // Limit for a visible device ordinal, -1 when unlimited.
  int64_t LimitForOrdinal(int ordinal) const;
  // The slice GPU entry for this UUID, added with LimitForOrdinal(ordinal) if new; -1 on error.
  int GpuForUuid(const uint8_t uuid[16], int ordinal);
  // Read-only lookup (NVML): -1 when the slice has no entry for this GPU.
  int FindGpu(const uint8_t uuid[16]);

  ChargeResult Charge(int gpu, int64_t bytes);
  void ForceCharge(int gpu, int64_t bytes);
  void Release(int gpu, int64_t bytes);
  int64_t Usage(int gpu);
  int64_t Limit(int gpu) const;
  const char* slice_name() const { return slice_name_; }
  // The timeline recorder's view (trace_recorder.h): the slice's trace request word in the
  // ledger (nullptr while not active), the ledger's directory and the slice's index.
  const std::atomic<uint32_t>* TraceRequestWord() const {
    return active() ? ledger_.TraceRequestWord(slice_.load(std::memory_order_acquire)) : nullptr;
  }
  const char* ledger_path() const { return ledger_.path(); }
  int slice_index() const { return slice_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> active_{false};
  bool attached_ = false;
  std::atomic<bool> shut_down_{false};
  Ledger ledger_;
  SliceHandle handle_;
  std::atomic<int> slice_{-1};  // set at Init, or later by a reader that found it (FindGpu)
  int limit_count_ = 0;
  int64_t limits_[kMaxDevices] = {};
  char slice_name_[kLedgerNameSize] = {};
};

}  // namespace gslice::shim
