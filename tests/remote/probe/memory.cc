// gslice_remote_probe's memory and copy modes: allocations, copies larger than a message, a
// forked child, page-locked memory, copies in stream order.
#include "probe.h"

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace gslice::probe {

// alloc BYTES, hold BYTES
int Alloc(int argc, char** argv) {
  CUdevice dev;
  if (argc < 3) return 2;
  Setup(&dev);
  CUdeviceptr p = 0;
  CUresult r = cuMemAlloc(&p, strtoull(argv[2], nullptr, 10));
  printf("%s\n", std::string(argv[1]) == "alloc" ? Name(r) : (r == CUDA_SUCCESS ? "held" : Name(r)));
  if (std::string(argv[1]) == "hold") {
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
  }
  return 0;
}

int Vmm(int argc, char** argv) {
  CUdevice dev;
  if (argc < 3) return 2;
  Setup(&dev);
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  CUmemGenericAllocationHandle handle;
  printf("%s\n", Name(cuMemCreate(&handle, strtoull(argv[2], nullptr, 10), &prop, 0)));
  return 0;
}

int BigCopy(int argc, char** argv) {
  CUdevice dev;
  // Copies larger than one message carries, both ways, synchronous and on a stream.
  if (argc < 3) return 2;
  Setup(&dev);
  const size_t bytes = strtoull(argv[2], nullptr, 10);
  CUdeviceptr p = 0;
  CK(cuMemAlloc(&p, bytes));
  std::vector<uint8_t> out(bytes), in(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(i * 131 + (i >> 20));
  CK(cuMemcpyHtoD(p, out.data(), bytes));
  CK(cuMemcpyDtoH(in.data(), p, bytes));
  Expect(in == out, "large synchronous copies");
  CUstream stream;
  CK(cuStreamCreate(&stream, 0));
  for (auto& b : out) b = static_cast<uint8_t>(~b);
  CK(cuMemcpyHtoDAsync(p, out.data(), bytes, stream));
  CK(cuMemcpyDtoHAsync(in.data(), p, bytes, stream));
  CK(cuStreamSynchronize(stream));
  Expect(in == out, "large copies on a stream");
  printf("bigcopy ok\n");
  return 0;
}

int Fork(int, char**) {
  CUdevice dev;
  // A child forked after the parent's calls uses the driver on its own; the parent's memory
  // and connection are untouched by it.
  Setup(&dev);
  constexpr size_t kWords = 1 << 18;
  CUdeviceptr p = 0;
  CK(cuMemAlloc(&p, kWords * 4));
  CK(cuMemsetD32(p, 0x11111111u, kWords));
  fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    CUdeviceptr q = 0;
    CK(cuCtxSetCurrent(nullptr));  // the parent's context is not the child's
    Setup(&dev);
    CK(cuMemAlloc(&q, kWords * 4));
    CK(cuMemsetD32(q, 0x22222222u, kWords));
    Verify(q, 0x22222222u, kWords, "the child's memory");
    printf("child ok\n");
    fflush(stdout);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  Expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's calls");
  Verify(p, 0x11111111u, kWords, "the parent's memory after the child's calls");
  printf("parent ok\n");
  return 0;
}

int Unforwarded(int, char**) {
  CUdevice dev;
  Setup(&dev);
  CUdeviceptr p = 0;
  printf("%s\n", Name(cuMemAllocManaged(&p, 4096, CU_MEM_ATTACH_GLOBAL)));
  // The program goes on: ordinary memory still works.
  CK(cuMemAlloc(&p, 1 << 20));
  CK(cuMemsetD32(p, 0x5a5a5a5au, (1 << 20) / 4));
  Verify(p, 0x5a5a5a5au, (1 << 20) / 4, "after a refusal");
  printf("then cuMemAlloc, memset, copy: ok\n");
  return 0;
}

int HostMap(int, char**) {
  CUdevice dev;
  Setup(&dev);
  void* pinned = nullptr;
  CK(cuMemHostAlloc(&pinned, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
  CUdeviceptr mapped = 0;
  printf("%s\n", Name(cuMemHostGetDevicePointer(&mapped, pinned, 0)));
  CUdeviceptr p = 0;
  printf("then cuMemAlloc: %s\n", Name(cuMemAlloc(&p, 4096)));
  return 0;
}

// Page-locked memory of cuMemHostAlloc as the driver lets programs use it (see the top).
int HostShare(int argc, char** argv) {
  const bool stats = argc > 2 && std::string(argv[2]) == "stats";
  CUdevice dev;
  Setup(&dev);
  CUmodule module;
  CUfunction busy, fill;
  CK(gslice::test::LoadTestKernels(&module, &busy, &fill));
  constexpr size_t kBytes = 3 * 4096 + 100;  // not whole pages
  void* pinned = nullptr;
  CK(cuMemHostAlloc(&pinned, kBytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  auto* bytes = static_cast<uint8_t*>(pinned);
  CUdeviceptr mapped = 0;
  const CUresult got = cuMemHostGetDevicePointer(&mapped, pinned, 0);
  printf("device pointer: %s%s\n", Name(got),
         got != CUDA_SUCCESS ? "" : mapped == reinterpret_cast<CUdeviceptr>(pinned) ? ", the host pointer" : ", another");
  if (got == CUDA_SUCCESS) {
    std::memset(bytes, 0, kBytes);
    CK(cuMemsetD8(mapped, 0x5a, 4096));
    CK(gslice::test::LaunchFill(fill, mapped + 4096, 0x01020304u, 1024, nullptr));
    CK(cuCtxSynchronize());
    bool seen = true;
    for (size_t i = 0; i < 4096; ++i) seen = seen && bytes[i] == 0x5a;
    for (size_t i = 0; i < 1024; ++i) {
      uint32_t v = 0;
      std::memcpy(&v, bytes + 4096 + 4 * i, sizeof v);
      seen = seen && v == 0x01020304u;
    }
    printf("memset and kernel through it: %s\n", seen ? "seen on the host" : "NOT seen");
    CUdeviceptr attribute = 0;
    CK(cuPointerGetAttribute(&attribute, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, reinterpret_cast<CUdeviceptr>(bytes + 8)));
    printf("device pointer attribute: %s\n", attribute == mapped + 8 ? "matches" : "differs");
  }
  // Asynchronous copies in stream order: host -> device, a kernel over it, device -> host.
  using StatsFn = void (*)(uint64_t*);
  auto read_stats = reinterpret_cast<StatsFn>(dlsym(RTLD_DEFAULT, "gslice_remote_stats"));
  CUstream stream;
  CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a = 0;
  CK(cuMemAlloc(&a, kBytes));
  for (size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 1);
  uint64_t waited = 0;  // round trips of the two copies
  uint64_t before[3] = {}, after[3] = {};
  if (read_stats != nullptr) read_stats(before);
  CK(cuMemcpyHtoDAsync(a, bytes, kBytes, stream));
  if (read_stats != nullptr) read_stats(after);
  waited += after[2] - before[2];
  CK(gslice::test::LaunchFill(fill, a + 4096, 0xa5a5a5a5u, 16, stream));
  if (read_stats != nullptr) read_stats(before);
  CK(cuMemcpyDtoHAsync(bytes + 4096, a, kBytes - 4096, stream));
  if (read_stats != nullptr) read_stats(after);
  waited += after[2] - before[2];
  CK(cuStreamSynchronize(stream));
  bool equal = true;
  for (size_t i = 0; i < kBytes - 4096; ++i) {
    // The device copy of the first bytes, with the kernel's 64 bytes at 4096.
    const uint8_t want = i >= 4096 && i < 4096 + 64 ? 0xa5 : static_cast<uint8_t>(i * 7 + 1);
    equal = equal && bytes[4096 + i] == want;
  }
  printf("asynchronous copies in stream order: %s\n", equal ? "verified" : "WRONG");
  if (stats) printf("copies waited for: %llu\n", static_cast<unsigned long long>(waited));
  // A copy from it captured in a graph reads it at every replay.
  CUstream capture;
  CK(cuStreamCreate(&capture, CU_STREAM_NON_BLOCKING));
  CK(cuStreamBeginCapture(capture, CU_STREAM_CAPTURE_MODE_GLOBAL));
  const CUresult copy = cuMemcpyHtoDAsync(a, bytes, 4096, capture);
  CUgraph graph = nullptr;
  const CUresult end = cuStreamEndCapture(capture, &graph);
  printf("captured copy %s, end capture %s\n", Name(copy), Name(end));
  if (copy == CUDA_SUCCESS && end == CUDA_SUCCESS) {
    CUgraphExec exec;
    CK(cuGraphInstantiate(&exec, graph, 0));
    bool replayed = true;
    for (uint8_t round = 1; round <= 2; ++round) {
      std::memset(bytes, round, 4096);
      CK(cuGraphLaunch(exec, capture));
      CK(cuStreamSynchronize(capture));
      std::vector<uint8_t> back(4096);
      CK(cuMemcpyDtoH(back.data(), a, back.size()));
      for (uint8_t b : back) replayed = replayed && b == round;
    }
    printf("replayed twice: %s\n", replayed ? "each read the memory then" : "WRONG");
    CK(cuGraphExecDestroy(exec));
    CK(cuGraphDestroy(graph));
  }
  CK(cuMemFreeHost(pinned));
  printf("free twice: %s\n", Name(cuMemFreeHost(pinned)));
  CK(cuMemFree(a));
  return 0;
}

int LateCopy(int, char**) {
  constexpr size_t kBytes = 1 << 20;
  const auto [busy, stream, a] = CopySetup(kBytes);
  CK(cuMemsetD8(a, 0x42, kBytes));
  void* pinned = nullptr;
  CK(cuMemAllocHost(&pinned, kBytes));
  auto* bytes = static_cast<uint8_t*>(pinned);
  std::memset(bytes, 0, kBytes);
  auto all = [&](uint8_t v) {
    for (size_t i = 0; i < kBytes; ++i)
      if (bytes[i] != v) return false;
    return true;
  };
  CK(gslice::test::LaunchBusy(busy, 300000, stream));
  CK(cuMemcpyDtoHAsync(bytes, a, kBytes, stream));
  printf("right after the call: %s\n", all(0) ? "not there yet" : "already there");
  CK(cuStreamSynchronize(stream));
  printf("after the synchronisation: %s\n", all(0x42) ? "the device's bytes" : "WRONG");
  CUevent done;
  CK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  CK(gslice::test::LaunchBusy(busy, 100000, stream));
  CK(cuMemsetD8Async(a, 0x17, kBytes, stream));
  CK(cuMemcpyDtoHAsync(bytes, a, kBytes, stream));
  CK(cuEventRecord(done, stream));
  CUresult q;
  while ((q = cuEventQuery(done)) == CUDA_ERROR_NOT_READY) usleep(1000);
  printf("after the event's query said %s: %s\n", Name(q), all(0x17) ? "the device's bytes" : "WRONG");
  CK(cuEventDestroy(done));
  CK(cuMemFreeHost(pinned));
  CK(cuMemFree(a));
  return 0;
}

int Staged(int, char**) {
  constexpr size_t kBytes = 1 << 20;
  const auto [busy, stream, a] = CopySetup(kBytes);
  std::vector<uint8_t> host(kBytes);
  for (size_t i = 0; i < kBytes; ++i) host[i] = static_cast<uint8_t>(i * 13 + 5);
  const std::vector<uint8_t> sent = host;
  CK(gslice::test::LaunchBusy(busy, 400000, stream));
  CK(cuMemcpyHtoDAsync(a, host.data(), kBytes, stream));
  std::fill(host.begin(), host.end(), 0);  // the call has taken the bytes
  const CUresult query = cuStreamQuery(stream);
  printf("the stream right after the copy: %s\n", Name(query));
  CK(cuStreamSynchronize(stream));
  std::vector<uint8_t> back(kBytes);
  CK(cuMemcpyDtoH(back.data(), a, kBytes));
  printf("the copy: %s\n", back == sent ? "the bytes of the call" : "WRONG");
  CK(cuMemFree(a));
  return 0;
}

}  // namespace gslice::probe
