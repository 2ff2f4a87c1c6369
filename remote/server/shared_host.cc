#include "shared_host.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>

namespace gslice::remote {
namespace {

using RegisterFn = CUresult (*)(void*, size_t, unsigned int);
using UnregisterFn = CUresult (*)(void*);
using DevicePointerFn = CUresult (*)(CUdeviceptr*, void*, unsigned int);
RegisterFn g_register = nullptr;
UnregisterFn g_unregister = nullptr;
DevicePointerFn g_device_pointer = nullptr;

struct Range {
  uint64_t bytes;
  uint64_t device;
};
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
std::map<uint64_t, Range>* g_ranges = nullptr;  // by the worker's address; REQUIRES g_mu

}  // namespace

void LoadSharedHost(void* driver) {
  g_register = reinterpret_cast<RegisterFn>(dlsym(driver, "cuMemHostRegister_v2"));
  g_unregister = reinterpret_cast<UnregisterFn>(dlsym(driver, "cuMemHostUnregister"));
  g_device_pointer = reinterpret_cast<DevicePointerFn>(dlsym(driver, "cuMemHostGetDevicePointer_v2"));
}

CUresult ShareHost(int fd, uint64_t client_addr, uint64_t bytes, uint64_t* worker_addr, uint64_t* device_ptr,
                   std::string* why) {
  if (g_register == nullptr || g_unregister == nullptr) {
    *why = "the worker's driver has no cuMemHostRegister";
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const long page = sysconf(_SC_PAGESIZE);
  struct stat st;
  if (fd < 0) {
    *why = "no memory file came with the request";
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (bytes == 0 || bytes % static_cast<uint64_t>(page) != 0 || bytes > (1ull << 46)) {
    *why = "a size that is no whole number of pages";
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != bytes) {
    *why = "the memory file is not a file of the announced size";
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    *why = "the memory file is not sealed against shrinking";
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The client's address when it is free here; anywhere else otherwise (the client then maps
  // its side at this one, or translates).
  void* p = MAP_FAILED;
  if (client_addr != 0 && client_addr % static_cast<uint64_t>(page) == 0) {
    p = mmap(reinterpret_cast<void*>(client_addr), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE,
             fd, 0);
  }
  if (p == MAP_FAILED) p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *why = std::string("mmap: ") + strerror(errno);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult registered = g_register(p, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
  if (registered != CUDA_SUCCESS) {
    munmap(p, bytes);
    *why = "cuMemHostRegister failed";
    return registered;
  }
  CUdeviceptr device = 0;
  if (g_device_pointer == nullptr || g_device_pointer(&device, p, 0) != CUDA_SUCCESS) device = 0;
  const uint64_t at = reinterpret_cast<uintptr_t>(p);
  pthread_mutex_lock(&g_mu);
  if (g_ranges == nullptr) g_ranges = new std::map<uint64_t, Range>();
  (*g_ranges)[at] = Range{.bytes = bytes, .device = device};
  pthread_mutex_unlock(&g_mu);
  *worker_addr = at;
  *device_ptr = device;
  return CUDA_SUCCESS;
}

CUresult UnshareHost(uint64_t worker_addr) {
  pthread_mutex_lock(&g_mu);
  uint64_t bytes = 0;
  if (g_ranges != nullptr) {
    if (auto it = g_ranges->find(worker_addr); it != g_ranges->end()) {
      bytes = it->second.bytes;
      g_ranges->erase(it);
    }
  }
  pthread_mutex_unlock(&g_mu);
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = reinterpret_cast<void*>(worker_addr);
  const CUresult r = g_unregister(p);
  munmap(p, bytes);
  return r;
}

void* SharedHostPointer(uint64_t addr, uint64_t bytes) {
  if (bytes == 0) bytes = 1;
  void* found = nullptr;
  pthread_mutex_lock(&g_mu);
  if (g_ranges != nullptr) {
    auto it = g_ranges->upper_bound(addr);
    if (it != g_ranges->begin()) {
      --it;
      const uint64_t offset = addr - it->first;
      if (offset < it->second.bytes && bytes <= it->second.bytes - offset) found = reinterpret_cast<void*>(addr);
    }
  }
  pthread_mutex_unlock(&g_mu);
  return found;
}

}  // namespace gslice::remote
