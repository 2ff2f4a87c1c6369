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
//   probe fork          allocates, forks a child that allocates and checks its own memory,
//                       then checks the parent's
//   probe repeat        asks for the same device attribute three times
//   probe deferred      launches a function that does not exist, synchronises twice
//   probe maps          prints every mapped file whose name holds "libcuda"
//   probe tables        the driver's private tables: size headers, context-local storage,
//                       the integrity hash's constant answers, an unknown UUID refused
//   probe graph         captures a memset and a launch on a stream, replays the graph, verifies
//   probe capture-copy  a host-to-device copy on a capturing stream: cuStreamEndCapture's result
//   probe pointer       pointer attributes of device, page-locked and plain host memory
//   probe callbacks     host functions and stream callbacks: their order and status
//   probe settings      context limits and cache config, function attributes, occupancy, stream
//                       attributes, event records with flags, globals: values and results
//   probe memops        stream write-value and wait-value operations
//   probe hostmap       prints cuMemHostGetDevicePointer's result on page-locked memory
//   probe staged        an asynchronous copy from pageable memory behind a long kernel: the
//                       call does not wait for the stream, the buffer may change right after
//                       it, and the copy has the bytes of the call
//   probe late-copy     device-to-host copies on a stream into page-locked memory behind a long
//                       kernel: not there when the call returns, there after the stream's
//                       synchronisation, and after an event query says done
//   probe hostshare [stats]  page-locked memory from cuMemHostAlloc used as the driver allows:
//                       its device pointer (a memset and a kernel write it, the host reads),
//                       asynchronous copies from and to it in stream order, a captured copy
//                       from it replayed; with "stats", how many of the copies were waited for
//   probe nvml          NVML (dlopen'ed): devices, names, memory, processes of a CUDA user
//   probe nvml-missing  prints an NVML call that is not forwarded
//   probe nvml-table    NVML's private table nvidia-smi asks for (nvmlInternalGetExportTable):
//                       its size, the bus id and process slots against the public calls, an
//                       unanswered slot, an unknown table
//   probe kept          answers the client keeps (a context's device, function attributes,
//                       limits, the primary context's state, capture status): each asked
//                       twice, then changed, and asked again: the driver's new answers
//   probe kept-sets     a set of one function's or kernel's attribute: its answers are the
//                       driver's new ones, another function's stay kept; through the client
//                       also "round trips: ..." lines (gslice_remote_stats)
//   probe lt-tables     cuBLASLt's tables: a context's number (tools context slot 4), the
//                       cuBLASLt data slot 4 declined
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gslice/nvml_subset.h"
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

// The private tables as a runtime sees them (answered by the forwarding client).
int Tables() {
  CUdevice dev;
  Setup(&dev);
  auto table = [](std::initializer_list<unsigned> bytes, const void*** out) {
    CUuuid id;
    unsigned i = 0;
    for (unsigned b : bytes) id.bytes[i++] = static_cast<char>(b);
    return cuGetExportTable(static_cast<const void**>(static_cast<void*>(out)), &id);
  };
  const void** cudart = nullptr;
  const void** integrity = nullptr;
  const void** storage = nullptr;
  const void** unknown = reinterpret_cast<const void**>(1);
  CK(table({0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9}, &cudart));
  CK(table({0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2}, &integrity));
  CK(table({0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93}, &storage));
  printf("cudart size %zu, integrity size %zu\n", reinterpret_cast<size_t>(cudart[0]),
         reinterpret_cast<size_t>(integrity[0]));
  bool all = true;
  for (size_t i = 1; i < reinterpret_cast<size_t>(cudart[0]) / sizeof(void*); ++i) all = all && cudart[i] != nullptr;
  printf("cudart slots all set: %s\n", all ? "yes" : "no");
  // An unanswered slot is an error, not a crash.
  using Unknown = CUresult (*)();
  printf("cudart slot 3: %s\n", Name(reinterpret_cast<Unknown>(const_cast<void*>(cudart[3]))()));
  using Check = CUresult (*)(unsigned, unsigned long long, unsigned long long*);
  unsigned long long hash[2] = {0, 0};
  CK(reinterpret_cast<Check>(const_cast<void*>(integrity[1]))(12090, 1784320000ull, hash));
  printf("integrity 0: %016llx %016llx\n", hash[0], hash[1]);
  unsigned long long a[2] = {0, 0}, b[2] = {0, 0};
  CK(reinterpret_cast<Check>(const_cast<void*>(integrity[1]))(12092, 1784320000ull, a));
  CK(reinterpret_cast<Check>(const_cast<void*>(integrity[1]))(12092, 1784320000ull, b));
  printf("integrity 2: %s\n", a[0] == b[0] && a[1] == b[1] && (a[0] | a[1]) != 0 ? "stable" : "unstable");
  using Put = CUresult (*)(CUcontext, void*, void*, void (*)(CUcontext, void*, void*));
  using Get = CUresult (*)(void**, CUcontext, void*);
  using Delete = CUresult (*)(CUcontext, void*);
  int key = 0, value = 0;
  void* got = nullptr;
  CK(reinterpret_cast<Put>(const_cast<void*>(storage[0]))(nullptr, &key, &value, nullptr));
  CK(reinterpret_cast<Get>(const_cast<void*>(storage[2]))(&got, nullptr, &key));
  printf("storage get: %s\n", got == &value ? "the value put" : "wrong");
  CK(reinterpret_cast<Delete>(const_cast<void*>(storage[1]))(nullptr, &key));
  printf("storage after delete: %s\n", Name(reinterpret_cast<Get>(const_cast<void*>(storage[2]))(&got, nullptr, &key)));
  const CUresult refused = table({0x01, 0x02, 0x03, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x05}, &unknown);
  printf("unknown table: %s, %s\n", Name(refused), unknown == nullptr ? "null" : "set");
  return 0;
}

