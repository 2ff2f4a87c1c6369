#include "probe.h"

#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "attach.h"
#include "dispatch.h"
#include "gslice/nvml_subset.h"
#include "gslice/units.h"
#include "socket_io.h"

namespace gslice::remote {
namespace {

bool SendHelloReply(const Channel& c, const HelloReply& reply) {
  Writer w;
  EncodeHelloReply(reply, &w);
  return WriteFrame(c, FrameHeader{.seq = 0, .op = kOpProbe | kReplyBit}, w.buffer().data(), w.size());
}

// The slice's memory on device `dev` (the k-th size of a per-device list, or the one size),
// or 0 when it cannot be told (the worker's `gslice run` refuses such a slice anyway).
uint64_t SliceMemory(const std::string& memory, int dev) {
  std::vector<std::string> items;
  size_t start = 0;
  for (;;) {
    size_t comma = memory.find(',', start);
    items.push_back(memory.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  const std::string& item = items.size() == 1 ? items[0] : (dev >= 0 && static_cast<size_t>(dev) < items.size()
                                                                 ? items[static_cast<size_t>(dev)]
                                                                 : std::string());
  ParsedSize p = ParseSize(item);
  return p.ok ? p.bytes : 0;
}

// NVML as a worker's shim would answer it before its first allocation. The probe serves one
// client, so the slice's sizes are this process's.
std::string g_memory;
using MemoryInfoFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using MemoryInfoV2Fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*);
MemoryInfoFn g_memory_info = nullptr;
MemoryInfoV2Fn g_memory_info_v2 = nullptr;

// The slice's memory on the device of `device` (0: unknown; the device's is reported).
uint64_t SliceMemoryOf(nvmlDevice_t device) {
  using IndexFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);
  auto get_index = reinterpret_cast<IndexFn>(g_driver[kOp_nvmlDeviceGetIndex]);
  unsigned int index = 0;
  if (get_index == nullptr || get_index(device, &index) != NVML_SUCCESS) return 0;
  return SliceMemory(g_memory, static_cast<int>(index));
}

// total: the slice's (where less than the device's); used: none; free: the slice's, at most
// what the device has free.
template <typename Memory>
void AsSlice(nvmlDevice_t device, Memory* memory) {
  const uint64_t limit = SliceMemoryOf(device);
  if (limit == 0 || limit >= memory->total) return;
  memory->total = limit;
  memory->used = 0;
  if (memory->free > limit) memory->free = limit;
}

nvmlReturn_t SliceMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  const nvmlReturn_t r = g_memory_info(device, memory);
  if (r == NVML_SUCCESS && memory != nullptr) AsSlice(device, memory);
  return r;
}

nvmlReturn_t SliceMemoryInfoV2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
  const nvmlReturn_t r = g_memory_info_v2(device, memory);
  if (r == NVML_SUCCESS && memory != nullptr) {
    AsSlice(device, memory);
    if (SliceMemoryOf(device) != 0) memory->reserved = 0;
  }
  return r;
}

// The process lists of every variant: the client has no process on the GPU before its worker
// starts (and other users' processes are not its to see).
template <typename Info>
nvmlReturn_t NoProcesses(nvmlDevice_t, unsigned int* count, Info*) {
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = 0;
  return NVML_SUCCESS;
}

