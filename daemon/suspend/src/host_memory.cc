#include "gslice/suspend/host_memory.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <utility>

#include "gslice/units.h"

namespace gslice::suspend {
namespace {

std::string Size(uint64_t bytes) {
  char buf[32];
  return FormatSize(bytes, buf, sizeof(buf));
}

}  // namespace

uint64_t ReadMemAvailable() {
  FILE* f = std::fopen("/proc/meminfo", "re");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kib = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "MemAvailable: %" SCNu64 " kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib * 1024;
}

HostMemoryBudget::HostMemoryBudget(HostMemoryOptions options,
                                   std::function<uint64_t()> available_bytes)
    : options_(options), available_bytes_(std::move(available_bytes)) {
  if (!available_bytes_) available_bytes_ = ReadMemAvailable;
}

Admission HostMemoryBudget::Check(uint64_t bytes) const {
  Admission a;
  if (options_.max_suspended_bytes != 0 &&
      held_ + in_flight_ + bytes > options_.max_suspended_bytes) {
    a.reason = "host memory: suspending " + Size(bytes) + " would bring suspended state to " +
               Size(held_ + in_flight_ + bytes) + ", over the cap of " +
               Size(options_.max_suspended_bytes) + " (suspend.max_host_memory); " +
               "resume or end a suspended process first";
    return a;
  }
  const uint64_t available = available_bytes_();
  const uint64_t spendable =
      available > in_flight_ + options_.reserve_bytes ? available - in_flight_ - options_.reserve_bytes : 0;
  if (bytes > spendable) {
    a.reason = "host memory: suspending " + Size(bytes) + " needs that much RAM; " +
               Size(available) + " available, " + Size(in_flight_) + " reserved by checkpoints "
               "in progress and " + Size(options_.reserve_bytes) + " kept free for the node";
    return a;
  }
  a.ok = true;
  return a;
}

Admission HostMemoryBudget::Reserve(uint64_t bytes) {
  Admission a = Check(bytes);
  if (a.ok) in_flight_ += bytes;
  return a;
}

void HostMemoryBudget::Commit(uint64_t bytes) {
  CancelReservation(bytes);
  held_ += bytes;
}

void HostMemoryBudget::CancelReservation(uint64_t bytes) {
  in_flight_ = in_flight_ > bytes ? in_flight_ - bytes : 0;
}

void HostMemoryBudget::Release(uint64_t bytes) { held_ = held_ > bytes ? held_ - bytes : 0; }

}  // namespace gslice::suspend
