// gslice_remote_probe: a driver-API program the remote tests run twice - on the simulated
// driver directly and through the forwarding client against gslice-remoted --sim - and whose
// output must be the same. It prints only what the driver answers (no addresses, no times).
//
//   probe check         devices, contexts, memory, copies, memsets, streams, events,
//                       modules, libraries, launches (kernelParams and extra), entry points,
//                       memory pools, virtual memory management
//   probe alloc BYTES   prints the result of one cuMemAlloc of BYTES
//   probe hold BYTES    allocates, prints "held", waits for stdin to close
//   probe vmm BYTES     prints the result of one cuMemCreate of BYTES
//   probe busy MS       allocates 64 MiB, prints "busy", runs a kernel of MS ms, prints
//                       cuCtxSynchronize's result
//   probe unforwarded   prints the result of cuMemAllocManaged (not forwarded)
//   probe bigcopy BYTES copies BYTES to the device and back, plainly and on a stream
//   probe repeat        asks for the same device attribute three times
//   probe deferred      launches a function that does not exist, synchronises twice
//   probe maps          prints every mapped file whose name holds "libcuda"
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

namespace {

const char* Name(CUresult r) {
  const char* n = nullptr;
  if (cuGetErrorName(r, &n) != CUDA_SUCCESS || n == nullptr) return "?";
  return n;
}

#define CK(call)                                                        \
  do {                                                                  \
    CUresult r_ = (call);                                               \
    if (r_ != CUDA_SUCCESS) {                                           \
      printf("FAILED %s: %s (line %d)\n", #call, Name(r_), __LINE__);   \
      exit(1);                                                          \
    }                                                                   \
  } while (0)

void Expect(bool ok, const char* what) {
  if (!ok) {
    printf("FAILED %s\n", what);
    exit(1);
  }
}

uint64_t Checksum(const std::vector<uint8_t>& v) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : v) h = (h ^ b) * 1099511628211ull;
  return h;
}

CUcontext Setup(CUdevice* dev) {
  CK(cuInit(0));
  CK(cuDeviceGet(dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, *dev));
  CK(cuCtxSetCurrent(ctx));
  return ctx;
}

void Verify(CUdeviceptr p, uint32_t pattern, size_t words, const char* what) {
  std::vector<uint32_t> host(words);
  CK(cuMemcpyDtoH(host.data(), p, words * 4));
  for (uint32_t v : host) Expect(v == pattern, what);
}

