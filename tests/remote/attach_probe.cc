// gslice_attach_probe: a driver-API program for the attach-on-use and idle-release tests,
// run through the forwarding client. Each step prints a line and waits for a line on stdin,
// so that the test can look at the server side in between.
//
//   attach_probe  1. cuInit, the driver version, the device count, name, an attribute and
//                    the total memory: prints "queried <count> <total bytes>", waits
//                 2. allocates 64 MiB, writes a pattern: prints "written", waits
//                 3. reads it back: prints "intact" or "CORRUPT", waits
//                 4. frees, exits
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace {

#define CK(call)                                                      \
  do {                                                                \
    CUresult r_ = (call);                                             \
    if (r_ != CUDA_SUCCESS) {                                         \
      printf("FAILED %s: %d (line %d)\n", #call, r_, __LINE__);       \
      exit(1);                                                        \
    }                                                                 \
  } while (0)

void WaitForLine() {
  char c;
  while (read(0, &c, 1) == 1 && c != '\n') {
  }
}

}  // namespace

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  CK(cuInit(0));
  int version = 0, count = 0, sms = 0;
  CK(cuDriverGetVersion(&version));
  CK(cuDeviceGetCount(&count));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  char name[128];
  CK(cuDeviceGetName(name, sizeof name, dev));
  CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  size_t total = 0;
  CK(cuDeviceTotalMem(&total, dev));
  printf("queried %d %zu\n", count, total);
  WaitForLine();

  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  const size_t bytes = 64ull << 20;
  std::vector<uint32_t> data(bytes / 4);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint32_t>(i * 2654435761u);
  CUdeviceptr p = 0;
  CK(cuMemAlloc(&p, bytes));
  CK(cuMemcpyHtoD(p, data.data(), bytes));
  printf("written\n");
  WaitForLine();

  std::vector<uint32_t> back(data.size());
  CK(cuMemcpyDtoH(back.data(), p, bytes));
  printf("%s\n", back == data ? "intact" : "CORRUPT");
  WaitForLine();
  CK(cuMemFree(p));
  CK(cuDevicePrimaryCtxRelease(dev));
  return 0;
}
