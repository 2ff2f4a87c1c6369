// Copies whose direction the driver tells from the addresses (cuMemcpy, cuMemcpyAsync: what
// cudaMemcpy makes of cudaMemcpyDefault), each way: pageable and page-locked host memory to
// device memory and back, device to device, host to host. Prints one line per copy, "right"
// when its bytes are.
#include <string.h>

#include <vector>

#include "probe.h"

namespace gslice::probe {

int UnifiedCopies(int, char**) {
  CUdevice dev;
  Setup(&dev);
  const size_t n = 1 << 16;
  std::vector<unsigned char> host(n), back(n, 0), other(n, 0);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<unsigned char>(i * 13 + 5);
  void* locked = nullptr;
  CK(cuMemHostAlloc(&locked, n, 0));
  CUdeviceptr a = 0, b = 0;
  CK(cuMemAlloc(&a, n));
  CK(cuMemAlloc(&b, n));
  CUstream s = nullptr;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  const auto p = [](const void* v) { return reinterpret_cast<CUdeviceptr>(v); };
  const auto same = [&](const void* x) { return memcmp(x, host.data(), n) == 0 ? "right" : "wrong"; };

  CK(cuMemcpy(a, p(host.data()), n));                       // pageable host to device
  CK(cuMemcpy(p(back.data()), a, n));                       // device to pageable host
  printf("host to device and back: %s\n", same(back.data()));
  CK(cuMemcpyAsync(b, a, n, s));                            // device to device
  CK(cuMemcpyAsync(p(locked), b, n, s));                    // device to page-locked host
  CK(cuStreamSynchronize(s));
  printf("device to device, to page-locked host: %s\n", same(locked));
  memset(back.data(), 0, n);
  CK(cuMemsetD8(a, 0, n));
  CK(cuMemcpyAsync(a, p(locked), n, s));                    // page-locked host to device
  CK(cuMemcpyAsync(p(back.data()), a, n, s));               // device to pageable host
  CK(cuStreamSynchronize(s));
  printf("page-locked host to device and back: %s\n", same(back.data()));
  CK(cuMemcpyAsync(p(other.data()), p(host.data()), n, s));  // host to host
  printf("host to host: %s\n", same(other.data()));
  printf("into nothing: %s\n", Name(cuMemcpy(0x10, a, 16)));
  CK(cuStreamDestroy(s));
  CK(cuMemFree(a));
  CK(cuMemFree(b));
  CK(cuMemFreeHost(locked));
  return 0;
}

}  // namespace gslice::probe
