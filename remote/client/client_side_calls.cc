// Calls whose host half lives on the client: files named by the program are read here and
// their images shipped; host functions and stream callbacks run here, in stream order.
#include <cuda.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "call.h"
#include "client_calls.h"
#include "connection.h"
#include "refusals.h"

namespace {

// Reads a module file whole, NUL-terminated (text images need it; binary ones carry their size).
CUresult ReadImage(const char* path, std::vector<char>* out) {
  if (path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_FILE_NOT_FOUND;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) > gslice::remote::kMaxBuffer) {
    close(fd);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  out->assign(static_cast<size_t>(st.st_size) + 1, '\0');
  size_t done = 0;
  while (done < static_cast<size_t>(st.st_size)) {
    const ssize_t n = read(fd, out->data() + done, static_cast<size_t>(st.st_size) - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  return done == static_cast<size_t>(st.st_size) && done >= 4 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_IMAGE;
}

}  // namespace

extern "C" CUresult gslice_remote_call_cuModuleLoad(CUmodule* module, const char* fname) {
  if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<char> image;
  CUresult r = ReadImage(fname, &image);
  return r != CUDA_SUCCESS ? r : gslice_remote_call_cuModuleLoadData(module, image.data());
}

extern "C" CUresult gslice_remote_call_cuLibraryLoadFromFile(CUlibrary* library, const char* fileName,
                                                           CUjit_option* jitOptions, void** jitOptionsValues,
                                                           unsigned int numJitOptions, CUlibraryOption* libraryOptions,
                                                           void** libraryOptionValues, unsigned int numLibraryOptions) {
  if (library == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<char> image;
  CUresult r = ReadImage(fileName, &image);
  if (r != CUDA_SUCCESS) return r;
  return gslice_remote_call_cuLibraryLoadData(library, image.data(), jitOptions, jitOptionsValues, numJitOptions,
                                              libraryOptions, libraryOptionValues, numLibraryOptions);
}

// The host function runs on the calling thread once the stream's earlier work is done, before
// the call returns: later work on the stream follows it, as CUDA orders it. The caller waits
// for the stream meanwhile (CUDA would return at once).
extern "C" CUresult gslice_remote_call_cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult r = gslice_remote_call_cuStreamSynchronize(hStream);
  if (r != CUDA_SUCCESS) return r;
  fn(userData);
  return CUDA_SUCCESS;
}

extern "C" CUresult gslice_remote_call_cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void* userData) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult r = gslice_remote_call_cuStreamSynchronize_ptsz(hStream);
  if (r != CUDA_SUCCESS) return r;
  fn(userData);
  return CUDA_SUCCESS;
}

// A stream callback, like a host function: run on the calling thread once the stream's earlier
// work is done, with the stream's status (the error of that work, if any).
extern "C" CUresult gslice_remote_call_cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void* userData,
                                                         unsigned int flags) {
  if (callback == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const CUresult status = gslice_remote_call_cuStreamSynchronize(hStream);
  if (status == gslice::remote::kLostResult || status == gslice::remote::kNoServerResult) return status;
  callback(hStream, status, userData);
  return CUDA_SUCCESS;
}

extern "C" CUresult gslice_remote_call_cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback,
                                                              void* userData, unsigned int flags) {
  if (callback == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  const CUresult status = gslice_remote_call_cuStreamSynchronize_ptsz(hStream);
  if (status == gslice::remote::kLostResult || status == gslice::remote::kNoServerResult) return status;
  callback(hStream, status, userData);
  return CUDA_SUCCESS;
}
