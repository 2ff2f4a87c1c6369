// What nvidia-smi asks of NVML that the client answers itself: event sets (created and freed;
// no event is registered in them, nvmlDeviceRegisterEvents is not forwarded) and NVML's private
// table (nvmlInternalGetExportTable). Without it nvidia-smi stops at once ("Mismatch in versions between nvidia-smi and
// NVML"). Measured on an H100 with driver 580.159.04 (bench/gpu/remote/nvml_table_log.sh,
// bench/results/remote-nvml-table-h100-2026-11-26.md): the table with UUID
// 6c3efec4-8fc9-4e6c-a327-ee696e12f7c4 is a size word (2160: 270 words) and 269 slots, 218 of
// them code; nvidia-smi calls these:
//   26      (const char* format, ...): a log line of its own; answered: nothing, success
//   81      (unsigned index, char* buffer, unsigned length): the device's PCI bus id,
//           "0000:00:06.0" (the legacy form); answered from the forwarded PCI information
//   213-215 (nvmlDevice_t, unsigned* count, entries, ...): the compute, graphics and MPS
//           processes, count in = capacity, out = number; each entry 4128 bytes: u32 pid,
//           u32 0, u64 used memory, u32 GPU instance, u32 compute instance, u64 0, then the
//           process's command line (4096 bytes, NUL-separated arguments); answered from the
//           forwarded public process lists and the process names the worker's NVML gives
//   230-232, 237, 249 (nvidia-smi -q): details of the board, not answered
// Every other code slot of the table is answered NVML_ERROR_NOT_SUPPORTED with one log line
// naming it; the words that held no code are null, as they did. Another table UUID is
// NVML_ERROR_FUNCTION_NOT_FOUND, logged. A table's UUID names its layout (as the driver's
// tables do for cudart): an nvidia-smi that expects another layout asks another UUID, which is
// refused, so no slot is ever called with arguments it was not measured with.
#include <stdarg.h>
#include <string.h>

#include <array>
#include <atomic>
#include <new>
#include <cstdint>
#include <utility>
#include <vector>

#include "gslice/nvml_subset.h"
#include "log.h"
#include "nvml_client_calls.h"