// cuBLASLt's two tables as the client answers them: tools context (21318c60) slot 4, a
// context's number, and cuBLASLt data (1734dc26) slot 4, declined. Prints one line per fact.
int LtTables() {
  CUdevice dev;
  Setup(&dev);
  auto table = [](std::initializer_list<unsigned> bytes, const void*** out) {
    CUuuid id;
    unsigned i = 0;
    for (unsigned b : bytes) id.bytes[i++] = static_cast<char>(b);
    return cuGetExportTable(static_cast<const void**>(static_cast<void*>(out)), &id);
  };
  const void** tls = nullptr;
  const void** tools = nullptr;
  const void** data = nullptr;
  CK(table({0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc}, &tls));
  CK(table({0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2}, &tools));
  CK(table({0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca}, &data));
  const size_t tools_slots = reinterpret_cast<size_t>(tools[0]) / sizeof(void*);
  const size_t data_slots = reinterpret_cast<size_t>(data[0]) / sizeof(void*);
  bool all = true;
  for (size_t i = 1; i < tools_slots; ++i) all = all && tools[i] != nullptr;
  for (size_t i = 1; i < data_slots; ++i) all = all && data[i] != nullptr;
  printf("tools context size %zu, cuBLASLt data size %zu, slots all set: %s\n", reinterpret_cast<size_t>(tools[0]),
         reinterpret_cast<size_t>(data[0]), all ? "yes" : "no");

  // What cuBLASLt does about once per matmul: the thread's context (tools TLS slot 2), then that
  // context's number (tools context slot 4).
  using State = CUresult (*)(void**);
  using Number = CUresult (*)(CUcontext, unsigned long long*);
  const auto state = reinterpret_cast<State>(const_cast<void*>(tls[2]));
  const auto number = reinterpret_cast<Number>(const_cast<void*>(tools[4]));
  void* st = nullptr;
  CK(state(&st));
  CUcontext current = nullptr;
  CK(cuCtxGetCurrent(&current));
  printf("thread context: %s\n", st == current && st != nullptr ? "the current one" : "wrong");
  CK(cuCtxSetCurrent(nullptr));  // Setup's context: none current now
  void* no_ctx = reinterpret_cast<void*>(0x5a5a);
  CK(state(&no_ctx));
  printf("thread context without one: %s\n", no_ctx == nullptr ? "null" : "set");
  unsigned long long none = 99;
  CK(number(nullptr, &none));
  printf("number without a context: %llu\n", none);
  printf("number into nothing: %s\n", Name(number(nullptr, nullptr)));

  CUcontext a = nullptr, b = nullptr, c = nullptr;
  CK(cuCtxCreate(&a, nullptr, 0, dev));
  unsigned long long na = 0, na_again = 0, na_current = 0, nb = 0, nc = 0;
  CK(number(a, &na));
  CK(number(a, &na_again));
  CK(state(&st));
  CK(number(static_cast<CUcontext>(st), &na_current));  // as cuBLASLt asks: the current context (a)
  unsigned long long na_none = 0;
  CK(number(nullptr, &na_none));  // none named: the current context's
  if (na_none != na_current) na_current = 0;
  CK(cuCtxCreate(&b, nullptr, 0, dev));
  CK(number(b, &nb));
  printf("a context's number: %s, the same again: %s, the current one's: %s, another's differs: %s\n",
         na != 0 ? "set" : "0", na_again == na ? "yes" : "no", na_current == na ? "yes" : "no",
         nb != na && nb != 0 ? "yes" : "no");
  CK(cuCtxDestroy(b));
  CK(cuCtxDestroy(a));
  CK(cuCtxCreate(&c, nullptr, 0, dev));
  CK(number(c, &nc));
  printf("a later context's number is new: %s\n", nc != na && nc != nb && nc != 0 ? "yes" : "no");
  CK(cuCtxDestroy(c));

  using Unanswered = CUresult (*)();
  printf("tools context slot 3: %s\n", Name(reinterpret_cast<Unanswered>(const_cast<void*>(tools[3]))()));
  using Data = CUresult (*)(const void**, size_t*);
  const void* bytes = &dev;
  size_t size = 7;
  const CUresult declined = reinterpret_cast<Data>(const_cast<void*>(data[4]))(&bytes, &size);
  printf("cuBLASLt data slot 4: %s, %s, %zu\n", Name(declined), bytes == nullptr ? "null" : "set", size);
  return 0;
}

}  // namespace

