#include "gslice/suspend/driver.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <vector>

namespace gslice::suspend {

namespace {

template <typename Fn>
bool Resolve(void* handle, const char* name, Fn* out, std::string* error, const char* library) {
  void* sym = dlsym(handle, name);
  if (sym == nullptr) {
    *error = std::string(library) + " has no " + name +
             ": the process checkpoint API needs NVIDIA driver r570 or newer";
    return false;
  }
  *out = reinterpret_cast<Fn>(sym);
  return true;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::unique_ptr<DlopenCheckpointDriver> DlopenCheckpointDriver::Open(const char* library,
                                                                     std::string* error) {
  if (library == nullptr || *library == '\0') library = "libcuda.so.1";
  void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    *error = std::string("cannot load ") + library + " (" + (why ? why : "unknown error") +
             "): suspend and resume need the NVIDIA driver (or the simulated one)";
    return nullptr;
  }
  std::unique_ptr<DlopenCheckpointDriver> d(new DlopenCheckpointDriver());
  d->handle_ = handle;
  if (!Resolve(handle, "cuInit", &d->init_, error, library) ||
      !Resolve(handle, "cuGetErrorName", &d->get_error_name_, error, library) ||
      !Resolve(handle, "cuCheckpointProcessGetState", &d->get_state_, error, library) ||
      !Resolve(handle, "cuCheckpointProcessLock", &d->lock_, error, library) ||
      !Resolve(handle, "cuCheckpointProcessCheckpoint", &d->checkpoint_, error, library) ||
      !Resolve(handle, "cuCheckpointProcessRestore", &d->restore_, error, library) ||
      !Resolve(handle, "cuCheckpointProcessUnlock", &d->unlock_, error, library) ||
      !Resolve(handle, "cuCheckpointProcessGetRestoreThreadId", &d->restore_tid_, error,
               library)) {
    dlclose(handle);  // nothing was initialised through it yet
    d->handle_ = nullptr;
    return nullptr;
  }
  return d;
}

DlopenCheckpointDriver::~DlopenCheckpointDriver() {
  // The driver keeps threads and atexit handlers once initialised; unloading it under them
  // is unsafe, so the handle stays open for the life of the daemon.
  (void)handle_;
}

template <typename F>
CUresult DlopenCheckpointDriver::WithInit(F call) {
  CUresult r = call();
  if (r == CUDA_ERROR_NOT_INITIALIZED && !initialized_) {
    initialized_ = true;
    if (init_(0) == CUDA_SUCCESS) r = call();
  }
  return r;
}

CUresult DlopenCheckpointDriver::GetState(int pid, CUprocessState* state) {
  return WithInit([&] { return get_state_(pid, state); });
}

CUresult DlopenCheckpointDriver::Lock(int pid, unsigned timeout_ms) {
  return WithInit([&] {
    CUcheckpointLockArgs args;
    std::memset(&args, 0, sizeof(args));
    args.timeoutMs = timeout_ms;
    return lock_(pid, &args);
  });
}

CUresult DlopenCheckpointDriver::Checkpoint(int pid) {
  return WithInit([&] {
    CUcheckpointCheckpointArgs args;
    std::memset(&args, 0, sizeof(args));
    return checkpoint_(pid, &args);
  });
}

CUresult DlopenCheckpointDriver::Restore(int pid, std::span<const GpuPair> pairs) {
  return WithInit([&] {
    CUcheckpointRestoreArgs args;
    std::memset(&args, 0, sizeof(args));
    std::vector<CUcheckpointGpuPair> raw(pairs.size());
    for (size_t i = 0; i < pairs.size(); ++i) {
      raw[i].oldUuid = pairs[i].from;
      raw[i].newUuid = pairs[i].to;
    }
    if (!raw.empty()) {
      args.gpuPairs = raw.data();
      args.gpuPairsCount = static_cast<unsigned>(raw.size());
    }
    return restore_(pid, raw.empty() ? nullptr : &args);
  });
}

CUresult DlopenCheckpointDriver::Unlock(int pid) {
  return WithInit([&] {
    CUcheckpointUnlockArgs args;
    std::memset(&args, 0, sizeof(args));
    return unlock_(pid, &args);
  });
}

CUresult DlopenCheckpointDriver::GetRestoreThreadId(int pid, int* tid) {
  return WithInit([&] { return restore_tid_(pid, tid); });
}

const char* DlopenCheckpointDriver::ErrorName(CUresult r) {
  const char* name = nullptr;
  if (get_error_name_ != nullptr && get_error_name_(r, &name) == CUDA_SUCCESS && name != nullptr)
    return name;
  return "CUDA_ERROR_UNKNOWN";
}

const char* DriverProcessStateName(CUprocessState s) {
  switch (s) {
    case CU_PROCESS_STATE_RUNNING: return "RUNNING";
    case CU_PROCESS_STATE_LOCKED: return "LOCKED";
    case CU_PROCESS_STATE_CHECKPOINTED: return "CHECKPOINTED";
    case CU_PROCESS_STATE_FAILED: return "FAILED";
  }
  return "UNKNOWN";
}

bool ParseGpuUuid(const std::string& text, CUuuid* out) {
  std::string hex;
  std::string_view t = text;
  if (t.starts_with("GPU-")) t.remove_prefix(4);
  for (char c : t) {
    if (c == '-') continue;
    if (HexValue(c) < 0) return false;
    hex.push_back(c);
  }
  if (hex.size() != 32) return false;
  for (size_t i = 0; i < 16; ++i) {
    out->bytes[i] = static_cast<char>(HexValue(hex[2 * i]) * 16 + HexValue(hex[2 * i + 1]));
  }
  return true;
}

std::string FormatGpuUuid(const CUuuid& uuid) {
  char buf[64];
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  std::snprintf(buf, sizeof(buf),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return buf;
}

}  // namespace gslice::suspend
