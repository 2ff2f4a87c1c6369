// gslice_remote_speed_probe: driver-API call sequences whose cost through the forwarding client
// the speed tests count (remote_speed_test.cc): what each sequence makes the client do (round
// trips, queued calls, answers it keeps) from its own counters, and what the added delay did.
// It prints only counts and the driver's answers (no addresses, no times).
//
//   speed_probe delay   allocations, 200 queued memsets, a synchronisation and stream queries;
//                       prints the added delay's counters (GSLICE_REMOTE_ADDED_DELAY_US)
//   speed_probe sets    a kernel's and a function's dynamic shared memory set between launches,
//                       as cuDNN does: first sets, alternating sets below them, a carveout, a set
//                       above, one the driver refuses, sets after an unload; the values read back
//   speed_probe events  events made, recorded and destroyed, as PyTorch does around its work; a
//                       fresh event's state, timing, events of a context destroyed afterwards
//   speed_probe alone   queues a memset the worker's driver refuses after its queue went idle,
//                       prints "queued" and makes no further call until stdin closes
//   speed_probe contexts  two devices' primary contexts and a context of its own, made current
//                       in turn on two threads: each one's device and limits, asked twice
//   speed_probe pointers  the memory type of a host buffer asked again, alone, with others and
//                       by a unified copy; of an address reserved, then mapped; around graph
//                       launches before and after the first stream-ordered allocation
// Through the client each group of calls is followed by "round trips: WHAT: N", and some by
// "answered on the client: WHAT: N" (gslice_remote_stats); on the driver itself those lines are
// left out.
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <thread>

#include "probe/probe.h"

