// The driver's process checkpoint API (cuCheckpointProcess*, driver r570+), called from the
// daemon on another process's pid. CheckpointDriver is the seam: the daemon uses
// DlopenCheckpointDriver (dlopen("libcuda.so.1"), never linked, so gsliced starts on nodes
// without a GPU and reports "not supported"), tests may substitute their own.
#pragma once

#include <cuda.h>

#include <memory>
#include <span>
#include <string>

namespace gslice::suspend {

// A GPU UUID pair for restoring onto another GPU of the same type.
struct GpuPair {
  CUuuid from{};
  CUuuid to{};
};

class CheckpointDriver {
 public:
  virtual ~CheckpointDriver() = default;
  virtual CUresult GetState(int pid, CUprocessState* state) = 0;
  // Waits up to timeout_ms (0 = no limit) for the process's in-flight CUDA calls; on timeout
  // the process stays RUNNING.
  virtual CUresult Lock(int pid, unsigned timeout_ms) = 0;
  virtual CUresult Checkpoint(int pid) = 0;
  // Empty pairs: restore onto the GPUs it was checkpointed from.
  virtual CUresult Restore(int pid, std::span<const GpuPair> pairs) = 0;
  virtual CUresult Unlock(int pid) = 0;
  virtual CUresult GetRestoreThreadId(int pid, int* tid) = 0;
  // "CUDA_ERROR_NOT_SUPPORTED" etc.; never null.
  virtual const char* ErrorName(CUresult r) = 0;
};

class DlopenCheckpointDriver final : public CheckpointDriver {
 public:
  // Opens `library` (default "libcuda.so.1", found the usual way) and resolves the
  // checkpoint entry points. Returns null with *error set when the library or any entry
  // point is missing ("libcuda.so.1 has no cuCheckpointProcessLock: driver r570 or newer
  // is needed").
  static std::unique_ptr<DlopenCheckpointDriver> Open(const char* library, std::string* error);
  ~DlopenCheckpointDriver() override;

  CUresult GetState(int pid, CUprocessState* state) override;
  CUresult Lock(int pid, unsigned timeout_ms) override;
  CUresult Checkpoint(int pid) override;
  CUresult Restore(int pid, std::span<const GpuPair> pairs) override;
  CUresult Unlock(int pid) override;
  CUresult GetRestoreThreadId(int pid, int* tid) override;
  const char* ErrorName(CUresult r) override;

 private:
  DlopenCheckpointDriver() = default;
  // Runs `call`; if the driver answers NOT_INITIALIZED, calls cuInit(0) once and retries.
  template <typename F>
  CUresult WithInit(F call);

  void* handle_ = nullptr;
  CUresult (*init_)(unsigned) = nullptr;
  CUresult (*get_error_name_)(CUresult, const char**) = nullptr;
  CUresult (*get_state_)(int, CUprocessState*) = nullptr;
  CUresult (*lock_)(int, CUcheckpointLockArgs*) = nullptr;
  CUresult (*checkpoint_)(int, CUcheckpointCheckpointArgs*) = nullptr;
  CUresult (*restore_)(int, CUcheckpointRestoreArgs*) = nullptr;
  CUresult (*unlock_)(int, CUcheckpointUnlockArgs*) = nullptr;
  CUresult (*restore_tid_)(int, int*) = nullptr;
  bool initialized_ = false;
};

// "RUNNING", "LOCKED", "CHECKPOINTED", "FAILED".
const char* DriverProcessStateName(CUprocessState s);

// Parses "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (nvidia-smi's form) or the bare 32 hex
// digits; false on anything else.
bool ParseGpuUuid(const std::string& text, CUuuid* out);
std::string FormatGpuUuid(const CUuuid& uuid);

}  // namespace gslice::suspend
