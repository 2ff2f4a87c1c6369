#include "real_library.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gslice/clock.h"
#include "log.h"

namespace gslice::shim {
namespace {

constexpr const char* kDriverDirs[] = {
    "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",   "/usr/lib64",            "/lib64",
    "/usr/lib",                "/lib",                  "/usr/lib/wsl/lib",
};

bool SameFile(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

bool TryDir(const char* dir, size_t dir_len, const char* soname, bool have_self, const struct stat& self,
            RealLibrary* out) {
  if (dir_len == 0 || dir_len + strlen(soname) + 2 > sizeof out->path) return false;
  char path[sizeof out->path];
  memcpy(path, dir, dir_len);
  path[dir_len] = '/';
  strcpy(path + dir_len + 1, soname);
  struct stat st;
  if (stat(path, &st) != 0) return false;
  if (have_self && SameFile(st, self)) return false;  // that is us
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    Log(LogLevel::kDebug, "skipping %s: %s", path, dlerror());
    return false;
  }
  out->handle = h;
  strcpy(out->path, path);
  return true;
}

}  // namespace

bool LoadRealLibrary(const char* soname, const char* override_path, const char* override_env,
                     const void* self_symbol, RealLibrary* out) {
  if (override_path != nullptr && override_path[0] != '\0') {
    if (override_path[0] != '/') {
      Log(LogLevel::kError, "%s=%s: must be an absolute path; searching the usual folders instead", override_env,
          override_path);
    } else {
      void* h = dlopen(override_path, RTLD_NOW | RTLD_LOCAL);
      if (h != nullptr) {
        out->handle = h;
        snprintf(out->path, sizeof out->path, "%s", override_path);
        return true;
      }
      Log(LogLevel::kError, "%s=%s: cannot load (%s); searching the usual folders instead", override_env,
          override_path, dlerror());
    }
  }
  struct stat self{};
  bool have_self = false;
  Dl_info info;
  if (dladdr(self_symbol, &info) != 0 && info.dli_fname != nullptr && stat(info.dli_fname, &self) == 0) {
    have_self = true;
  }
  if (const char* lib_path = getenv("LD_LIBRARY_PATH")) {
    const char* p = lib_path;
    while (*p != '\0') {
      const char* end = strchr(p, ':');
      size_t len = end != nullptr ? static_cast<size_t>(end - p) : strlen(p);
      if (TryDir(p, len, soname, have_self, self, out)) return true;
      if (end == nullptr) break;
      p = end + 1;
    }
  }
  for (const char* dir : kDriverDirs) {
    if (TryDir(dir, strlen(dir), soname, have_self, self, out)) return true;
  }
  Log(LogLevel::kInfo, "no real %s found (set %s to its absolute path)", soname, override_env);
  return false;
}

void FillSlots(void* handle, const char* const* names, int count, void** slots, void** real_out,
               void* unsupported) {
  const int64_t t0 = MonotonicNs();
  for (int i = 0; i < count; ++i) {
    void* p = handle != nullptr ? dlsym(handle, names[i]) : nullptr;
    if (p == nullptr) p = unsupported;
    real_out[i] = p;
    __atomic_store_n(&slots[i], p, __ATOMIC_RELEASE);
  }
  const int64_t t1 = MonotonicNs();
  // The shim's own start-up work (the real library's load happens without the shim too);
  // bench/ reads this line to measure what the shim adds to process start.
  Log(LogLevel::kInfo, "init: %d entry points resolved in %lld us", count,
      static_cast<long long>((t1 - t0) / 1000));
}

}  // namespace gslice::shim
