// A driver-API program that the sim tests start as a child process to play a role: hold
// memory, run kernels, answer questions about what it sees. Talks line by line: commands on
// stdin, answers on stdout. Runs unchanged on a real GPU.
//
//   sim_worker preinit                      driver calls before cuInit
//   sim_worker devices                      cuInit, then one line per visible device
//   sim_worker hold <dev> <bytes> <pattern> allocate, fill, then serve commands:
//        verify | info | uuid | alloc <bytes> | busy <us> | sync | exit
//   sim_worker busy <kernel_us> <duration_ms>
//        after a line "go" on stdin, run busy kernels back to back for duration_ms
#include <cuda.h>
#include <time.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "gslice/clock.h"
#include "test_support.h"

namespace {

using gslice::test::CuName;

constexpr size_t kPatternBytes = 16ull << 20;

std::string UuidText(const CUuuid& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  char buf[64];
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return buf;
}

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

#define OR_DIE(expr)                                      \
  do {                                                    \
    CUresult r_ = (expr);                                 \
    if (r_ != CUDA_SUCCESS) {                             \
      Say(std::string("error ") + #expr + " " + CuName(r_)); \
      return 2;                                           \
    }                                                     \
  } while (0)

int PreInit() {
  int count = -1;
  Say("count_before_init " + CuName(cuDeviceGetCount(&count)));
  CUdeviceptr p;
  Say("alloc_before_init " + CuName(cuMemAlloc(&p, 16)));
  Say("init " + CuName(cuInit(0)));
  return 0;
}

int Devices() {
  CUresult r = cuInit(0);
  Say("init " + CuName(r));
  if (r != CUDA_SUCCESS) return 0;
  int count = 0;
  OR_DIE(cuDeviceGetCount(&count));
  Say("count " + std::to_string(count));
  for (int i = 0; i < count; ++i) {
    CUdevice dev;
    OR_DIE(cuDeviceGet(&dev, i));
    CUuuid uuid;
    OR_DIE(cuDeviceGetUuid(&uuid, dev));
    size_t total = 0;
    OR_DIE(cuDeviceTotalMem(&total, dev));
    int mps = -1;
    OR_DIE(cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev));
    Say("device " + std::to_string(i) + " " + UuidText(uuid) + " " + std::to_string(total) + " mps " +
        std::to_string(mps));
  }
  return 0;
}

int Hold(int ordinal, size_t bytes, uint32_t pattern) {
  OR_DIE(cuInit(0));
  CUdevice dev;
  OR_DIE(cuDeviceGet(&dev, ordinal));
  CUcontext ctx;
  OR_DIE(cuDevicePrimaryCtxRetain(&ctx, dev));
  OR_DIE(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CUfunction busy, fill;
  OR_DIE(gslice::test::LoadTestKernels(&mod, &busy, &fill));
  CUdeviceptr p;
  OR_DIE(cuMemAlloc(&p, bytes));
  // The pattern goes into the first and last kPatternBytes (all of a small buffer): enough
  // to see data survive, cheap for the large buffers of capacity tests.
  const size_t head = bytes <= 2 * kPatternBytes ? bytes : kPatternBytes;
  const size_t tail_at = bytes <= 2 * kPatternBytes ? bytes : bytes - kPatternBytes;
  OR_DIE(gslice::test::LaunchFill(fill, p, pattern, head / 4, nullptr));
  if (tail_at < bytes) {
    OR_DIE(gslice::test::LaunchFill(fill, p + tail_at, pattern, (bytes - tail_at) / 4, nullptr));
  }
  OR_DIE(cuCtxSynchronize());
  Say("ready " + std::to_string(getpid()));
  std::vector<CUdeviceptr> extra;
  std::string cmd;
  while (std::getline(std::cin, cmd)) {
    if (cmd == "verify") {
      std::vector<uint32_t> host(head / 4), tail((bytes - tail_at) / 4);
      CUresult r = cuMemcpyDtoH(host.data(), p, head);
      if (r == CUDA_SUCCESS && !tail.empty()) r = cuMemcpyDtoH(tail.data(), p + tail_at, bytes - tail_at);
      if (r != CUDA_SUCCESS) {
        Say("verified error " + CuName(r));
        continue;
      }
      host.insert(host.end(), tail.begin(), tail.end());
      size_t bad = host.size();
      for (size_t i = 0; i < host.size() && bad == host.size(); ++i) {
        if (host[i] != pattern) bad = i;
      }
      Say(bad == host.size() ? "verified ok" : "verified bad " + std::to_string(bad));
    } else if (cmd == "info") {
      size_t free_b = 0, total = 0;
      CUresult r = cuMemGetInfo(&free_b, &total);
      Say("info " + CuName(r) + " " + std::to_string(free_b) + " " + std::to_string(total));
    } else if (cmd == "uuid") {
      CUdevice d;
      CUuuid u;
      CUresult r = cuCtxGetDevice(&d);
      if (r == CUDA_SUCCESS) r = cuDeviceGetUuid(&u, d);
      Say("uuid " + (r == CUDA_SUCCESS ? UuidText(u) : CuName(r)));
    } else if (cmd.rfind("alloc ", 0) == 0) {
      CUdeviceptr q;
      CUresult r = cuMemAlloc(&q, std::strtoull(cmd.c_str() + 6, nullptr, 10));
      if (r == CUDA_SUCCESS) extra.push_back(q);
      Say("alloc " + CuName(r));
    } else if (cmd.rfind("busy ", 0) == 0) {
      CUresult r = gslice::test::LaunchBusy(busy, std::strtoull(cmd.c_str() + 5, nullptr, 10), nullptr);
      Say("launched " + CuName(r));
    } else if (cmd == "sync") {
      Say("synced " + CuName(cuCtxSynchronize()));
    } else if (cmd == "exit") {
      break;
    }
  }
  return 0;
}

int Busy(uint64_t kernel_us, uint64_t duration_ms) {
  OR_DIE(cuInit(0));
  CUdevice dev;
  OR_DIE(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  OR_DIE(cuDevicePrimaryCtxRetain(&ctx, dev));
  OR_DIE(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CUfunction busy, fill;
  OR_DIE(gslice::test::LoadTestKernels(&mod, &busy, &fill));
  Say("ready");
  std::string go;
  if (!std::getline(std::cin, go) || go != "go") return 3;
  const int64_t end_ms = gslice::MonotonicMs() + static_cast<int64_t>(duration_ms);
  uint64_t kernels = 0;
  // Two kernels in flight keep the device fed without running past the window by much.
  OR_DIE(gslice::test::LaunchBusy(busy, kernel_us, nullptr));
  while (gslice::MonotonicMs() < end_ms) {
    OR_DIE(gslice::test::LaunchBusy(busy, kernel_us, nullptr));
    CUevent e;
    OR_DIE(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    OR_DIE(cuEventRecord(e, nullptr));
    OR_DIE(cuEventSynchronize(e));
    OR_DIE(cuEventDestroy(e));
    ++kernels;
  }
  OR_DIE(cuCtxSynchronize());
  ++kernels;
  Say("done kernels " + std::to_string(kernels));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "preinit") return PreInit();
  if (mode == "devices") return Devices();
  if (mode == "hold" && argc == 5) {
    return Hold(std::atoi(argv[2]), std::strtoull(argv[3], nullptr, 10),
                static_cast<uint32_t>(std::strtoul(argv[4], nullptr, 0)));
  }
  if (mode == "busy" && argc == 4) {
    return Busy(std::strtoull(argv[2], nullptr, 10), std::strtoull(argv[3], nullptr, 10));
  }
  std::fprintf(stderr, "usage: see the comment at the top of sim_worker.cc\n");
  return 64;
}