// Loads NVML into the dispatch table, its memory and process queries answered for the slice.
void LoadProbeNvml(const ProbeOptions& options) {
  void* nvml = dlopen(options.nvml.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr) {
    const char* why = dlerror();
    fprintf(stderr, "gslice-remoted[%d]: the probe cannot load %s (%s): NVML calls answer NVML_ERROR_NOT_SUPPORTED\n",
            static_cast<int>(getpid()), options.nvml.c_str(), why != nullptr ? why : "?");
    return;
  }
  LoadNvml(nvml);
  g_memory = options.memory;
  g_memory_info = reinterpret_cast<MemoryInfoFn>(g_driver[kOp_nvmlDeviceGetMemoryInfo]);
  g_memory_info_v2 = reinterpret_cast<MemoryInfoV2Fn>(g_driver[kOp_nvmlDeviceGetMemoryInfo_v2]);
  if (g_memory_info != nullptr) g_driver[kOp_nvmlDeviceGetMemoryInfo] = reinterpret_cast<void*>(&SliceMemoryInfo);
  if (g_memory_info_v2 != nullptr)
    g_driver[kOp_nvmlDeviceGetMemoryInfo_v2] = reinterpret_cast<void*>(&SliceMemoryInfoV2);
  for (uint32_t op : {kOp_nvmlDeviceGetComputeRunningProcesses_v3, kOp_nvmlDeviceGetComputeRunningProcesses_v2,
                      kOp_nvmlDeviceGetMPSComputeRunningProcesses_v3, kOp_nvmlDeviceGetGraphicsRunningProcesses_v3})
    g_driver[op] = reinterpret_cast<void*>(&NoProcesses<nvmlProcessInfo_t>);
  g_driver[kOp_nvmlDeviceGetComputeRunningProcesses] = reinterpret_cast<void*>(&NoProcesses<nvmlProcessInfo_v1_t>);
}

}  // namespace

int RunProbe(const Channel& c, const ProbeOptions& options) {
  void* driver = dlopen(options.driver.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    const char* why = dlerror();
    const std::string message = "the probe cannot load " + options.driver + ": " + (why != nullptr ? why : "?");
    fprintf(stderr, "gslice-remoted: %s\n", message.c_str());
    SendHelloReply(c, HelloReply{.status = 1, .worker_pid = 0, .message = message});
    return 1;
  }
  LoadDriver(driver);
  LoadProbeNvml(options);
  if (!SendHelloReply(c, HelloReply{.status = 0, .worker_pid = 0, .message = ""})) return 0;
  std::vector<uint8_t> payload;
  for (;;) {
    FrameHeader h;
    const FrameRead got = ReadFrame(c, kMaxString + 4096, &h, &payload);
    if (got == FrameRead::kClosed) return 0;
    if (got != FrameRead::kOk || !AnswersWithoutSlice(h.op)) {
      fprintf(stderr, "gslice-remoted[%d]: a probe asked for %s, which needs a slice: closing the connection\n",
              static_cast<int>(getpid()), h.op < kOpCount ? kOpNames[h.op] : "an unknown request");
      return 3;
    }
    Reader in(payload.data(), payload.size());
    Writer out;
    RequestPrefix prefix;
    if (!DecodeRequestPrefix(&in, &prefix)) {
      out.Put<int32_t>(CUDA_ERROR_INVALID_VALUE);
    } else {
      // Device queries take no context: the probe has none to make current.
      Reader args = in;
      if (Dispatch(h.op, in, out) == Dispatched::kUnknownOp) return 3;
      int32_t result = CUDA_SUCCESS;
      std::memcpy(&result, out.buffer().data(), sizeof result);
      if (h.op == kOp_cuDeviceTotalMem_v2 && result == CUDA_SUCCESS) {
        // The request: u8 bytes-present flag, CUdevice dev; the reply: i32 result, size_t bytes.
        uint8_t present = 0;
        CUdevice dev = 0;
        size_t bytes = 0;
        if (args.GetFlag(&present) && args.Get(&dev) && out.size() == sizeof(int32_t) + sizeof bytes) {
          std::memcpy(&bytes, out.buffer().data() + sizeof(int32_t), sizeof bytes);
          const uint64_t limit = SliceMemory(options.memory, dev);
          if (limit != 0 && limit < bytes) {
            bytes = static_cast<size_t>(limit);
            std::memcpy(out.buffer().data() + sizeof(int32_t), &bytes, sizeof bytes);
          }
        }
      }
    }
    if (!WriteFrame(c, FrameHeader{.seq = h.seq, .op = h.op | kReplyBit}, out.buffer().data(), out.size())) return 0;
  }
}

}  // namespace gslice::remote