int Check() {
  CK(cuInit(0));
  int version = 0, count = 0;
  CK(cuDriverGetVersion(&version));
  CK(cuDeviceGetCount(&count));
  printf("driver %d, %d device(s)\n", version, count);
  for (int i = 0; i < count; ++i) {
    CUdevice d;
    CK(cuDeviceGet(&d, i));
    char name[128] = {}, bus[32] = {};
    size_t total = 0;
    CUuuid uuid;
    int sms = 0, major = 0, minor = 0;
    CK(cuDeviceGetName(name, sizeof name, d));
    CK(cuDeviceTotalMem(&total, d));
    CK(cuDeviceGetUuid(&uuid, d));
    CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d));
    CK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d));
    CK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d));
    CK(cuDeviceGetPCIBusId(bus, sizeof bus, d));
    printf("device %d: %s, %zu bytes, %d SMs, sm_%d%d, %s, uuid", i, name, total, sms, major, minor, bus);
    for (unsigned char b : uuid.bytes) printf("%02x", b);
    printf("\n");
  }
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx = nullptr, current = nullptr;
  CK(cuCtxCreate(&ctx, nullptr, 0, dev));
  CK(cuCtxGetCurrent(&current));
  Expect(current == ctx, "cuCtxCreate makes the context current");
  CUdevice ctx_dev = -1;
  CK(cuCtxGetDevice(&ctx_dev));
  printf("context on device %d\n", ctx_dev);
  size_t free_b = 0, total_b = 0;
  CK(cuMemGetInfo(&free_b, &total_b));
  printf("memory: %zu free of %zu\n", free_b, total_b);

  constexpr size_t kBytes = 1 << 20, kWords = kBytes / 4;
  CUdeviceptr a = 0, b = 0;
  CK(cuMemAlloc(&a, kBytes));
  CK(cuMemAlloc(&b, kBytes));
  CK(cuMemsetD8(a, 0x5a, kBytes));
  std::vector<uint8_t> bytes(kBytes);
  CK(cuMemcpyDtoH(bytes.data(), a, kBytes));
  printf("memset8 checksum %016llx\n", static_cast<unsigned long long>(Checksum(bytes)));
  CK(cuMemsetD32(a, 0x01020304u, kWords));
  Verify(a, 0x01020304u, kWords, "cuMemsetD32");
  for (size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  CK(cuMemcpyHtoD(a, bytes.data(), kBytes));
  CK(cuMemcpyDtoD(b, a, kBytes));
  std::vector<uint8_t> back(kBytes);
  CK(cuMemcpyDtoH(back.data(), b, kBytes));
  Expect(back == bytes, "HtoD, DtoD, DtoH round trip");
  printf("copies: %016llx\n", static_cast<unsigned long long>(Checksum(back)));

  CUstream stream;
  CUevent start, end;
  CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CK(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CK(cuEventCreate(&end, CU_EVENT_DEFAULT));
  CK(cuEventRecord(start, stream));
  CK(cuMemcpyHtoDAsync(b, bytes.data(), kBytes, stream));
  CK(cuMemsetD32Async(a, 0xabcdef01u, kWords, stream));
  CK(cuMemcpyDtoDAsync(b, a, kBytes / 2, stream));
  std::vector<uint8_t> async_back(kBytes);
  CK(cuMemcpyDtoHAsync(async_back.data(), b, kBytes, stream));
  CK(cuEventRecord(end, stream));
  CK(cuStreamSynchronize(stream));
  CK(cuEventSynchronize(end));
  CK(cuStreamQuery(stream));
  CK(cuEventQuery(end));
  float ms = -1;
  CK(cuEventElapsedTime(&ms, start, end));
  Expect(ms >= 0, "elapsed time");
  printf("async copies: %016llx, events ok\n", static_cast<unsigned long long>(Checksum(async_back)));

  CUmodule module;
  CUfunction busy, fill;
  CK(gslice::test::LoadTestKernels(&module, &busy, &fill));
  CK(gslice::test::LaunchFill(fill, a, 0x11111111u, kWords, stream));
  CK(cuStreamSynchronize(stream));
  Verify(a, 0x11111111u, kWords, "fill through kernelParams");
  struct {
    CUdeviceptr dst;
    uint32_t pattern;
    uint64_t count;
  } packed = {b, 0x22222222u, kWords};
  size_t packed_size = sizeof packed;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
                   CU_LAUNCH_PARAM_END};
  CK(cuLaunchKernel(fill, 64, 1, 1, 256, 1, 1, 0, nullptr, nullptr, extra));
  CK(cuCtxSynchronize());
  Verify(b, 0x22222222u, kWords, "fill through extra");
  CUlaunchAttribute priority = {};
  priority.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  priority.value.priority = -1;
  CUlaunchConfig config = {};
  config.gridDimX = 64;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 256;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = stream;
  config.attrs = &priority;
  config.numAttrs = 1;
  uint32_t ex_pattern = 0x66666666u;
  uint64_t ex_count = kWords;
  void* ex_args[] = {&a, &ex_pattern, &ex_count};
  CK(cuLaunchKernelEx(&config, fill, ex_args, nullptr));
  CK(cuStreamSynchronize(stream));
  Verify(a, 0x66666666u, kWords, "fill through cuLaunchKernelEx");
  int threads = 0;
  CK(cuFuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fill));
  printf("launches ok, %d threads per block at most\n", threads);
  CUfunction missing;
  printf("missing function: %s\n", Name(cuModuleGetFunction(&missing, module, "gslice_nope")));
  CK(cuModuleUnload(module));

  // A module from a file, and a host function in stream order.
  const std::string image_path = "/tmp/gslice-probe-" + std::to_string(getpid()) + ".module";
  if (FILE* f = fopen(image_path.c_str(), "w")) {
    fputs(gslice::test::SimTestImage(), f);
    fclose(f);
  }
  CUmodule from_file;
  CUfunction fill_from_file;
  CK(cuModuleLoad(&from_file, image_path.c_str()));
  unlink(image_path.c_str());
  CK(cuModuleGetFunction(&fill_from_file, from_file, "gslice_fill"));
  CK(gslice::test::LaunchFill(fill_from_file, b, 0x77777777u, kWords, stream));
  struct Seen {
    CUdeviceptr p;
    size_t words;
    bool ran = false;
  } seen{b, kWords};
  CK(cuLaunchHostFunc(stream, [](void* arg) { static_cast<Seen*>(arg)->ran = true; }, &seen));
  CK(cuStreamSynchronize(stream));
  Expect(seen.ran, "the host function ran");
  Verify(b, 0x77777777u, kWords, "fill from a module file");
  CK(cuModuleUnload(from_file));
  printf("module file: %s, host function ok\n", Name(cuModuleLoad(&from_file, "/nonexistent/module")));

  CUmodule module_ex;
  CK(cuModuleLoadDataEx(&module_ex, gslice::test::SimTestImage(), 0, nullptr, nullptr));
  CK(cuModuleUnload(module_ex));
  CUlibrary library;
  CUkernel kernel;
  CUfunction from_kernel;
  CK(cuLibraryLoadData(&library, gslice::test::SimTestImage(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CK(cuLibraryGetKernel(&kernel, library, "gslice_fill"));
  CK(cuKernelGetFunction(&from_kernel, kernel));
  CK(gslice::test::LaunchFill(from_kernel, a, 0x33333333u, kWords, nullptr));
  CK(cuCtxSynchronize());
  Verify(a, 0x33333333u, kWords, "fill from a library");
  CK(cuLibraryUnload(library));
  printf("library ok\n");

  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  CK(cuGetProcAddress("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  CUdeviceptr c = 0;
  CK(reinterpret_cast<decltype(&cuMemAlloc_v2)>(fn)(&c, 4096));
  CK(cuMemFree(c));
  printf("cuGetProcAddress: status %d, allocates\n", static_cast<int>(status));
  printf("unknown entry point: %s\n",
         Name(cuGetProcAddress("cuNoSuchFunction", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status)));
  CUdeviceptr zero = 0;
  printf("zero-byte allocation: %s\n", Name(cuMemAlloc(&zero, 0)));

  // Page-locked host memory as copy source and destination.
  void* pinned = nullptr;
  CK(cuMemHostAlloc(&pinned, kBytes, CU_MEMHOSTALLOC_PORTABLE));
  std::memcpy(pinned, bytes.data(), kBytes);
  CK(cuMemcpyHtoDAsync(a, pinned, kBytes, stream));
  std::vector<uint8_t> registered(kBytes);
  CK(cuMemHostRegister(registered.data(), kBytes, 0));
  printf("register twice: %s\n", Name(cuMemHostRegister(registered.data(), kBytes, 0)));
  CK(cuMemcpyDtoHAsync(registered.data(), a, kBytes, stream));
  CK(cuStreamSynchronize(stream));
  Expect(registered == bytes, "copies through page-locked memory");
  CK(cuMemHostUnregister(registered.data()));
  printf("unregister twice: %s\n", Name(cuMemHostUnregister(registered.data())));
  CK(cuMemFreeHost(pinned));
  printf("free twice: %s\n", Name(cuMemFreeHost(pinned)));
  printf("page-locked host memory ok\n");

  CUcontext stream_ctx = nullptr;
  CK(cuStreamGetCtx(stream, &stream_ctx));
  Expect(stream_ctx == ctx, "cuStreamGetCtx");
  CUstreamCaptureStatus capture;
  CK(cuStreamIsCapturing(stream, &capture));
  unsigned long long ctx_id = 0;
  CK(cuCtxGetId(ctx, &ctx_id));
  char bus[32] = {};
  CUdevice by_bus = -1;
  CK(cuDeviceGetPCIBusId(bus, sizeof bus, dev));
  CK(cuDeviceGetByPCIBusId(&by_bus, bus));
  printf("stream capture status %d, device by bus id %d\n", static_cast<int>(capture), by_bus);

  // Stream-ordered allocation from the default pool.
  CUmemoryPool pool;
  CK(cuDeviceGetDefaultMemPool(&pool, dev));
  cuuint64_t threshold = 1 << 20, got = 0;
  CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
  CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &got));
  Expect(got == threshold, "pool attribute");
  int reuse = -1;
  CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
  CUdeviceptr pooled = 0;
  CK(cuMemAllocAsync(&pooled, kBytes, stream));
  CK(cuMemsetD32Async(pooled, 0x44444444u, kWords, stream));
  CK(cuStreamSynchronize(stream));
  Verify(pooled, 0x44444444u, kWords, "stream-ordered allocation");
  CK(cuMemFreeAsync(pooled, stream));
  CK(cuStreamSynchronize(stream));
  CK(cuMemPoolTrimTo(pool, 0));
  printf("pool ok: threshold %llu, reuse %d\n", static_cast<unsigned long long>(got), reuse);

  // Virtual memory management: reserve, create, map, grant access, use, take apart.
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t granularity = 0;
  CK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  const size_t vsize = 2 * granularity;
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle handle;
  CK(cuMemAddressReserve(&va, vsize, 0, 0, 0));
  CK(cuMemCreate(&handle, vsize, &prop, 0));
  CK(cuMemMap(va, vsize, 0, handle, 0));
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CK(cuMemSetAccess(va, vsize, &access, 1));
  CK(cuMemsetD32(va, 0x55555555u, vsize / 4));
  Verify(va, 0x55555555u, vsize / 4, "VMM memory");
  CK(cuMemUnmap(va, vsize));
  CK(cuMemRelease(handle));
  CK(cuMemAddressFree(va, vsize));
  printf("vmm ok: granularity %zu\n", granularity);

  CK(cuEventDestroy(start));
  CK(cuEventDestroy(end));
  CK(cuStreamDestroy(stream));
  CK(cuMemFree(a));
  CK(cuMemFree(b));
  CK(cuCtxDestroy(ctx));
  CUcontext primary;
  CK(cuDevicePrimaryCtxRetain(&primary, dev));
  CK(cuDevicePrimaryCtxRelease(dev));
  printf("check done\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc > 1 ? argv[1] : "check";
  if (mode == "check") return Check();
  CUdevice dev;
  if (mode == "alloc" || mode == "hold") {
    if (argc < 3) return 2;
    Setup(&dev);
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc(&p, strtoull(argv[2], nullptr, 10));
    printf("%s\n", mode == "alloc" ? Name(r) : (r == CUDA_SUCCESS ? "held" : Name(r)));
    if (mode == "hold") {
      char buf[64];
      while (read(0, buf, sizeof buf) > 0) {
      }
    }
    return 0;
  }
  if (mode == "vmm") {
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
  if (mode == "busy") {
    if (argc < 3) return 2;
    Setup(&dev);
    CUdeviceptr held = 0;
    CK(cuMemAlloc(&held, 64 << 20));
    CUmodule module;
    CUfunction busy, fill;
    CK(gslice::test::LoadTestKernels(&module, &busy, &fill));
    CK(gslice::test::LaunchBusy(busy, strtoull(argv[2], nullptr, 10) * 1000, nullptr));
    // A query waits for its answer, so the kernel runs when "busy" is printed.
    printf("query %s\n", Name(cuStreamQuery(nullptr)));
    printf("busy\n");
    printf("%s\n", Name(cuCtxSynchronize()));
    return 0;
  }
  if (mode == "bigcopy") {
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
  if (mode == "repeat") {
    // The same device query three times (the client asks the server once).
    CK(cuInit(0));
    int sms[3] = {};
    for (int& v : sms) CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
    printf("%d %d %d\n", sms[0], sms[1], sms[2]);
    return 0;
  }
  if (mode == "deferred") {
    // A launch of a function that does not exist, through extra (no parameter layout needed).
    Setup(&dev);
    uint64_t arg = 1;
    size_t size = sizeof arg;
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &arg, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    CUresult launch = cuLaunchKernel(reinterpret_cast<CUfunction>(0x1234), 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, extra);
    CUresult first = cuCtxSynchronize();
    CUresult second = cuCtxSynchronize();
    printf("launch %s, sync %s, sync %s\n", Name(launch), Name(first), Name(second));
    return 0;
  }
  if (mode == "unforwarded") {
    Setup(&dev);
    CUdeviceptr p = 0;
    printf("%s\n", Name(cuMemAllocManaged(&p, 4096, CU_MEM_ATTACH_GLOBAL)));
    return 0;
  }
  if (mode == "threads") {
    // One thread synchronises with a long kernel on its per-thread default stream; another
    // makes calls meanwhile, on its own (idle) per-thread default stream.
    if (argc < 3) return 2;
    const CUcontext ctx = Setup(&dev);
    CUmodule module;
    CUfunction busy, fill;
    CK(gslice::test::LoadTestKernels(&module, &busy, &fill));
    std::atomic<bool> launched{false}, synchronised{false};
    CUresult sync = CUDA_ERROR_UNKNOWN;
    std::thread waiter([&] {
      CK(cuCtxSetCurrent(ctx));
      CK(gslice::test::LaunchBusy(busy, strtoull(argv[2], nullptr, 10) * 1000, CU_STREAM_PER_THREAD));
      launched = true;
      sync = cuStreamSynchronize(CU_STREAM_PER_THREAD);
      synchronised = true;
    });
    while (!launched) usleep(1000);
    usleep(500 * 1000);  // the other thread is in its synchronisation by now
    int calls = 0;
    CUresult own = CUDA_ERROR_UNKNOWN;
    CUdeviceptr held[10] = {};
    for (CUdeviceptr& p : held) {  // (no frees: a free waits for the context's work)
      size_t free_bytes = 0, total = 0;
      CUdevice mine;
      CK(cuMemAlloc(&p, 1 << 20));
      CK(cuMemGetInfo(&free_bytes, &total));
      CK(cuCtxGetDevice(&mine));
      own = cuStreamQuery(CU_STREAM_PER_THREAD);
      calls += 4;
    }
    const bool during = !synchronised;
    waiter.join();
    for (CUdeviceptr p : held) CK(cuMemFree(p));
    printf("%d calls, own per-thread stream %s, done while the other thread synchronised: %s\n", calls, Name(own),
           during ? "yes" : "no");
    printf("synchronised: %s\n", Name(sync));
    return 0;
  }
  if (mode == "handoff") {
    // One thread queues work on a stream; another, told it returned, synchronises the stream
    // and reads the result: the first thread's work must be in the stream before the second's.
    const CUcontext ctx = Setup(&dev);
    CUstream stream;
    CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p = 0;
    const size_t words = 4096;
    CK(cuMemAlloc(&p, words * 4));
    std::atomic<uint32_t> queued{0};
    std::thread writer([&] {
      CK(cuCtxSetCurrent(ctx));
      for (uint32_t i = 1; i <= 50; ++i) {
        CK(cuMemsetD32Async(p, i, words, stream));
        queued = i;
        while (queued != 0) usleep(100);
      }
    });
    int wrong = 0;
    for (uint32_t i = 1; i <= 50; ++i) {
      while (queued != i) usleep(100);
      CK(cuStreamSynchronize(stream));
      std::vector<uint32_t> host(words);
      CK(cuMemcpyDtoH(host.data(), p, words * 4));
      for (uint32_t v : host) wrong += v != i;
      queued = 0;
    }
    writer.join();
    printf("handoff: %d words wrong\n", wrong);
    return 0;
  }
  if (mode == "maps") {
    cuInit(0);
    FILE* f = fopen("/proc/self/maps", "r");
    char line[4096];
    std::set<std::string> seen;
    while (f != nullptr && fgets(line, sizeof line, f) != nullptr) {
      const char* path = strchr(line, '/');
      if (path != nullptr && strstr(path, "libcuda") != nullptr) seen.insert(path);
    }
    if (f != nullptr) fclose(f);
    for (const std::string& s : seen) printf("%s", s.c_str());
    return 0;
  }
  return 2;
}
