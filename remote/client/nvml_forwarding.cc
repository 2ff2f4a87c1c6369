// The forwarding libnvidia-ml.so.1: nvidia-smi and NVML users on a machine with no GPU see the
// remote slice. Its exports are the shim's generated trampolines (interpose/gen_exports.py,
// prefix remote_nvml) over NVML's export list; the calls of remote/nvml_calls.def are generated
// (gen_calls.py) and travel on the forwarding libcuda.so.1's connection - the libcuda.so.1 of
// this library's own folder, loaded on the first call - so that they reach the same worker, in
// the same slice, as the program's CUDA calls. Every other export logs its name once and
// returns NVML_ERROR_NOT_SUPPORTED. Runs inside applications: libc only, no exceptions.
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <string>
#include <utility>

#include "calls.h"
#include "connection.h"
#include "gslice/nvml_subset.h"
#include "log.h"
#include "remote_nvml_exports.h"
#include "sizes.h"
#include "wire.h"

namespace gslice::remote {

using shim::Log;
using shim::LogLevel;

namespace {

using ExchangeFn = int (*)(uint32_t, const void*, size_t, int32_t*, void**, size_t*);
using MalformedFn = void (*)(uint32_t);

struct Transport {
  ExchangeFn exchange = nullptr;
  MalformedFn malformed = nullptr;
};

pthread_once_t g_once = PTHREAD_ONCE_INIT;
Transport g_transport;

// The forwarding libcuda.so.1 beside this library (never a driver's: only ours has the
// connection).
void FindTransport() {
  shim::InitLog();
  Dl_info info = {};
  if (dladdr(reinterpret_cast<void*>(&FindTransport), &info) == 0 || info.dli_fname == nullptr) {
    Log(LogLevel::kError, "remote: libnvidia-ml.so.1 cannot tell its own folder: NVML calls fail");
    return;
  }
  std::string path = info.dli_fname;
  path = path.substr(0, path.rfind('/') + 1) + "libcuda.so.1";
  void* handle = dlopen(path.c_str(), RTLD_NOW);
  if (handle != nullptr) {
    g_transport.exchange = reinterpret_cast<ExchangeFn>(dlsym(handle, "gslice_remote_exchange"));
    g_transport.malformed = reinterpret_cast<MalformedFn>(dlsym(handle, "gslice_remote_malformed"));
  }
  if (g_transport.exchange == nullptr || g_transport.malformed == nullptr) {
    const char* why = handle == nullptr ? dlerror() : "not gslice's forwarding libcuda.so.1";
    Log(LogLevel::kError, "remote: libnvidia-ml.so.1 forwards through %s, which it cannot use (%s): NVML calls "
        "return NVML_ERROR_LIBRARY_NOT_FOUND", path.c_str(), why != nullptr ? why : "?");
    g_transport = Transport{};
  }
}

}  // namespace

// A request of the NVML client and its reply, as Call is for driver calls (call.h).
class NvmlCall {
 public:
  explicit NvmlCall(uint32_t op) : op_(op) { request_.Put<uint64_t>(0); }  // the context slot
  NvmlCall(const NvmlCall&) = delete;
  NvmlCall& operator=(const NvmlCall&) = delete;
  ~NvmlCall() { free(reply_data_); }
  Writer& request() { return request_; }
  Reader& reply() { return reader_; }
  bool answered() const { return answered_; }

  nvmlReturn_t Run() {
    pthread_once(&g_once, FindTransport);
    if (g_transport.exchange == nullptr) return NVML_ERROR_LIBRARY_NOT_FOUND;
    int32_t result = 0;
    size_t len = 0;
    answered_ = g_transport.exchange(op_, request_.buffer().data(), request_.size(), &result, &reply_data_, &len) != 0;
    if (!answered_) {
      // The connection's own log line said why; NVML's words for it.
      return result == kNoServerResult ? NVML_ERROR_DRIVER_NOT_LOADED : NVML_ERROR_GPU_IS_LOST;
    }
    reader_ = Reader(static_cast<const uint8_t*>(reply_data_), len);
    return static_cast<nvmlReturn_t>(result);
  }

  nvmlReturn_t Malformed() {
    if (g_transport.malformed != nullptr) g_transport.malformed(op_);
    return NVML_ERROR_GPU_IS_LOST;
  }

 private:
  uint32_t op_;
  Writer request_;
  void* reply_data_ = nullptr;
  Reader reader_;
  bool answered_ = false;
};

nvmlReturn_t NvmlRefuseArgument(const char* call, const char* param) {
  shim::InitLog();
  Log(LogLevel::kWarn, "remote: %s: a non-NULL %s is not forwarded (yet): NVML_ERROR_NOT_SUPPORTED", call, param);
  return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t NvmlRefuseSize(const char* call, const char* param, uint64_t bytes) {
  shim::InitLog();
  Log(LogLevel::kWarn, "remote: %s: %s of %llu bytes is more than one call carries: NVML_ERROR_INVALID_ARGUMENT", call,
      param, static_cast<unsigned long long>(bytes));
  return NVML_ERROR_INVALID_ARGUMENT;
}

}  // namespace gslice::remote

using gslice::remote::CountedBytes;

#include "nvml_client_calls.inc"

extern "C" const char* gslice_remote_call_nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
  }
}

namespace gslice::remote {
namespace {

using remote_nvml_exports::kCount;

std::atomic<bool> g_reported[kCount];

nvmlReturn_t NotForwardedSlot(int slot) {
  if (!g_reported[slot].exchange(true, std::memory_order_relaxed)) {
    shim::InitLog();
    Log(LogLevel::kWarn, "remote: %s is not forwarded (yet): NVML_ERROR_NOT_SUPPORTED", remote_nvml_exports::kNames[slot]);
  }
  return NVML_ERROR_NOT_SUPPORTED;
}

// One function per slot, so that the call's name is known; arguments are ignored.
template <int Slot>
nvmlReturn_t NotForwardedAt() {
  return NotForwardedSlot(Slot);
}

template <int... Slots>
auto MakeNotForwarded(std::integer_sequence<int, Slots...>) {
  return std::array<void*, sizeof...(Slots)>{reinterpret_cast<void*>(&NotForwardedAt<Slots>)...};
}

__attribute__((constructor)) void FillSlots() {
  static const auto not_forwarded = MakeNotForwarded(std::make_integer_sequence<int, kCount>{});
  for (int i = 0; i < kCount; ++i) {
    void* fn = nullptr;
    for (const ClientCall& c : kNvmlClientCalls)
      if (strcmp(c.name, remote_nvml_exports::kNames[i]) == 0) fn = c.fn;
    gslice_remote_nvml_slots[i] = fn != nullptr ? fn : not_forwarded[static_cast<size_t>(i)];
  }
}

}  // namespace
}  // namespace gslice::remote