namespace gslice::remote {
namespace {

using shim::Log;
using shim::LogLevel;

constexpr uint8_t kSmiTable[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
                                   0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};
constexpr int kSlots = 269;  // after the size word
// The words of the driver's table that hold no code (measured): null here too.
constexpr int kNoCode[] = {1, 2, 24, 35, 42, 43, 57, 58, 60, 64, 65, 90, 104, 121, 122, 139, 150,
                           157, 158, 159, 160, 161, 162, 163, 167, 170, 174, 176, 177, 178, 187,
                           190, 191, 198, 201, 202, 207, 211, 216, 217, 226, 235, 236, 240, 241,
                           242, 258, 259, 264, 265, 266};

// One process entry of slots 213-215.
struct SmiProcess {
  uint32_t pid;
  uint32_t zero;
  uint64_t used_memory;
  uint32_t gpu_instance;
  uint32_t compute_instance;
  uint64_t zero2;
  char command[4096];
};
static_assert(sizeof(SmiProcess) == 4128);

std::atomic<bool> g_reported[kSlots + 1];

nvmlReturn_t NotAnswered(int slot) {
  if (!g_reported[slot].exchange(true, std::memory_order_relaxed)) {
    shim::InitLog();
    Log(LogLevel::kWarn, "remote: NVML's private table 6c3efec4 slot %d is not answered: NVML_ERROR_NOT_SUPPORTED",
        slot);
  }
  return NVML_ERROR_NOT_SUPPORTED;
}

template <int Slot>
nvmlReturn_t NotAnsweredAt() {
  return NotAnswered(Slot);
}

template <int... Slots>
auto MakeNotAnswered(std::integer_sequence<int, Slots...>) {
  return std::array<void*, sizeof...(Slots)>{reinterpret_cast<void*>(&NotAnsweredAt<Slots>)...};
}

nvmlReturn_t SmiLog(const char*, ...) { return NVML_SUCCESS; }

nvmlReturn_t SmiBusId(unsigned int index, char* buffer, unsigned int length) {
  if (buffer == nullptr || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlDevice_t device = nullptr;
  nvmlPciInfo_t pci = {};
  nvmlReturn_t r = gslice_remote_call_nvmlDeviceGetHandleByIndex_v2(index, &device);
  if (r == NVML_SUCCESS) r = gslice_remote_call_nvmlDeviceGetPciInfo_v3(device, &pci);
  if (r != NVML_SUCCESS) return r;
  const size_t n = strnlen(pci.busIdLegacy, sizeof pci.busIdLegacy);
  if (n + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(buffer, pci.busIdLegacy, n);
  buffer[n] = '\0';
  return NVML_SUCCESS;
}

using ListFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*);

nvmlReturn_t SmiProcesses(ListFn list, nvmlDevice_t device, unsigned int* count, SmiProcess* entries) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const unsigned int capacity = *count;
  unsigned int n = 0;
  nvmlReturn_t r = list(device, &n, nullptr);
  std::vector<nvmlProcessInfo_t> infos;
  while (r == NVML_ERROR_INSUFFICIENT_SIZE && n <= 4096) {
    infos.resize(n);
    r = list(device, &n, infos.data());
    if (r == NVML_SUCCESS) infos.resize(n);
  }
  if (r != NVML_SUCCESS) return r;
  *count = n;
  if (n > capacity || (n > 0 && entries == nullptr)) return NVML_ERROR_INSUFFICIENT_SIZE;
  for (unsigned int i = 0; i < n; ++i) {
    SmiProcess& e = entries[i];
    memset(&e, 0, sizeof e);
    e.pid = infos[i].pid;
    e.used_memory = infos[i].usedGpuMemory;
    e.gpu_instance = infos[i].gpuInstanceId;
    e.compute_instance = infos[i].computeInstanceId;
    if (gslice_remote_call_nvmlSystemGetProcessName(e.pid, e.command, sizeof e.command) != NVML_SUCCESS) {
      e.command[0] = '\0';
    }
    e.command[sizeof e.command - 1] = '\0';
  }
  return NVML_SUCCESS;
}

nvmlReturn_t SmiCompute(nvmlDevice_t d, unsigned int* c, SmiProcess* e) {
  return SmiProcesses(&gslice_remote_call_nvmlDeviceGetComputeRunningProcesses_v3, d, c, e);
}
nvmlReturn_t SmiGraphics(nvmlDevice_t d, unsigned int* c, SmiProcess* e) {
  return SmiProcesses(&gslice_remote_call_nvmlDeviceGetGraphicsRunningProcesses_v3, d, c, e);
}
nvmlReturn_t SmiMps(nvmlDevice_t d, unsigned int* c, SmiProcess* e) {
  return SmiProcesses(&gslice_remote_call_nvmlDeviceGetMPSComputeRunningProcesses_v3, d, c, e);
}

struct SmiTable {
  uint64_t size;
  void* slots[kSlots];
};

const SmiTable* BuildSmiTable() {
  static SmiTable table = [] {
    SmiTable t{};
    t.size = sizeof t;
    static const auto not_answered = MakeNotAnswered(std::make_integer_sequence<int, kSlots + 1>{});
    for (int slot = 1; slot <= kSlots; ++slot) t.slots[slot - 1] = not_answered[static_cast<size_t>(slot)];
    for (int slot : kNoCode) t.slots[slot - 1] = nullptr;
    t.slots[26 - 1] = reinterpret_cast<void*>(&SmiLog);
    t.slots[81 - 1] = reinterpret_cast<void*>(&SmiBusId);
    t.slots[213 - 1] = reinterpret_cast<void*>(&SmiCompute);
    t.slots[214 - 1] = reinterpret_cast<void*>(&SmiGraphics);
    t.slots[215 - 1] = reinterpret_cast<void*>(&SmiMps);
    return t;
  }();
  static_assert(sizeof(SmiTable) == 2160);
  return &table;
}

}  // namespace
}  // namespace gslice::remote

extern "C" nvmlReturn_t gslice_remote_call_nvmlInternalGetExportTable(const void** table, const void* id) {
  using namespace gslice::remote;
  if (table == nullptr || id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (memcmp(id, kSmiTable, sizeof kSmiTable) == 0) {
    *table = BuildSmiTable();
    return NVML_SUCCESS;
  }
  uint8_t u[16];
  memcpy(u, id, sizeof u);
  gslice::shim::InitLog();
  gslice::shim::Log(gslice::shim::LogLevel::kWarn,
      "remote: nvmlInternalGetExportTable(%02x%02x%02x%02x-%02x%02x-...): a private table this client does not know: "
      "NVML_ERROR_FUNCTION_NOT_FOUND",
      u[0], u[1], u[2], u[3], u[4], u[5]);
  *table = nullptr;
  return NVML_ERROR_FUNCTION_NOT_FOUND;
}

// An event set with no events in it: nvidia-smi makes one before it reads the devices.
struct nvmlEventSet_st {
  int unused;
};

extern "C" nvmlReturn_t gslice_remote_call_nvmlEventSetCreate(nvmlEventSet_t* set) {
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *set = new (std::nothrow) nvmlEventSet_st{};
  return *set != nullptr ? NVML_SUCCESS : NVML_ERROR_MEMORY;
}

extern "C" nvmlReturn_t gslice_remote_call_nvmlEventSetFree(nvmlEventSet_t set) {
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  delete set;
  return NVML_SUCCESS;
}