int Graph() {
  CUdevice dev;
  Setup(&dev);
  constexpr size_t kWords = 1 << 16;
  CUstream stream;
  CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a = 0, b = 0;
  CK(cuMemAlloc(&a, kWords * 4));
  CK(cuMemAlloc(&b, kWords * 4));
  CUmodule module;
  CUfunction busy, fill;
  CK(gslice::test::LoadTestKernels(&module, &busy, &fill));
  CK(cuMemsetD32(a, 0x01010101u, kWords));
  CK(cuMemsetD32(b, 0x01010101u, kWords));

  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CK(cuThreadExchangeStreamCaptureMode(&mode));
  printf("capture mode was %s\n", mode == CU_STREAM_CAPTURE_MODE_GLOBAL ? "global" : "other");
  CK(cuThreadExchangeStreamCaptureMode(&mode));
  CK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CK(cuStreamIsCapturing(stream, &status));
  cuuint64_t id = 0;
  CUstreamCaptureStatus info = CU_STREAM_CAPTURE_STATUS_NONE;
  size_t deps = 99;
  CK(cuStreamGetCaptureInfo(stream, &info, &id, nullptr, nullptr, nullptr, &deps));
  printf("capturing: %s, info %s, id %s\n", status == CU_STREAM_CAPTURE_STATUS_ACTIVE ? "active" : "not active",
         info == CU_STREAM_CAPTURE_STATUS_ACTIVE ? "active" : "not active", id != 0 ? "set" : "none");
  CUgraph capturing_into = nullptr;
  const CUgraphNode* dep_nodes = reinterpret_cast<const CUgraphNode*>(&deps);
  const CUgraphEdgeData* dep_edges = reinterpret_cast<const CUgraphEdgeData*>(&deps);
  CK(cuStreamGetCaptureInfo(stream, &info, nullptr, &capturing_into, &dep_nodes, &dep_edges, &deps));
  printf("capture info: graph %s, %zu dependencies%s\n", capturing_into != nullptr ? "set" : "none", deps,
         deps == 0 || dep_nodes != nullptr ? "" : " but no array");
  CK(cuMemsetD32Async(a, 0x02020202u, kWords, stream));
  CK(gslice::test::LaunchFill(fill, b, 0x42424242u, kWords, stream));
  CK(cuMemcpyDtoDAsync(a, b, kWords * 2, stream));
  CUgraph graph = nullptr;
  CK(cuStreamEndCapture(stream, &graph));
  CK(cuStreamIsCapturing(stream, &status));
  printf("after capture: %s\n", status == CU_STREAM_CAPTURE_STATUS_NONE ? "not capturing" : "capturing");
  Verify(a, 0x01010101u, kWords, "capture runs nothing");
  Verify(b, 0x01010101u, kWords, "capture runs nothing");
  size_t nodes = 0;
  CK(cuGraphGetNodes(graph, nullptr, &nodes));
  std::vector<CUgraphNode> listed(nodes + 2);
  size_t asked = listed.size();
  CK(cuGraphGetNodes(graph, listed.data(), &asked));
  printf("graph of %zu nodes, listed %zu, last entry %s\n", nodes, asked,
         listed.back() == nullptr ? "empty" : "set");
  CUgraphExec exec = nullptr;
  CK(cuGraphInstantiate(&exec, graph, 0));
  for (int round = 0; round < 3; ++round) {
    CK(cuMemsetD32(a, 0x07070707u, kWords));
    CK(cuMemsetD32(b, 0x07070707u, kWords));
    CK(cuGraphLaunch(exec, stream));
    CK(cuStreamSynchronize(stream));
    std::vector<uint32_t> host(kWords);
    CK(cuMemcpyDtoH(host.data(), a, kWords * 4));
    for (size_t i = 0; i < kWords; ++i) Expect(host[i] == (i < kWords / 2 ? 0x42424242u : 0x02020202u), "replay");
    Verify(b, 0x42424242u, kWords, "replay");
  }
  printf("replayed 3 times: results verified\n");
  CUDA_GRAPH_INSTANTIATE_PARAMS params = {};
  CUgraphExec exec2 = nullptr;
  CK(cuGraphInstantiateWithParams(&exec2, graph, &params));
  printf("instantiate with params: %s\n", params.result_out == CUDA_GRAPH_INSTANTIATE_SUCCESS ? "success" : "error");
  CK(cuGraphUpload(exec2, stream));
  CK(cuGraphLaunch(exec2, stream));
  CK(cuStreamSynchronize(stream));
  CK(cuGraphExecDestroy(exec2));
  CK(cuGraphExecDestroy(exec));
  CK(cuGraphDestroy(graph));
  CK(cuModuleUnload(module));
  return 0;
}

