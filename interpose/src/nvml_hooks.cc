// The libnvidia-ml.so.1 shim: load-time setup and the hooks in interpose/nvml_hooks.def.
// Memory queries report the slice: total = the slice's limit on that GPU, used = the slice's
// usage (from the node ledger), free = total - used, never more than the GPU really has free.
// GPUs outside the slice, and every other query, are the real NVML's answers.
#include <stdlib.h>
#include <string.h>

#include <new>

#include "gslice/nvml_subset.h"
#include "gslice/options.h"
#include "gslice/shrink_guard.h"
#include "log.h"
#include "nvml_exports.h"
#include "real_library.h"
#include "slice_account.h"

#define GSLICE_EXPORT extern "C" __attribute__((visibility("hidden")))

namespace gslice::shim {
namespace {

namespace ex = nvml_exports;

void* g_real[ex::kCount];
RealLibrary g_real_library;
alignas(SliceAccount) unsigned char g_account_storage[sizeof(SliceAccount)];
SliceAccount* g_account = nullptr;

#define REAL(sym) (reinterpret_cast<decltype(&gslice_hook_##sym)>(g_real[ex::kSlot_##sym]))

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "GPU-8c4a6e2f-1b3d-..." -> 16 bytes. False when malformed.
bool ParseUuid(const char* text, uint8_t out[16]) {
  const char* p = text;
  if (strncmp(p, "GPU-", 4) == 0) p += 4;
  else if (strncmp(p, "MIG-", 4) == 0) p += 4;
  int n = 0;
  while (*p != '\0' && n < 16) {
    if (*p == '-') {
      ++p;
      continue;
    }
    int hi = HexValue(p[0]);
    int lo = hi < 0 ? -1 : HexValue(p[1]);
    if (hi < 0 || lo < 0) return false;
    out[n++] = static_cast<uint8_t>(hi << 4 | lo);
    p += 2;
  }
  return n == 16;
}

// Position of this device among CUDA_VISIBLE_DEVICES (the ordinal GSLICE_MEMORY's list
// refers to), or -1 when the device is not visible to CUDA programs of the slice.
int VisibleOrdinal(nvmlDevice_t device, const char* uuid_text) {
  unsigned int index = 0;
  auto get_index = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned int*)>(g_real[ex::kSlot_nvmlDeviceGetIndex]);
  bool have_index = get_index(device, &index) == NVML_SUCCESS;
  const char* visible = getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) return have_index ? static_cast<int>(index) : -1;
  int ordinal = 0;
  const char* p = visible;
  while (*p != '\0') {
    const char* end = strchr(p, ',');
    size_t len = end != nullptr ? static_cast<size_t>(end - p) : strlen(p);
    if (len > 0 && p[0] >= '0' && p[0] <= '9') {
      if (have_index && strtoul(p, nullptr, 10) == index) return ordinal;
    } else if (len > 0 && strncmp(uuid_text, p, len) == 0) {
      return ordinal;  // a UUID or a unique prefix of one
    }
    ++ordinal;
    if (end == nullptr) break;
    p = end + 1;
  }
  return -1;
}

// The slice's (limit, used) on this device; false when the device is not limited.
bool SliceMemory(nvmlDevice_t device, int64_t* limit, int64_t* used) {
  if (g_account == nullptr || !g_account->active()) return false;
  char uuid_text[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  auto get_uuid = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int)>(g_real[ex::kSlot_nvmlDeviceGetUUID]);
  if (get_uuid(device, uuid_text, sizeof uuid_text) != NVML_SUCCESS) return false;
  uint8_t uuid[16];
  if (!ParseUuid(uuid_text, uuid)) return false;
  int gpu = g_account->FindGpu(uuid);
  if (gpu >= 0) {
    *limit = g_account->Limit(gpu);
    *used = g_account->Usage(gpu);
    return *limit >= 0;
  }
  // No CUDA process of the slice has used this GPU yet: the environment's limit, nothing used.
  int ordinal = VisibleOrdinal(device, uuid_text);
  *limit = g_account->LimitForOrdinal(ordinal);
  *used = 0;
  return ordinal >= 0 && *limit >= 0;
}

}  // namespace
}  // namespace gslice::shim

using namespace gslice;
using namespace gslice::shim;

GSLICE_EXPORT nvmlReturn_t gslice_hook_nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  nvmlReturn_t r = REAL(nvmlDeviceGetMemoryInfo)(device, memory);
  int64_t limit = 0, used = 0;
  if (r != NVML_SUCCESS || memory == nullptr || !SliceMemory(device, &limit, &used)) return r;
  unsigned long long real_free = memory->free;
  unsigned long long total = static_cast<unsigned long long>(limit);
  unsigned long long u = static_cast<unsigned long long>(used < 0 ? 0 : used);
  if (u > total) u = total;
  memory->total = total;
  memory->used = u;
  memory->free = total - u < real_free ? total - u : real_free;
  return r;
}

GSLICE_EXPORT nvmlReturn_t gslice_hook_nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  nvmlReturn_t r = REAL(nvmlDeviceGetMemoryInfo_v2)(device, memory);
  int64_t limit = 0, used = 0;
  if (r != NVML_SUCCESS || memory == nullptr || !SliceMemory(device, &limit, &used)) return r;
  unsigned long long real_free = memory->free;
  unsigned long long total = static_cast<unsigned long long>(limit);
  unsigned long long u = static_cast<unsigned long long>(used < 0 ? 0 : used);
  if (u > total) u = total;
  memory->total = total;
  memory->reserved = 0;
  memory->used = u;
  memory->free = total - u < real_free ? total - u : real_free;
  return r;
}

namespace {

struct HookEntry {
  int slot;
  void* hook;
};

const HookEntry kHookEntries[] = {
#define GSLICE_HOOK(sym) {ex::kSlot_##sym, reinterpret_cast<void*>(&gslice_hook_##sym)},
#include "nvml_hooks.def"
#undef GSLICE_HOOK
};
static_assert(sizeof(kHookEntries) / sizeof(kHookEntries[0]) == ex::kHookCount);

__attribute__((constructor)) void GsliceNvmlShimInit() {
  ForbidShrinkGuard();  // the application's signal handlers are its own (shrink_guard.h)
  InitLog();
  LoadRealLibrary("libnvidia-ml.so.1", OptionValue(Option::RealNvml), "GSLICE_REAL_NVML",
                  reinterpret_cast<const void*>(&GsliceNvmlShimInit), &g_real_library);
  FillSlots(g_real_library.handle, ex::kNames, ex::kCount, gslice_nvml_slots, g_real,
            reinterpret_cast<void*>(&gslice_nvml_unsupported));
  for (const HookEntry& h : kHookEntries) __atomic_store_n(&gslice_nvml_slots[h.slot], h.hook, __ATOMIC_RELEASE);
  g_account = new (g_account_storage) SliceAccount();
  g_account->Init(/*attach=*/false);
}

}  // namespace