namespace gslice::probe {
namespace {

// The loaded client's export `name`, or null on the driver itself.
template <typename Fn>
Fn ClientExport(const char* name) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return lib != nullptr ? reinterpret_cast<Fn>(dlsym(lib, name)) : nullptr;
}

// The client's counter `index` of gslice_remote_stats (0: calls answered on the client from the
// answers it keeps, 2: round trips) so far, or -1 on the driver itself.
long long ClientStat(int index) {
  const auto stats = ClientExport<void (*)(uint64_t[3])>("gslice_remote_stats");
  if (stats == nullptr) return -1;
  uint64_t out[3] = {};
  stats(out);
  return static_cast<long long>(out[index]);
}

long long RoundTrips() { return ClientStat(2); }
long long AnsweredOnTheClient() { return ClientStat(0); }

// Prints the round trips made since *since (through the client only), and restarts the count.
void PrintTrips(const char* what, long long* since) {
  const long long now = RoundTrips();
  if (now >= 0) printf("round trips: %s: %lld\n", what, now - *since);
  *since = RoundTrips();
}

int Sets() {
  constexpr CUfunction_attribute kSmem = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
  CUdevice dev;
  Setup(&dev);
  CUmodule module;
  CUfunction busy, fill;
  CK(gslice::test::LoadTestKernels(&module, &busy, &fill));
  CUlibrary library;
  CUkernel kernel;
  CK(cuLibraryLoadData(&library, gslice::test::SimTestImage(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CK(cuLibraryGetKernel(&kernel, library, "gslice_fill"));
  CUdeviceptr words;
  CK(cuMemAlloc(&words, 4096));
  CK(gslice::test::LaunchFill(fill, words, 1, 1024, nullptr));  // its parameter layout, once
  long long trips = RoundTrips();
  CK(cuKernelSetAttribute(kSmem, 8192, kernel, dev));
  CK(cuFuncSetAttribute(fill, kSmem, 8192));
  PrintTrips("the first set of a kernel and of a function", &trips);
  for (int i = 0; i < 20; ++i) {
    CK(cuKernelSetAttribute(kSmem, i % 2 != 0 ? 1024 : 8192, kernel, dev));
    CK(cuFuncSetAttribute(fill, kSmem, i % 2 != 0 ? 4096 : 8192));
    CK(gslice::test::LaunchFill(fill, words, static_cast<uint32_t>(i), 1024, nullptr));
  }
  PrintTrips("20 sets of each at or below its first, launches between", &trips);
  CK(cuFuncSetAttribute(fill, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50));
  PrintTrips("a carveout of a function whose set was accepted", &trips);
  CK(cuFuncSetAttribute(fill, kSmem, 16384));
  PrintTrips("a set above the largest accepted", &trips);
  printf("a set the driver refuses: %s\n", Name(cuFuncSetAttribute(fill, kSmem, 1 << 30)));
  printf("then a synchronisation: %s\n", Name(cuCtxSynchronize()));
  int k = 0, f = 0;
  CK(cuKernelGetAttribute(&k, kSmem, kernel, dev));
  CK(cuFuncGetAttribute(&f, kSmem, fill));
  printf("the kernel reads %d, the function %d\n", k, f);
  uint32_t word = 0;
  CK(cuMemcpyDtoH(&word, words, sizeof word));
  printf("the last launch wrote %u\n", word);
  CK(cuModuleUnload(module));
  CK(gslice::test::LoadTestKernels(&module, &busy, &fill));
  trips = RoundTrips();
  CK(cuFuncSetAttribute(fill, kSmem, 1024));
  PrintTrips("a set after an unload", &trips);
  CK(cuMemFree(words));
  CK(cuLibraryUnload(library));
  CK(cuModuleUnload(module));
  return 0;
}

int Events() {
  CUdevice dev;
  const CUcontext primary = Setup(&dev);
  CUstream stream;
  CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  long long trips = RoundTrips();
  for (int i = 0; i < 400; ++i) {
    CUevent e;
    CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CK(cuEventRecord(e, stream));
    CK(cuEventDestroy(e));
  }
  PrintTrips("400 events made, recorded and destroyed", &trips);
  printf("then the stream: %s\n", Name(cuStreamSynchronize(stream)));
  CUevent a, b, fresh;
  CK(cuEventCreate(&a, 0));
  CK(cuEventCreate(&b, 0));
  CK(cuEventCreate(&fresh, CU_EVENT_BLOCKING_SYNC));
  printf("a fresh event: %s\n", Name(cuEventQuery(fresh)));
  CK(cuEventRecord(a, stream));
  CK(cuEventRecord(b, stream));
  CK(cuEventSynchronize(b));
  float ms = -1;
  CK(cuEventElapsedTime(&ms, a, b));
  printf("timed: %s\n", ms >= 0 ? "yes" : "no");
  CK(cuEventDestroy(a));
  CK(cuEventDestroy(b));
  CK(cuEventDestroy(fresh));
  printf("a second destroy: %s\n", Name(cuEventDestroy(fresh)));
  // A context of its own, with events made ahead for it, destroyed: nothing of them fails later.
  CUcontext other;
  CK(cuCtxCreate(&other, nullptr, 0, dev));
  CUevent mine, kept;
  CK(cuEventCreate(&mine, 0));
  CK(cuEventCreate(&kept, 0));
  CK(cuEventDestroy(mine));
  CK(cuCtxDestroy(other));
  CK(cuCtxSetCurrent(primary));
  printf("after a context with events went: %s\n", Name(cuCtxSynchronize()));
  trips = RoundTrips();
  printf("an event of that context destroyed: %s\n", Name(cuEventDestroy(kept)));
  PrintTrips("an event's destroy after its context went", &trips);
  CK(cuStreamDestroy(stream));
  return 0;
}

// What a context answers about itself, as the current one: its device and a limit set in it.
void PrintContext(const char* name, CUcontext ctx) {
  CK(cuCtxSetCurrent(ctx));
  for (int i = 0; i < 2; ++i) {
    CUdevice dev = -1;
    size_t stack = 0;
    CK(cuCtxGetDevice(&dev));
    CK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
    printf("%s: device %d, stack %zu\n", name, dev, stack);
  }
}

int Contexts() {
  CK(cuInit(0));
  int count = 0;
  CK(cuDeviceGetCount(&count));
  Expect(count >= 2, "two devices");
  CUdevice d0, d1;
  CK(cuDeviceGet(&d0, 0));
  CK(cuDeviceGet(&d1, 1));
  CUcontext c0, c1, own;
  CK(cuDevicePrimaryCtxRetain(&c0, d0));
  CK(cuDevicePrimaryCtxRetain(&c1, d1));
  CK(cuCtxCreate(&own, nullptr, 0, d0));
  CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 8192));  // in `own`, current once made
  for (int round = 0; round < 2; ++round) {
    PrintContext("device 0's primary", c0);
    PrintContext("device 1's primary", c1);
    PrintContext("its own", own);
  }
  // Another thread asks the same, its context stack starting empty.
  std::thread other([&] {
    PrintContext("device 1's primary, another thread", c1);
    PrintContext("its own, another thread", own);
  });
  other.join();
  // A destroyed context's handle may come back for a context of another device.
  CK(cuCtxDestroy(own));
  for (int i = 0; i < 4; ++i) {
    CUcontext next;
    CK(cuCtxCreate(&next, nullptr, 0, i % 2 == 0 ? d1 : d0));
    PrintContext(i % 2 == 0 ? "a new one on device 1" : "a new one on device 0", next);
    CK(cuCtxDestroy(next));
  }
  return 0;
}

int Alone() {
  CUdevice dev;
  Setup(&dev);
  CUdeviceptr p;
  CK(cuMemAlloc(&p, 4096));
  CK(cuMemsetD32Async(p, 7, 1024, nullptr));
  CK(cuCtxSynchronize());
  // Long enough for the client's flusher to find its queue empty and wait for the next one.
  usleep(200 * 1000);
  CK(cuMemsetD32Async(16, 7, 1024, nullptr));  // no such memory: the worker names the call
  printf("queued\n");
  char line[64];
  while (fgets(line, sizeof line, stdin) != nullptr) {
  }
  return 0;
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

// The memory type of p as the driver answers it: the result's name, and the type when it is one.
void PrintMemoryType(const char* what, CUdeviceptr p) {
  unsigned type = 0;
  const CUresult r = cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
  printf("%s: %s%s\n", what, Name(r),
         r != CUDA_SUCCESS ? "" : type == CU_MEMORYTYPE_DEVICE ? ", device memory" : ", other memory");
}

int Pointers() {
  CUdevice dev;
  Setup(&dev);
  static char host[4096];  // the program's own memory, not CUDA's
  const CUdeviceptr h = reinterpret_cast<CUdeviceptr>(host);
  long long trips = RoundTrips();
  PrintMemoryType("a host buffer", h);
  const long long kept = AnsweredOnTheClient();
  PrintMemoryType("asked again", h);
  if (kept >= 0) printf("answered on the client: the second: %lld\n", AnsweredOnTheClient() - kept);
  PrintTrips("a host buffer asked twice", &trips);
  CUpointer_attribute attributes[3] = {CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                       CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  CUcontext ctx = reinterpret_cast<CUcontext>(1);
  unsigned type = 7;
  int ordinal = 7;
  void* data[3] = {&ctx, &type, &ordinal};
  const CUresult together = cuPointerGetAttributes(3, attributes, data, h);
  printf("its attributes together: %s, context %s, type %u, device %d\n", Name(together),
         ctx == nullptr ? "none" : "some", type, ordinal);
  PrintTrips("its attributes together", &trips);
  CUdeviceptr words;
  CK(cuMemAlloc(&words, sizeof host));
  PrintMemoryType("the host buffer after an allocation", h);
  trips = RoundTrips();
  CK(cuMemcpy(words, h, sizeof host));  // the direction told from both addresses
  PrintTrips("a copy from the host buffer told from its addresses", &trips);

  // An address reserved, then mapped: device memory once it is.
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  size_t granularity = 0;
  CK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CUdeviceptr reserved;
  CK(cuMemAddressReserve(&reserved, granularity, 0, 0, 0));
  trips = RoundTrips();
  PrintMemoryType("a reserved address", reserved);
  PrintMemoryType("asked again", reserved);
  PrintTrips("a reserved address asked twice", &trips);
  CUmemGenericAllocationHandle memory;
  CK(cuMemCreate(&memory, granularity, &prop, 0));
  CK(cuMemMap(reserved, granularity, 0, memory, 0));
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CK(cuMemSetAccess(reserved, granularity, &access, 1));
  PrintMemoryType("the address once mapped", reserved);
  CK(cuMemUnmap(reserved, granularity));
  CK(cuMemRelease(memory));
  CK(cuMemAddressFree(reserved, granularity));

  // A graph with no allocation of its own: its launches map nothing, until the process makes a
  // stream-ordered allocation (one captured into a graph is mapped when the graph launches).
  CUstream stream;
  CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUgraph graph;
  CUgraphExec exec;
  CK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CK(cuMemsetD32Async(words, 7, sizeof host / 4, stream));
  CK(cuStreamEndCapture(stream, &graph));
  CK(cuGraphInstantiate(&exec, graph, 0));
  PrintMemoryType("the host buffer after a graph is made", h);
  // Launches the graph, then asks about the host buffer twice, and prints the round trips made.
  const auto launch_and_ask_twice = [&](const char* what) {
    trips = RoundTrips();
    CK(cuGraphLaunch(exec, stream));
    PrintMemoryType("the host buffer after a launch", h);
    PrintMemoryType("asked again", h);
    PrintTrips(what, &trips);
  };
  launch_and_ask_twice("a graph launched, then the host buffer asked twice");
  CK(cuStreamSynchronize(stream));
  CUdeviceptr ordered;
  CK(cuMemAllocAsync(&ordered, sizeof host, stream));
  CK(cuMemFreeAsync(ordered, stream));
  CK(cuStreamSynchronize(stream));
  PrintMemoryType("the host buffer after a stream-ordered allocation", h);
  launch_and_ask_twice("then a graph launched, and the host buffer asked twice");
  PrintMemoryType("asked a third time", h);
  PrintTrips("then asked a third time", &trips);
  CK(cuStreamSynchronize(stream));
  Verify(words, 7, sizeof host / 4, "the graph's memset");
  CK(cuGraphExecDestroy(exec));
  CK(cuGraphDestroy(graph));
  CK(cuStreamDestroy(stream));
  CK(cuMemFree(words));
  return 0;
}

struct Mode {
  const char* name;
  int (*run)();
};

constexpr Mode kModes[] = {
    {"delay", Delay},
    {"sets", Sets},
    {"events", Events},
    {"alone", Alone},
    {"contexts", Contexts},
    {"pointers", Pointers},
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
