// A test fixture that uses a slice the way a shimmed CUDA process does, without a GPU or
// a CUDA program: it attaches to the slice in the node ledger, charges device memory in
// steps (as allocations would), and publishes a launch-gate entry whose busy time grows
// at the given fraction of wall time (as the compute gate's GPU-time meter would). It runs
// until SIGTERM. gsliced's browser test uses it to give the dashboard live data.
//
// usage: gslice_test_slice_user LEDGER SLICE GPU_UUID BYTES BUSY_FRACTION [opportunistic]
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gslice/clock.h"
#include "gslice/ledger.h"

namespace {

std::atomic<bool> g_stop{false};

bool ParseUuid(std::string text, uint8_t out[16]) {
  if (text.rfind("GPU-", 0) == 0) text = text.substr(4);
  std::string hex;
  for (char c : text) {
    if (c != '-') hex += c;
  }
  if (hex.size() != 32) return false;
  for (int i = 0; i < 16; ++i) out[i] = static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gslice;
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s LEDGER SLICE GPU_UUID BYTES BUSY_FRACTION [opportunistic]\n", argv[0]);
    return 2;
  }
  signal(SIGTERM, [](int) { g_stop = true; });
  signal(SIGINT, [](int) { g_stop = true; });
  const bool opportunistic = argc > 6 && std::strcmp(argv[6], "opportunistic") == 0;
  const SliceClass cls = opportunistic ? SliceClass::kOpportunistic : SliceClass::kGuaranteed;
  const int64_t bytes = std::atoll(argv[4]);
  const double busy = std::atof(argv[5]);
  uint8_t uuid[16];
  if (!ParseUuid(argv[3], uuid)) {
    std::fprintf(stderr, "bad GPU UUID %s\n", argv[3]);
    return 2;
  }
  Ledger ledger;
  if (ledger.Open(argv[1]) != LedgerError::kOk) return 1;
  const uint32_t pid = static_cast<uint32_t>(getpid());
  SliceHandle h;
  if (ledger.AttachByName(argv[2], cls, kSliceEphemeral, pid, ProcessStartTime(pid), &h) != LedgerError::kOk) {
    std::fprintf(stderr, "cannot attach to slice %s\n", argv[2]);
    return 1;
  }
  int gpu = -1;
  if (ledger.FindOrAddGpu(h.slice, uuid, -1, &gpu) != LedgerError::kOk) return 1;
  // A launch-gate entry for this process on the GPU.
  LedgerComputeEntry* entry = nullptr;
  for (int i = h.slice * kLedgerSliceComputeEntries; i < (h.slice + 1) * kLedgerSliceComputeEntries; ++i) {
    LedgerComputeEntry& e = *ledger.ComputeEntry(i);
    uint64_t expected = PackState(EntryState::kFree, 0);
    if (e.state.compare_exchange_strong(expected, PackState(EntryState::kClaiming, pid))) {
      if (!ledger.AcquireComputeEntry(i)) {
        e.state.store(PackState(EntryState::kFree, 0));
        continue;
      }
      std::memcpy(e.uuid, uuid, 16);
      e.slice_class.store(static_cast<uint32_t>(cls));
      e.share_permille.store(500);
      e.vtime_ns.store(0);
      e.state.store(PackState(EntryState::kAlive, pid));
      entry = &e;
      break;
    }
  }
  const int64_t start = MonotonicNs();
  int64_t charged = 0;
  while (!g_stop) {
    const int64_t now = MonotonicNs();
    // Memory ramps up over four seconds, then holds.
    const double ramp = std::min(1.0, static_cast<double>(now - start) / 4e9);
    const int64_t want = static_cast<int64_t>(static_cast<double>(bytes) * ramp) & ~int64_t{(1 << 20) - 1};
    if (want > charged && ledger.Charge(h, gpu, want - charged) == ChargeResult::kOk) charged = want;
    if (entry != nullptr) {
      // Virtual time, as the gate keeps it: busy time * 1000 / share.
      entry->vtime_ns.store(static_cast<int64_t>(static_cast<double>(now - start) * busy * 1000 / 500));
      entry->active_until_ns.store(now + 500'000'000);
    }
    usleep(100'000);
  }
  if (entry != nullptr) entry->state.store(PackState(EntryState::kFree, 0));
  ledger.Detach(h);
  return 0;
}
