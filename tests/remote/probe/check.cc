// gslice_remote_probe check: the driver API at large, as a program sees it.
#include "probe.h"

#include <string.h>

#include <cstring>
#include <string>
#include <vector>

namespace gslice::probe {

int Check(int, char**) {
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

}  // namespace gslice::probe