int Pointer() {
  CUdevice dev;
  CUcontext ctx = Setup(&dev);
  CUdeviceptr a = 0;
  CK(cuMemAlloc(&a, 1 << 20));
  unsigned type = 0, managed = 7;
  int ordinal = -1;
  CUdeviceptr start = 0;
  size_t size = 0;
  CUcontext owner = nullptr;
  CK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a + 100));
  CK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, a + 100));
  CK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a + 100));
  CK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, a + 100));
  CK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, a + 100));
  CK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, a + 100));
  printf("device: type %s, managed %u, ordinal %d, range %s, %zu bytes, context %s\n",
         type == CU_MEMORYTYPE_DEVICE ? "device" : "other", managed, ordinal, start == a ? "from the allocation" : "wrong",
         size, owner == ctx ? "current" : "other");
  printf("not a pointer: %s\n", Name(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 16)));

  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                                 CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR};
  unsigned many_type = 0, many_managed = 7;
  CUdeviceptr many_dev = 0, many_start = 0;
  void* data[] = {&many_type, &many_dev, &many_managed, &many_start};
  CK(cuPointerGetAttributes(4, attrs, data, a + 64));
  printf("attributes of device memory: type %s, pointer %s, managed %u, range %s\n",
         many_type == CU_MEMORYTYPE_DEVICE ? "device" : "other", many_dev == a + 64 ? "itself" : "other", many_managed,
         many_start == a ? "from the allocation" : "wrong");
  void* pinned = nullptr;
  CK(cuMemHostAlloc(&pinned, 1 << 16, 0));
  many_type = 0;
  many_start = 0;
  CK(cuPointerGetAttributes(4, attrs, data, reinterpret_cast<CUdeviceptr>(pinned)));
  printf("attributes of page-locked memory: type %s, range %s\n", many_type == CU_MEMORYTYPE_HOST ? "host" : "other",
         many_start == reinterpret_cast<CUdeviceptr>(pinned) ? "from the allocation" : "wrong");
  unsigned pinned_type = 0;
  CK(cuPointerGetAttribute(&pinned_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(pinned) + 8));
  printf("page-locked memory alone: type %s\n", pinned_type == CU_MEMORYTYPE_HOST ? "host" : "other");
  std::vector<char> plain(4096);
  many_type = 99;
  many_dev = 1;
  CK(cuPointerGetAttributes(4, attrs, data, reinterpret_cast<CUdeviceptr>(plain.data())));
  // Not CUDA's memory: unregistered (0), or host where the driver manages pageable memory too.
  printf("attributes of plain memory: %s\n", many_type == 0 || many_type == CU_MEMORYTYPE_HOST ? "not device memory"
                                                                                              : "device memory?");
  CK(cuMemFreeHost(pinned));
  CK(cuMemFree(a));
  return 0;
}

struct Order {
  std::vector<std::string> seen;
  std::vector<CUresult> status;
};

int Callbacks() {
  CUdevice dev;
  Setup(&dev);
  constexpr size_t kWords = 1 << 16;
  CUstream stream;
  CK(cuStreamCreate(&stream, 0));
  CUdeviceptr a = 0;
  CK(cuMemAlloc(&a, kWords * 4));
  CUmodule module;
  CUfunction busy, fill;
  CK(gslice::test::LoadTestKernels(&module, &busy, &fill));
  Order order;
  auto callback = [](CUstream, CUresult status, void* arg) {
    auto* o = static_cast<Order*>(arg);
    o->seen.push_back("callback");
    o->status.push_back(status);
  };
  CK(gslice::test::LaunchFill(fill, a, 0x11111111u, kWords, stream));
  CK(cuStreamAddCallback(stream, callback, &order, 0));
  CK(cuLaunchHostFunc(stream, [](void* arg) { static_cast<Order*>(arg)->seen.push_back("host function"); }, &order));
  CK(gslice::test::LaunchFill(fill, a, 0x22222222u, kWords, stream));
  CK(cuStreamAddCallback(stream, callback, &order, 0));
  printf("flags 1: %s\n", Name(cuStreamAddCallback(stream, callback, &order, 1)));
  CK(cuStreamSynchronize(stream));
  Verify(a, 0x22222222u, kWords, "work after the callbacks ran");
  for (const std::string& s : order.seen) printf("%s\n", s.c_str());
  for (CUresult r : order.status) printf("status %s\n", Name(r));
  CK(cuModuleUnload(module));
  return 0;
}

int Settings() {
  CUdevice dev;
  Setup(&dev);
  size_t stack = 0;
  CK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
  CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, stack * 2));
  size_t doubled = 0;
  CK(cuCtxGetLimit(&doubled, CU_LIMIT_STACK_SIZE));
  printf("stack limit doubled: %s\n", doubled == stack * 2 ? "yes" : "no");
  CK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_L1));
  CUfunc_cache cache = CU_FUNC_CACHE_PREFER_NONE;
  CK(cuCtxGetCacheConfig(&cache));
  printf("cache config prefers L1: %s\n", cache == CU_FUNC_CACHE_PREFER_L1 ? "yes" : "no");
  CUmodule module;
  CUfunction busy, fill;
  CK(gslice::test::LoadTestKernels(&module, &busy, &fill));
  printf("dynamic shared memory 64 KiB: %s\n",
         Name(cuFuncSetAttribute(fill, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 65536)));
  printf("function cache config: %s\n", Name(cuFuncSetCacheConfig(fill, CU_FUNC_CACHE_PREFER_SHARED)));
  CUmodule owner = nullptr;
  CK(cuFuncGetModule(&owner, fill));
  printf("function's module: %s\n", owner == module ? "the loaded one" : "other");
  int blocks = 0;
  CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fill, 256, 0));
  printf("occupancy at 256 threads: %s\n", blocks > 0 ? "positive" : "none");
  CUstream stream;
  CK(cuStreamCreate(&stream, 0));
  CUstreamAttrValue value = {};
  value.priority = -1;
  CK(cuStreamSetAttribute(stream, CU_LAUNCH_ATTRIBUTE_PRIORITY, &value));
  CUstreamAttrValue back = {};
  CK(cuStreamGetAttribute(stream, CU_LAUNCH_ATTRIBUTE_PRIORITY, &back));
  printf("stream priority attribute: %d\n", back.priority);
  CUevent event;
  CK(cuEventCreate(&event, 0));
  CK(cuEventRecordWithFlags(event, stream, 0));
  CK(cuEventSynchronize(event));
  printf("event recorded with flags: %s\n", Name(cuEventQuery(event)));
  CUdeviceptr global = 0;
  size_t global_size = 0;
  printf("module global: %s\n", Name(cuModuleGetGlobal(&global, &global_size, module, "gslice_no_such_global")));
  CK(cuModuleUnload(module));
  return 0;
}

