// gslice_remote_probe's modes for what the forwarding client answers or keeps itself: device
// queries asked once, pointer attributes, settings, kept answers, the driver's private tables,
// the libraries mapped.
#include "probe.h"

#include <dlfcn.h>
#include <string.h>

#include <cstring>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

namespace gslice::probe {

int Repeat(int, char**) {
  // The same device query three times (the client asks the server once).
  CK(cuInit(0));
  int sms[3] = {};
  for (int& v : sms) CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
  printf("%d %d %d\n", sms[0], sms[1], sms[2]);
  return 0;
}

int Pointer(int, char**) {
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

int Settings(int, char**) {
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

CUresult ExportTable(std::initializer_list<unsigned> bytes, const void*** out) {
  CUuuid id;
  unsigned i = 0;
  for (unsigned b : bytes) id.bytes[i++] = static_cast<char>(b);
  return cuGetExportTable(static_cast<const void**>(static_cast<void*>(out)), &id);
}

namespace {

const char* CaptureName(CUstreamCaptureStatus s) {
  return s == CU_STREAM_CAPTURE_STATUS_NONE ? "none" : s == CU_STREAM_CAPTURE_STATUS_ACTIVE ? "active" : "invalidated";
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

}  // namespace

// Every answer the client may keep, asked twice, changed, asked again.
int Kept(int, char**) {
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

// A set of one handle's attribute: what it changes is asked again, the rest stays kept.
int KeptSets(int, char**) {
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

// The private tables as a runtime sees them (answered by the forwarding client).
int Tables(int, char**) {
  CUdevice dev;
  Setup(&dev);
  const void** cudart = nullptr;
  const void** integrity = nullptr;
  const void** storage = nullptr;
  const void** unknown = reinterpret_cast<const void**>(1);
  CK(ExportTable({0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9}, &cudart));
  CK(ExportTable({0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2}, &integrity));
  CK(ExportTable({0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93}, &storage));
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
  const CUresult refused = ExportTable({0x01, 0x02, 0x03, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x05}, &unknown);
  printf("unknown table: %s, %s\n", Name(refused), unknown == nullptr ? "null" : "set");
  return 0;
}

// cuBLASLt's two tables as the client answers them: tools context (21318c60) slot 4, a
// context's number, and cuBLASLt data (1734dc26) slot 4, declined. Prints one line per fact.
int LtTables(int, char**) {
  CUdevice dev;
  Setup(&dev);
  const void** tls = nullptr;
  const void** tools = nullptr;
  const void** data = nullptr;
  CK(ExportTable({0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc}, &tls));
  CK(ExportTable({0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2}, &tools));
  CK(ExportTable({0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca}, &data));
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

int Maps(int, char**) {
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

}  // namespace gslice::probe
