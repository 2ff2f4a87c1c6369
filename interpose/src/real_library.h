// Finding and loading the real libcuda.so.1 / libnvidia-ml.so.1 by absolute path, and
// filling a generated slot table from it.
#pragma once

namespace gslice::shim {

struct RealLibrary {
  void* handle = nullptr;
  char path[4096] = {};
};

// Loads the real library: override (an absolute path from GSLICE_REAL_*) when non-empty,
// else the first soname found in LD_LIBRARY_PATH and the usual driver folders that is not
// the shim itself (compared by device and inode with the file holding self_symbol).
// Returns false (and logs) when none loads.
bool LoadRealLibrary(const char* soname, const char* override_path, const char* override_env,
                     const void* self_symbol, RealLibrary* out);

// For each name: slots[i] = dlsym(real, name) or unsupported; real_out[i] gets the same
// value (hooked slots are then overwritten by the caller).
void FillSlots(void* handle, const char* const* names, int count, void** slots, void** real_out,
               void* unsupported);

}  // namespace gslice::shim
