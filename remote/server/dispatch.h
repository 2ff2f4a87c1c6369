// The worker's side of a call: decode a request, call the driver, encode what it wrote.
// Decoding is bounds-checked (wire.h); a request that does not decode, or whose buffer lengths
// disagree with the arguments that size them, is answered CUDA_ERROR_INVALID_VALUE without
// calling the driver.
#pragma once

#include <cuda.h>

#include <cstdint>

#include <vector>

#include "calls.h"
#include "launch.h"
#include "wire.h"

namespace gslice::remote {

// The worker's function for each opcode: the driver's, or NVML's for the calls of
// nvml_calls.def (nullptr: the library lacks it; the call is then answered
// CUDA_ERROR_NOT_SUPPORTED, or NVML_ERROR_NOT_SUPPORTED for NVML calls). Filled by LoadDriver
// and LoadNvml; all nullptr before.
extern void* g_driver[kOpCount];

// Looks every forwarded and custom call of calls.def up in the driver (dlsym on handle).
// Returns how many were found.
int LoadDriver(void* handle);
// The same for the calls of nvml_calls.def, in the worker's libnvidia-ml.so.1.
int LoadNvml(void* handle);

// The worker's NVML is initialised (nvmlInit_v2) before the first NVML call that is not itself
// an nvmlInit: a client that initialised NVML on its probe (attach.h) does not do it again
// after attaching. Lazy, so that a worker whose client never uses NVML never starts NVML.
void InitNvmlBeforeFirstCall();

// What a handler returns for a request that does not decode: no driver result (they end at
// CUDA_ERROR_UNKNOWN, 999), within the enum's range.
inline constexpr CUresult kMalformed = static_cast<CUresult>(1021);

using Handler = CUresult (*)(Reader& in, Writer& out);

// A kernel's arguments as read from a request (launch.h: LaunchParams), laid out as the driver
// takes them: kernelParams pointing into this object's storage, or extra naming its buffer (a
// launch's, a graph's kernel node's). Not copyable: the pointers point into it.
class DriverKernelArguments {
 public:
  DriverKernelArguments() = default;
  DriverKernelArguments(const DriverKernelArguments&) = delete;
  DriverKernelArguments& operator=(const DriverKernelArguments&) = delete;
  // Reads them from r (launch.h: DecodeLaunchParams) and lays them out. False when the request
  // does not decode or the parameters together are over the driver's limit.
  bool Read(Reader* r);
  void** params() { return (which_ & kLaunchKernelParams) ? params_.data() : nullptr; }
  void** extra() { return (which_ & kLaunchExtra) ? extra_ : nullptr; }
  // Points a kernel node's parameters (CUDA_KERNEL_NODE_PARAMS, _v3) at them.
  template <typename Node>
  void PointInto(Node* node) {
    node->kernelParams = params();
    node->extra = extra();
  }

 private:
  bool Lay(const LaunchParams& in);

  uint8_t which_ = 0;
  std::vector<uint64_t> storage_;
  std::vector<void*> params_;
  std::vector<uint64_t> extra_storage_;
  size_t extra_size_ = 0;
  void* extra_[5] = {CU_LAUNCH_PARAM_BUFFER_POINTER, nullptr, CU_LAUNCH_PARAM_BUFFER_SIZE, &extra_size_,
                     CU_LAUNCH_PARAM_END};
};

enum class Dispatched {
  kAnswered,   // out holds the driver's answer
  kRefused,    // malformed: out holds CUDA_ERROR_INVALID_VALUE (NVML calls:
               // NVML_ERROR_INVALID_ARGUMENT); the library was not called
  kUnknownOp,  // no client sends this opcode: out is untouched, the connection should close
};

// Runs request op (its arguments in `in`) and appends the reply to out: the i32 result, then
// what the call wrote. NVML device handles cross the wire as the device's index + 1, never as
// the library's pointer: a handle the client got from its probe names the same device in its
// worker (the generated handlers translate them both ways).
Dispatched Dispatch(uint32_t op, Reader& in, Writer& out);

}  // namespace gslice::remote
