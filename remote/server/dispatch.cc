#include "dispatch.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "gslice/nvml_subset.h"
#include "launch.h"
#include "shared_host.h"
#include "sizes.h"
#include "staging.h"

namespace gslice::remote {

void* g_driver[kOpCount] = {};

namespace {

// A host buffer for what the driver writes (out[...]); its size was bounded by the decoder.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() { std::free(p_); }
  bool Allocate(uint64_t n) {
    p_ = static_cast<uint8_t*>(std::calloc(n != 0 ? n : 1, 1));
    return p_ != nullptr;
  }
  uint8_t* data() { return p_; }

 private:
  uint8_t* p_ = nullptr;
};

// A buffer of length 0 is still a valid (non-NULL) pointer, as the caller's was.
uint8_t g_empty[8];
const void* NonNull(const uint8_t* p) { return p != nullptr ? static_cast<const void*>(p) : g_empty; }
void* NonNullOut(uint8_t* p) { return p != nullptr ? static_cast<void*>(p) : g_empty; }

CUresult NotInDriver(uint32_t op) {
  return kOpLibrary[op] == Library::kNvml ? static_cast<CUresult>(NVML_ERROR_NOT_SUPPORTED) : CUDA_ERROR_NOT_SUPPORTED;
}

// Asynchronous copies that carry host memory in the message complete before the answer.
CUresult SynchronizeStream(uint32_t sync_op, CUstream stream) {
  using Fn = CUresult (*)(CUstream);
  auto fn = reinterpret_cast<Fn>(g_driver[sync_op]);
  return fn != nullptr ? fn(stream) : CUDA_ERROR_NOT_SUPPORTED;
}

// Whether stream captures: a copy whose host buffer lives in the message is refused then (the
// captured copy would read the buffer at every replay, long after the message is gone).
bool StreamCapturing(uint32_t is_capturing_op, CUstream stream) {
  using Fn = CUresult (*)(CUstream, CUstreamCaptureStatus*);
  auto fn = reinterpret_cast<Fn>(g_driver[is_capturing_op]);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return fn != nullptr && fn(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// An NVML device handle as it travels: the device's index + 1 (0 is no device). False when
// the library cannot say (the call is then refused).
bool NvmlDeviceToWire(nvmlDevice_t* device) {
  using Fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);
  auto get_index = reinterpret_cast<Fn>(g_driver[kOp_nvmlDeviceGetIndex]);
  unsigned int index = 0;
  if (get_index == nullptr || get_index(*device, &index) != NVML_SUCCESS) return false;
  *device = reinterpret_cast<nvmlDevice_t>(static_cast<uintptr_t>(index) + 1);
  return true;
}

// The library's handle of a device as it travels; false for a value no handle maps to (a
// client's made-up handle is refused, never passed to NVML).
bool NvmlDeviceFromWire(nvmlDevice_t* device) {
  using Fn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
  auto by_index = reinterpret_cast<Fn>(g_driver[kOp_nvmlDeviceGetHandleByIndex_v2]);
  const uintptr_t wire = reinterpret_cast<uintptr_t>(*device);
  if (by_index == nullptr || wire == 0 || wire > 0xffffffffu) return false;
  return by_index(static_cast<unsigned int>(wire - 1), device) == NVML_SUCCESS;
}

}  // namespace

#include "server_calls.inc"

// ---- Custom calls (calls.def: custom).

// Resolves a driver entry point and answers with the symbol it is, so that the client can
// hand out its own export of it: i32 status, string symbol ("" when none).
CUresult Serve_cuGetProcAddress_v2(Reader& r, Writer& w) {
  using Fn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  uint64_t len = 0;
  const uint8_t* data = nullptr;
  int version = 0;
  cuuint64_t flags = 0;
  if (!(r.Get(&len) && len <= kMaxString && r.GetBytes(len, &data) && r.Get(&version) && r.Get(&flags) &&
        r.AtEnd())) {
    return kMalformed;
  }
  auto fn = reinterpret_cast<Fn>(g_driver[kOp_cuGetProcAddress_v2]);
  if (fn == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const std::string symbol(reinterpret_cast<const char*>(data), len);
  void* p = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const CUresult res = fn(symbol.c_str(), &p, version, flags, &status);
  std::string name;
  Dl_info info = {};
  if (res == CUDA_SUCCESS && p != nullptr && dladdr(p, &info) != 0 && info.dli_sname != nullptr &&
      info.dli_saddr == p) {
    name = info.dli_sname;
  }
  w.Put<int32_t>(status);
  w.PutString(name);
  return res;
}

bool DriverKernelArguments::Read(Reader* r) {
  LaunchParams in;
  return DecodeLaunchParams(r, &in) && Lay(in);
}

bool DriverKernelArguments::Lay(const LaunchParams& in) {
  which_ = in.which;
  if (in.which & kLaunchKernelParams) {
    // Each parameter at a 16-byte aligned offset of one buffer (the driver reads them through
    // the pointers; alignment keeps any type's load legal).
    uint64_t total = 0;
    for (const auto& [data, size] : in.params) {
      total += (size + 15) / 16 * 16;
      if (total > 2 * kMaxParamBytes) return false;
    }
    storage_.assign(total / 8 + 2, 0);
    params_.reserve(in.params.size() + 1);
    auto* base = reinterpret_cast<uint8_t*>(storage_.data());
    uint64_t at = 0;
    for (const auto& [data, size] : in.params) {
      if (size != 0) std::memcpy(base + at, data, size);
      params_.push_back(base + at);
      at += (size + 15) / 16 * 16;
    }
    params_.push_back(nullptr);
  }
  if (in.which & kLaunchExtra) {
    extra_storage_.assign(in.extra_bytes / 8 + 2, 0);
    if (in.extra_bytes != 0) std::memcpy(extra_storage_.data(), in.extra, in.extra_bytes);
    extra_[1] = extra_storage_.data();
    extra_size_ = in.extra_bytes;
  }
  return true;
}

namespace {

// A launch (launch.h).
CUresult ServeLaunch(uint32_t op, Reader& r) {
  LaunchConfig c;
  std::vector<CUlaunchAttribute> attrs;
  DriverKernelArguments arguments;
  if (!DecodeLaunchConfig(&r, &c, &attrs) || !arguments.Read(&r) || !r.AtEnd()) return kMalformed;
  void** p = arguments.params();
  void** e = arguments.extra();
  if (g_driver[op] == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  if (op == kOp_cuLaunchKernelEx || op == kOp_cuLaunchKernelEx_ptsz) {
    using Fn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
    const CUlaunchConfig config = ToDriverConfig(c);
    return reinterpret_cast<Fn>(g_driver[op])(&config, c.f, p, e);
  }
  if (c.num_attrs != 0) return kMalformed;
  using Fn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                          void**, void**);
  return reinterpret_cast<Fn>(g_driver[op])(c.f, c.dims[0], c.dims[1], c.dims[2], c.dims[3], c.dims[4], c.dims[5],
                                           c.dims[6], c.stream, p, e);
}

}  // namespace

// Cluster occupancy (cuOccupancyMaxActiveClusters, MaxPotentialClusterSize): the launch
// configuration (launch.h); answers i32.
CUresult ServeClusterQuery(uint32_t op, Reader& r, Writer& w) {
  LaunchConfig c;
  std::vector<CUlaunchAttribute> attrs;
  if (!DecodeLaunchConfig(&r, &c, &attrs) || !r.AtEnd()) return kMalformed;
  using Fn = CUresult (*)(int*, CUfunction, const CUlaunchConfig*);
  auto fn = reinterpret_cast<Fn>(g_driver[op]);
  if (fn == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const CUlaunchConfig config = ToDriverConfig(c);
  int value = 0;
  const CUresult res = fn(&value, c.f, &config);
  w.Put<int32_t>(value);
  return res;
}

CUresult Serve_cuOccupancyMaxActiveClusters(Reader& r, Writer& w) {
  return ServeClusterQuery(kOp_cuOccupancyMaxActiveClusters, r, w);
}
CUresult Serve_cuOccupancyMaxPotentialClusterSize(Reader& r, Writer& w) {
  return ServeClusterQuery(kOp_cuOccupancyMaxPotentialClusterSize, r, w);
}

CUresult Serve_cuLaunchKernel(Reader& r, Writer&) { return ServeLaunch(kOp_cuLaunchKernel, r); }
CUresult Serve_cuLaunchKernel_ptsz(Reader& r, Writer&) { return ServeLaunch(kOp_cuLaunchKernel_ptsz, r); }
CUresult Serve_cuLaunchKernelEx(Reader& r, Writer&) { return ServeLaunch(kOp_cuLaunchKernelEx, r); }
CUresult Serve_cuLaunchKernelEx_ptsz(Reader& r, Writer&) { return ServeLaunch(kOp_cuLaunchKernelEx_ptsz, r); }

namespace {

int LoadLibrary(void* handle, Library library) {
  int found = 0;
  for (uint32_t op = 0; op < kOpCount; ++op) {
    if (kOpLibrary[op] != library) continue;
    g_driver[op] = kOpKinds[op] == CallKind::kLocal ? nullptr : dlsym(handle, kOpNames[op]);
    if (g_driver[op] != nullptr) ++found;
  }
  return found;
}

}  // namespace

int LoadDriver(void* handle) { return LoadLibrary(handle, Library::kCuda); }
int LoadNvml(void* handle) { return LoadLibrary(handle, Library::kNvml); }

namespace {
std::mutex g_nvml_init_mu;
bool g_nvml_init_pending = false;  // REQUIRES g_nvml_init_mu

void InitNvmlIfPending(uint32_t op) {
  std::lock_guard<std::mutex> lock(g_nvml_init_mu);
  if (!g_nvml_init_pending) return;
  g_nvml_init_pending = false;
  if (op == kOp_nvmlInit_v2 || op == kOp_nvmlInit || op == kOp_nvmlInitWithFlags) return;
  using Fn = nvmlReturn_t (*)();
  if (auto init = reinterpret_cast<Fn>(g_driver[kOp_nvmlInit_v2]); init != nullptr) init();
}
}  // namespace

void InitNvmlBeforeFirstCall() {
  std::lock_guard<std::mutex> lock(g_nvml_init_mu);
  g_nvml_init_pending = true;
}

Dispatched Dispatch(uint32_t op, Reader& in, Writer& out) {
  if (op >= kOpCount || kHandlers[op] == nullptr) return Dispatched::kUnknownOp;
  if (kOpLibrary[op] == Library::kNvml) InitNvmlIfPending(op);
  const size_t at = out.size();
  out.Put<int32_t>(CUDA_SUCCESS);
  CUresult res = kHandlers[op](in, out);
  const bool ok = res != kMalformed;
  if (!ok) {
    out.buffer().resize(at + sizeof(int32_t));
    res = kOpLibrary[op] == Library::kNvml ? static_cast<CUresult>(NVML_ERROR_INVALID_ARGUMENT)
                                           : CUDA_ERROR_INVALID_VALUE;
  }
  const int32_t value = res;
  std::memcpy(out.buffer().data() + at, &value, sizeof value);
  return ok ? Dispatched::kAnswered : Dispatched::kRefused;
}

}  // namespace gslice::remote
