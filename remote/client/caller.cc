#include "caller.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

namespace gslice::remote {
namespace {

const char* BaseName(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

}  // namespace

void DescribeCaller(char* out, size_t size) {
  if (out == nullptr || size == 0) return;
  snprintf(out, size, "an unknown caller");
  void* frames[64];
  const int n = backtrace(frames, 64);
  Dl_info self;
  if (dladdr(reinterpret_cast<void*>(&DescribeCaller), &self) == 0) return;
  // Frames from the innermost: the client's own, then the calling library's, then whatever
  // called that library (the program, a framework). A return address points just past its
  // call: one byte back is inside the calling function.
  // (Frames before the client's first are backtrace's own wrapper where a sanitizer runtime
  // intercepts it.)
  Dl_info info;
  auto own = [&](int i) {
    return dladdr(static_cast<char*>(frames[i]) - 1, &info) != 0 && info.dli_fbase == self.dli_fbase;
  };
  int first = 0;
  while (first < n && !own(first)) ++first;
  while (first < n && own(first)) ++first;
  if (first >= n || dladdr(static_cast<char*>(frames[first]) - 1, &info) == 0 || info.dli_fname == nullptr) return;
  const void* library = info.dli_fbase;
  const char* library_name = BaseName(info.dli_fname);
  const char* entry = nullptr;
  // Frames of other objects between the library's own are skipped (the library may call back
  // into itself through libc, as through pthread_once on first use).
  for (int i = first; i < n; ++i) {
    const char* at = static_cast<char*>(frames[i]) - 1;
    Dl_info frame;
    void* extra = nullptr;
    if (dladdr1(at, &frame, &extra, RTLD_DL_SYMENT) == 0 || frame.dli_fbase != library) continue;
    // Exported symbols only, and only when the address is inside the export's own code: an
    // internal function shows as the nearest export before it.
    const auto* sym = static_cast<const ElfW(Sym)*>(extra);
    const char* start = static_cast<const char*>(frame.dli_saddr);
    if (frame.dli_sname != nullptr && sym != nullptr && start != nullptr && at >= start && at < start + sym->st_size) {
      entry = frame.dli_sname;
    }
  }
  if (entry != nullptr) snprintf(out, size, "%s (in %s)", library_name, entry);
  else snprintf(out, size, "%s", library_name);
}

}  // namespace gslice::remote
