// The shim's own bookkeeping per cuMemAlloc+cuMemFree, isolated from the driver: ledger
// charge (fetch_add + sum over the slice's slots) + allocation-table insert, then table erase
// + ledger release, exactly the calls the hooks make. P processes at once on ONE slice (the
// contended case: their counters share cache lines and each charge reads them all).
// Prints the median nanoseconds per pair over batches, the median over processes.
//
//   gslice_interpose_ledger_bench [PROCS=8] [PAIRS=200000]
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "allocation_table.h"
#include "gslice/clock.h"
#include "gslice/ledger.h"

namespace {
}  // namespace

int main(int argc, char** argv) {
  using namespace gslice;
  const int procs = argc > 1 ? atoi(argv[1]) : 8;
  const int pairs = argc > 2 ? atoi(argv[2]) : 200000;
  const std::string path = "/dev/shm/gslice-ledger-bench-" + std::to_string(getpid());
  std::filesystem::remove_all(path);
  auto* results = static_cast<double*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  const uint8_t uuid[16] = {0x47, 0x53};
  std::vector<pid_t> kids;
  for (int p = 0; p < procs; ++p) {
    pid_t pid = fork();
    if (pid == 0) {
      Ledger ledger;
      if (ledger.Open(path.c_str()) != LedgerError::kOk) _exit(2);
      SliceHandle h;
      const uint32_t me = static_cast<uint32_t>(getpid());
      if (ledger.AttachByName("bench", SliceClass::kGuaranteed, 0, me, ProcessStartTime(me), &h) != LedgerError::kOk) _exit(3);
      int gpu = -1;
      if (ledger.FindOrAddGpu(h.slice, uuid, int64_t{1} << 50, &gpu) != LedgerError::kOk) _exit(4);
      shim::AllocationTable table;
      constexpr int kBatch = 1000;
      std::vector<double> batches;
      uint64_t key = 0x7f0000000000ull + (static_cast<uint64_t>(p) << 32);
      for (int b = 0; b < pairs / kBatch; ++b) {
        int64_t t0 = gslice::MonotonicNs();
        for (int i = 0; i < kBatch; ++i) {
          key += 2 << 20;
          if (ledger.Charge(h, gpu, 2 << 20) != ChargeResult::kOk) _exit(5);
          table.Insert(key, shim::AllocKind::kLinear, shim::AllocRecord{2 << 20, gpu});
          shim::AllocRecord rec;
          table.Erase(key, shim::AllocKind::kLinear, &rec);
          ledger.Release(h, rec.gpu, rec.bytes);
        }
        batches.push_back(static_cast<double>(gslice::MonotonicNs() - t0) / kBatch);
      }
      std::sort(batches.begin(), batches.end());
      results[p] = batches[batches.size() / 2];
      ledger.Detach(h);
      _exit(0);
    }
    kids.push_back(pid);
  }
  int failed = 0;
  for (pid_t k : kids) {
    int st = 0;
    waitpid(k, &st, 0);
    failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  std::filesystem::remove_all(path);
  if (failed) {
    fprintf(stderr, "ledger bench: %d processes failed\n", failed);
    return 1;
  }
  std::vector<double> r(results, results + procs);
  std::sort(r.begin(), r.end());
  printf("%.1f\n", r[r.size() / 2]);
  return 0;
}
