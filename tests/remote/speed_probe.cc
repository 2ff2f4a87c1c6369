// gslice_remote_speed_probe: driver-API call sequences whose cost through the forwarding client
// the speed tests count (remote_speed_test.cc): what each sequence makes the client do (round
// trips, queued calls, answers it keeps) from its own counters, and what the added delay did.
// It prints only counts and the driver's answers (no addresses, no times).
//
//   speed_probe delay   allocations, 200 queued memsets, a synchronisation and stream queries;
//                       prints the added delay's counters (GSLICE_REMOTE_ADDED_DELAY_US)
#include <dlfcn.h>
#include <stdio.h>

#include <cstdint>
#include <cstring>

#include "probe/probe.h"

namespace gslice::probe {
namespace {

// The loaded client's export `name`, or null on the driver itself.
template <typename Fn>
Fn ClientExport(const char* name) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return lib != nullptr ? reinterpret_cast<Fn>(dlsym(lib, name)) : nullptr;
}

int Delay() {
  CUdevice dev;
  Setup(&dev);
  CUstream stream;
  CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr p;
  CK(cuMemAlloc(&p, 1 << 20));
  for (uint32_t i = 0; i < 200; ++i) CK(cuMemsetD32Async(p, i, 1024, stream));
  CK(cuStreamSynchronize(stream));
  for (int i = 0; i < 5; ++i) CK(cuStreamQuery(stream));
  uint32_t last = 0;
  CK(cuMemcpyDtoH(&last, p, sizeof last));
  printf("memsets done: the last wrote %u\n", last);
  CK(cuMemFree(p));
  CK(cuStreamDestroy(stream));
  const auto stats = ClientExport<void (*)(uint64_t[4])>("gslice_remote_added_delay");
  if (stats == nullptr) return 0;
  uint64_t out[4] = {};
  stats(out);
  if (out[0] == 0) {
    printf("added delay: none\n");
    return 0;
  }
  printf("added delay: round trip %llu us\n", static_cast<unsigned long long>(out[0] / 1000));
  printf("added delay: %s pieces sent\n", out[1] >= 8 ? "at least 8" : "fewer than 8");
  printf("added delay: every piece held at least the round trip: %s\n", out[2] != UINT64_MAX && out[2] >= out[0] ? "yes" : "no");
  return 0;
}

struct Mode {
  const char* name;
  int (*run)();
};

constexpr Mode kModes[] = {
    {"delay", Delay},
};

}  // namespace
}  // namespace gslice::probe

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  for (const gslice::probe::Mode& m : gslice::probe::kModes) {
    if (argc >= 2 && strcmp(argv[1], m.name) == 0) return m.run();
  }
  fprintf(stderr, "usage: %s MODE (tests/remote/speed_probe.cc lists them)\n", argv[0]);
  return 2;
}