const char* CaptureName(CUstreamCaptureStatus s) {
  return s == CU_STREAM_CAPTURE_STATUS_NONE ? "none" : s == CU_STREAM_CAPTURE_STATUS_ACTIVE ? "active" : "invalidated";
}

// Every answer the client may keep, asked twice, changed, asked again.
int Kept() {
  CUdevice dev;
  const CUcontext ctx = Setup(&dev);
  for (int i = 0; i < 2; ++i) {
    CUdevice got = -1, got_v2 = -1;
    CK(cuCtxGetDevice(&got));
    CK(cuCtxGetDevice_v2(&got_v2, ctx));
    printf("context's device: %d %d\n", got, got_v2);
  }
  unsigned int flags = 0;
  int active = 0;
  CK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
  printf("primary context: flags %u active %d\n", flags, active);
  CK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
  CK(cuDevicePrimaryCtxSetFlags(dev, CU_CTX_SCHED_BLOCKING_SYNC));
  CK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
  printf("primary context after its flags were set: flags %u active %d\n", flags, active);
  CUcontext primary = nullptr;
  CK(cuDevicePrimaryCtxRetain(&primary, dev));
  CK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
  printf("primary context retained: active %d\n", active);
  CK(cuDevicePrimaryCtxRelease(dev));
  CK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
  printf("primary context released: active %d\n", active);

  size_t stack = 0, again = 0;
  CK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
  CK(cuCtxGetLimit(&again, CU_LIMIT_STACK_SIZE));
  CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, stack + 1024));
  CK(cuCtxGetLimit(&again, CU_LIMIT_STACK_SIZE));
  printf("stack limit after a set: %s\n", again == stack + 1024 ? "the new one" : "stale");

  CUmodule module;
  CUfunction busy, fill;
  CK(gslice::test::LoadTestKernels(&module, &busy, &fill));
  int smem = 0;
  for (int value : {1024, 1024, 2048, 2048, 1024}) {
    CK(cuFuncGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fill));
    CK(cuFuncSetAttribute(fill, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, value));
    CK(cuFuncGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fill));
    printf("dynamic shared memory set to %d: reads %d\n", value, smem);
  }
  printf("dynamic shared memory set out of range: %s\n",
         Name(cuFuncSetAttribute(fill, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1 << 30)));
  CK(cuFuncGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fill));
  printf("then reads %d\n", smem);
  int blocks = 0, blocks_again = 0;
  CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fill, 256, 0));
  CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_again, fill, 256, 0));
  printf("occupancy asked twice: %s\n", blocks == blocks_again && blocks > 0 ? "the same" : "differs");

  // A function of a module unloaded and loaded again: the new handle works.
  CK(cuModuleUnload(module));
  CK(gslice::test::LoadTestKernels(&module, &busy, &fill));
  CUfunction again_fill = nullptr;
  CK(cuModuleGetFunction(&again_fill, module, "gslice_fill"));
  CK(cuModuleGetFunction(&again_fill, module, "gslice_fill"));
  CK(cuFuncGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, again_fill));
  printf("reloaded function's dynamic shared memory: %d\n", smem);
  CUdeviceptr words = 0;
  CK(cuMemAlloc(&words, 4096));
  CK(gslice::test::LaunchFill(again_fill, words, 0x5a5a5a5au, 1024, nullptr));
  CK(cuCtxSynchronize());
  uint32_t word = 0;
  CK(cuMemcpyDtoH(&word, words + 4092, 4));
  printf("reloaded function fills: %s\n", word == 0x5a5a5a5au ? "yes" : "no");

  CUstream stream, other;
  CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  CK(cuStreamIsCapturing(stream, &status));
  printf("before a capture: %s\n", CaptureName(status));
  CK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED));
  CK(cuStreamIsCapturing(stream, &status));
  printf("capturing stream: %s\n", CaptureName(status));
  CK(cuStreamIsCapturing(other, &status));
  printf("another stream meanwhile: %s\n", CaptureName(status));
  CK(cuMemsetD32Async(words, 1, 1024, stream));
  CUgraph graph = nullptr;
  CK(cuStreamEndCapture(stream, &graph));
  CK(cuStreamIsCapturing(stream, &status));
  printf("after the capture: %s\n", CaptureName(status));
  CK(cuGraphDestroy(graph));
  CK(cuStreamDestroy(other));
  printf("a destroyed stream: %s\n", Name(cuStreamIsCapturing(other, &status)));
  CK(cuStreamDestroy(stream));
  CK(cuMemFree(words));
  CK(cuModuleUnload(module));
  return 0;
}

// The client's round trips so far (gslice_remote_stats), or -1 on the driver itself.
long long RoundTrips() {
  using StatsFn = void (*)(uint64_t[3]);
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto fn = lib != nullptr ? reinterpret_cast<StatsFn>(dlsym(lib, "gslice_remote_stats")) : nullptr;
  if (fn == nullptr) return -1;
  uint64_t out[3] = {};
  fn(out);
  return static_cast<long long>(out[2]);
}

