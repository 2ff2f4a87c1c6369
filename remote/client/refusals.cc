#include "refusals.h"

#include "caller.h"
#include "log.h"
#include "wire.h"

namespace gslice::remote {

using shim::Log;
using shim::LogLevel;

CUresult RefuseArgument(const char* call, const char* param) {
  shim::InitLog();
  char caller[256];
  DescribeCaller(caller, sizeof caller);
  Log(LogLevel::kWarn, "remote: %s: a non-NULL %s is not forwarded (yet): CUDA_ERROR_NOT_SUPPORTED to %s", call, param,
      caller);
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult RefuseWhat(const char* call, const char* what) {
  shim::InitLog();
  char caller[256];
  DescribeCaller(caller, sizeof caller);
  Log(LogLevel::kWarn, "remote: %s: %s is not forwarded: CUDA_ERROR_NOT_SUPPORTED to %s", call, what, caller);
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult RefuseSize(const char* call, const char* param, uint64_t bytes) {
  shim::InitLog();
  Log(LogLevel::kWarn, "remote: %s: %s of %llu bytes is more than one call carries (%llu): CUDA_ERROR_INVALID_VALUE",
      call, param, static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(kMaxBuffer));
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult RefuseImage(const char* call) {
  shim::InitLog();
  Log(LogLevel::kWarn, "remote: %s: cannot tell the size of this module image: CUDA_ERROR_INVALID_IMAGE", call);
  return CUDA_ERROR_INVALID_IMAGE;
}

CUresult NotForwarded(const char* name) {
  shim::InitLog();
  char caller[256];
  DescribeCaller(caller, sizeof caller);
  Log(LogLevel::kWarn, "remote: %s is not forwarded (yet): CUDA_ERROR_NOT_SUPPORTED to %s", name, caller);
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace gslice::remote