// Prints how many round trips were made since *since (through the client only), and resets it.
void PrintTrips(const char* what, long long* since) {
  const long long now = RoundTrips();
  if (now >= 0) printf("round trips: %s: %lld\n", what, now - *since);
  *since = RoundTrips();
}

// A set of one handle's attribute: what it changes is asked again, the rest stays kept.
int KeptSets() {
  CUdevice dev;
  Setup(&dev);
  constexpr CUfunction_attribute kSmem = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
  CUmodule module;
  CUfunction busy, fill;  // B and A
  CK(gslice::test::LoadTestKernels(&module, &busy, &fill));
  int a = 0, b = 0, blocks = 0;
  CK(cuFuncGetAttribute(&a, kSmem, fill));
  CK(cuFuncGetAttribute(&b, kSmem, busy));
  CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, busy, 256, 0));
  long long trips = RoundTrips();
  const int set_to = a + 4096;
  CK(cuFuncSetAttribute(fill, kSmem, set_to));
  PrintTrips("a set of A's attribute to a new value", &trips);
  CK(cuFuncGetAttribute(&b, kSmem, busy));
  CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, busy, 256, 0));
  printf("B after a set on A: reads %d, occupancy %d\n", b, blocks);
  PrintTrips("B's attribute and occupancy after a set on A", &trips);
  CK(cuFuncGetAttribute(&a, kSmem, fill));
  printf("A after its set: reads %s\n", a == set_to ? "the new value" : "a stale value");
  PrintTrips("A's attribute after its set", &trips);

  // A library's kernel and its function: a set on either makes both answers the driver's.
  CUlibrary library;
  CUkernel kernel;
  CUfunction from_kernel;
  CK(cuLibraryLoadData(&library, gslice::test::SimTestImage(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CK(cuLibraryGetKernel(&kernel, library, "gslice_fill"));
  CK(cuKernelGetFunction(&from_kernel, kernel));
  int k = 0, f = 0;
  CK(cuKernelGetAttribute(&k, kSmem, kernel, dev));
  CK(cuFuncGetAttribute(&f, kSmem, from_kernel));
  CK(cuFuncGetAttribute(&b, kSmem, busy));
  trips = RoundTrips();
  CK(cuKernelSetAttribute(kSmem, 8192, kernel, dev));
  CK(cuFuncGetAttribute(&f, kSmem, from_kernel));
  CK(cuKernelGetAttribute(&k, kSmem, kernel, dev));
  printf("after a kernel set: its function reads %d, the kernel %d\n", f, k);
  PrintTrips("a kernel set, its function's and its attribute", &trips);
  CK(cuFuncGetAttribute(&b, kSmem, busy));
  printf("B after a kernel set: reads %d\n", b);
  PrintTrips("B's attribute after a kernel set", &trips);
  CK(cuFuncSetAttribute(from_kernel, kSmem, 2048));
  CK(cuKernelGetAttribute(&k, kSmem, kernel, dev));
  printf("after a set on the kernel's function: the kernel reads %d\n", k);
  CK(cuLibraryUnload(library));
  CK(cuModuleUnload(module));
  return 0;
}

int Memops() {
  CUdevice dev;
  Setup(&dev);
  CUstream stream;
  CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr flag = 0;
  CK(cuMemAlloc(&flag, 64));
  CK(cuMemsetD8(flag, 0, 64));
  CK(cuStreamWriteValue32(stream, flag, 7, 0));
  CK(cuStreamWaitValue32(stream, flag, 7, CU_STREAM_WAIT_VALUE_EQ));
  CK(cuStreamWriteValue64(stream, flag + 8, 0x123456789ull, 0));
  CK(cuStreamWaitValue64(stream, flag + 8, 0x100000000ull, CU_STREAM_WAIT_VALUE_GEQ));
  CK(cuStreamSynchronize(stream));
  uint32_t word = 0;
  uint64_t wide = 0;
  CK(cuMemcpyDtoH(&word, flag, 4));
  CK(cuMemcpyDtoH(&wide, flag + 8, 8));
  printf("wrote %u and %llx\n", word, static_cast<unsigned long long>(wide));
  // Refused at the call by the driver, or (queued through the client) by the next synchronisation.
  CUresult misaligned = cuStreamWriteValue32(stream, flag + 1, 1, 0);
  if (misaligned == CUDA_SUCCESS) misaligned = cuStreamSynchronize(stream);
  printf("misaligned: %s\n", Name(misaligned));
  return 0;
}

using NvmlInitFn = nvmlReturn_t (*)();
using NvmlCountFn = nvmlReturn_t (*)(unsigned int*);
using NvmlHandleFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using NvmlTextFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
using NvmlMemoryFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using NvmlMemoryV2Fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*);
using NvmlProcessesFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*);
using NvmlErrorFn = const char* (*)(nvmlReturn_t);

// NVML as a monitoring tool reaches it: dlopen, no CUDA unless asked (cuda: a CUDA context
// with 256 MiB allocated first, so that the slice has a process and usage).
// The table nvidia-smi asks of NVML (remote/client/nvml_tables.cc), through the client only.
int NvmlTable() {
  CUdevice dev;
  Setup(&dev);
  CUdeviceptr held = 0;
  CK(cuMemAlloc(&held, 256ull << 20));  // a process of the slice's to list
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (nvml == nullptr) return 1;
  using TableFn = nvmlReturn_t (*)(const void**, const void*);
  auto table_fn = reinterpret_cast<TableFn>(dlsym(nvml, "nvmlInternalGetExportTable"));
  auto init = reinterpret_cast<NvmlInitFn>(dlsym(nvml, "nvmlInit_v2"));
  auto handle_fn = reinterpret_cast<NvmlHandleFn>(dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"));
  auto pci_fn = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*)>(dlsym(nvml, "nvmlDeviceGetPciInfo_v3"));
  auto processes_fn = reinterpret_cast<NvmlProcessesFn>(dlsym(nvml, "nvmlDeviceGetComputeRunningProcesses_v3"));
  if (table_fn == nullptr || init == nullptr || handle_fn == nullptr || pci_fn == nullptr || processes_fn == nullptr) {
    return 1;
  }
  if (init() != NVML_SUCCESS) return 1;
  const uint8_t smi[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e, 0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};
  const void* table = nullptr;
  printf("table: %d\n", static_cast<int>(table_fn(&table, smi)));
  if (table == nullptr) return 1;
  const auto* words = static_cast<const uint64_t*>(table);
  printf("size word: %llu\n", static_cast<unsigned long long>(words[0]));
  auto slot = [&](int i) { return reinterpret_cast<void*>(static_cast<uintptr_t>(words[i])); };
  printf("slot 1: %s, slot 2: %s\n", slot(1) == nullptr ? "null" : "code", slot(2) == nullptr ? "null" : "code");
  char bus[34] = {};
  const auto bus_fn = reinterpret_cast<nvmlReturn_t (*)(unsigned, char*, unsigned)>(slot(81));
  nvmlDevice_t device = nullptr;
  nvmlPciInfo_t pci = {};
  if (handle_fn(0, &device) != NVML_SUCCESS || pci_fn(device, &pci) != NVML_SUCCESS) return 1;
  const nvmlReturn_t bus_result = bus_fn(0, bus, sizeof bus);
  printf("slot 81: %d, %s\n", static_cast<int>(bus_result),
         strcmp(bus, pci.busIdLegacy) == 0 && bus[0] != '\0' ? "the device's bus id" : bus);
  struct Entry {
    uint32_t pid, zero;
    uint64_t used;
    uint32_t gi, ci;
    uint64_t zero2;
    char command[4096];
  };
  std::vector<Entry> entries(500);
  unsigned int n = 500;
  const auto list_fn = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned*, Entry*)>(slot(213));
  const nvmlReturn_t listed = list_fn(device, &n, entries.data());
  unsigned int public_n = 16;
  std::vector<nvmlProcessInfo_t> infos(public_n);
  if (processes_fn(device, &public_n, infos.data()) != NVML_SUCCESS) return 1;
  bool same = listed == NVML_SUCCESS && n == public_n && n > 0;
  for (unsigned int i = 0; same && i < n; ++i) {
    same = entries[i].pid == infos[i].pid && entries[i].used == infos[i].usedGpuMemory &&
           entries[i].gi == infos[i].gpuInstanceId && entries[i].ci == infos[i].computeInstanceId;
  }
  printf("slot 213: %d, %s\n", static_cast<int>(listed), same ? "the public list's processes" : "DIFFERENT");
  unsigned int none = 0;
  const nvmlReturn_t no_room = list_fn(device, &none, nullptr);
  printf("slot 213 without room: %d, count %s\n", static_cast<int>(no_room),
         none == public_n ? "the number needed" : "WRONG");
  printf("slot 230: %d\n", static_cast<int>(reinterpret_cast<nvmlReturn_t (*)()>(slot(230))()));
  const uint8_t other[16] = {1, 2, 3, 4};
  const void* missing = &table;
  const nvmlReturn_t unknown = table_fn(&missing, other);
  printf("another table: %d, %s\n", static_cast<int>(unknown), missing == nullptr ? "null" : "set");
  CK(cuMemFree(held));
  return 0;
}

int Nvml(bool cuda) {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (nvml == nullptr) {
    printf("no libnvidia-ml.so.1: %s\n", dlerror());
    return 1;
  }
  auto sym = [&](const char* name) {
    void* p = dlsym(nvml, name);
    if (p == nullptr) {
      printf("no %s\n", name);
      exit(1);
    }
    return p;
  };
  auto init = reinterpret_cast<NvmlInitFn>(sym("nvmlInit_v2"));
  auto count_fn = reinterpret_cast<NvmlCountFn>(sym("nvmlDeviceGetCount_v2"));
  auto handle_fn = reinterpret_cast<NvmlHandleFn>(sym("nvmlDeviceGetHandleByIndex_v2"));
  auto name_fn = reinterpret_cast<NvmlTextFn>(sym("nvmlDeviceGetName"));
  auto uuid_fn = reinterpret_cast<NvmlTextFn>(sym("nvmlDeviceGetUUID"));
  auto memory_fn = reinterpret_cast<NvmlMemoryFn>(sym("nvmlDeviceGetMemoryInfo"));
  auto memory_v2_fn = reinterpret_cast<NvmlMemoryV2Fn>(sym("nvmlDeviceGetMemoryInfo_v2"));
  auto processes_fn = reinterpret_cast<NvmlProcessesFn>(sym("nvmlDeviceGetComputeRunningProcesses_v3"));
  auto error_fn = reinterpret_cast<NvmlErrorFn>(sym("nvmlErrorString"));
  CUdeviceptr held = 0;
  if (cuda) {
    CUdevice dev;
    Setup(&dev);
    CK(cuMemAlloc(&held, 256ull << 20));
  }
  printf("nvmlInit: %s\n", error_fn(init()));
  unsigned int count = 0;
  printf("count: %s, %u device(s)\n", error_fn(count_fn(&count)), count);
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {}, uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    nvmlMemory_t memory = {};
    nvmlMemory_v2_t memory_v2 = {};
    memory_v2.version = nvmlMemory_v2;
    if (handle_fn(i, &device) != NVML_SUCCESS || name_fn(device, name, sizeof name) != NVML_SUCCESS ||
        uuid_fn(device, uuid, sizeof uuid) != NVML_SUCCESS || memory_fn(device, &memory) != NVML_SUCCESS ||
        memory_v2_fn(device, &memory_v2) != NVML_SUCCESS) {
      printf("device %u: a query failed\n", i);
      return 1;
    }
    printf("device %u: %s, %s\n", i, name, strncmp(uuid, "GPU-", 4) == 0 ? "GPU uuid" : uuid);
    printf("memory: total %llu, used %llu, free %llu; v2 total %llu\n", memory.total, memory.used, memory.free,
           memory_v2.total);
    unsigned int processes = 0;
    const nvmlReturn_t sizing = processes_fn(device, &processes, nullptr);
    std::vector<nvmlProcessInfo_t> infos(processes + 1);
    unsigned int room = static_cast<unsigned int>(infos.size());
    const nvmlReturn_t listed = processes_fn(device, &room, infos.data());
    printf("processes: %s with %u, then %s with %u%s\n", error_fn(sizing), processes, error_fn(listed), room,
           room > 0 && infos[0].usedGpuMemory >= (256ull << 20) ? ", the first using the allocation" : "");
  }
  if (held != 0) CK(cuMemFree(held));
  return 0;
}

// For the copy modes: a context, the busy kernel, a stream of its own and bytes of device memory.
struct CopyWorld {
  CUfunction busy;
  CUstream stream;
  CUdeviceptr device;
};
CopyWorld CopySetup(size_t bytes) {
  CUdevice dev;
  Setup(&dev);
  CUmodule module;
  CUfunction busy, fill;
  CK(gslice::test::LoadTestKernels(&module, &busy, &fill));
  CopyWorld w{.busy = busy, .stream = nullptr, .device = 0};
  CK(cuStreamCreate(&w.stream, CU_STREAM_NON_BLOCKING));
  CK(cuMemAlloc(&w.device, bytes));
  return w;
}

// Page-locked memory of cuMemHostAlloc as the driver lets programs use it (see the top).
int HostShare(bool stats) {
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
  if (mode == "fork") {
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
    // The program goes on: ordinary memory still works.
    CK(cuMemAlloc(&p, 1 << 20));
    CK(cuMemsetD32(p, 0x5a5a5a5au, (1 << 20) / 4));
    Verify(p, 0x5a5a5a5au, (1 << 20) / 4, "after a refusal");
    printf("then cuMemAlloc, memset, copy: ok\n");
    return 0;
  }
  if (mode == "graph") return Graph();
  if (mode == "pointer") return Pointer();
  if (mode == "capture-copy") {
    Setup(&dev);
    CUstream stream;
    CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a = 0;
    CK(cuMemAlloc(&a, 4096));
    std::vector<uint8_t> host(4096, 7);
    CK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    const CUresult copy = cuMemcpyHtoDAsync(a, host.data(), host.size(), stream);
    CUgraph graph = nullptr;
    const CUresult end = cuStreamEndCapture(stream, &graph);
    printf("copy %s, end capture %s\n", Name(copy), Name(end));
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    CK(cuStreamIsCapturing(stream, &status));
    printf("then %s; sync %s\n", status == CU_STREAM_CAPTURE_STATUS_NONE ? "not capturing" : "capturing",
           Name(cuStreamSynchronize(stream)));
    return 0;
  }
  if (mode == "callbacks") return Callbacks();
  if (mode == "memops") return Memops();
  if (mode == "settings") return Settings();
  if (mode == "kept") return Kept();
  if (mode == "kept-sets") return KeptSets();
  if (mode == "nvml") return Nvml(false);
  if (mode == "nvml-cuda") return Nvml(true);
  if (mode == "nvml-table") return NvmlTable();
  if (mode == "nvml-missing") {
    void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    auto fn = nvml != nullptr ? reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, unsigned int*)>(
                                    dlsym(nvml, "nvmlDeviceGetBoardId"))
                              : nullptr;
    if (fn == nullptr) return 1;
    printf("nvmlDeviceGetBoardId: %d\n", static_cast<int>(fn(nullptr, nullptr)));
    return 0;
  }
  if (mode == "hostmap") {
    Setup(&dev);
    void* pinned = nullptr;
    CK(cuMemHostAlloc(&pinned, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
    CUdeviceptr mapped = 0;
    printf("%s\n", Name(cuMemHostGetDevicePointer(&mapped, pinned, 0)));
    CUdeviceptr p = 0;
    printf("then cuMemAlloc: %s\n", Name(cuMemAlloc(&p, 4096)));
    return 0;
  }
  if (mode == "hostshare") return HostShare(argc > 2 && std::string(argv[2]) == "stats");
  if (mode == "late-copy") {
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
  if (mode == "staged") {
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
  if (mode == "tables") return Tables();
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
  if (mode == "lt-tables") return LtTables();
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
