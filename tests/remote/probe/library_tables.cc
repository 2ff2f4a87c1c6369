// The private-table slots the CUDA libraries call beyond cudart's start-up, as the client
// answers them: tools context (21318c60) slots 51 and 39, a stream's object and key (cuBLASLt's
// per-stream buffers, inside cuSOLVER and cuBLAS), the module functions table (6e163fbe) slot 7
// (cuFFT's run-time-linked kernels), the compute cache (da9151d3, NVRTC and nvJitLink)
// declined. Prints one line per fact.
#include <algorithm>
#include <thread>
#include <vector>

#include "probe.h"

namespace gslice::probe {
namespace {

using StreamObjectFn = CUresult (*)(CUcontext, CUstream, void**, int);
using StreamKeyFn = CUresult (*)(CUcontext, void*, unsigned long long*);
using FunctionCallback = void (*)(void*, CUfunction, uint64_t);
using ModuleFunctionsFn = int (*)(CUcontext, CUmodule, FunctionCallback, void*);

// As cuBLASLt asks: the stream's object (slot 51), then its key (slot 39).
CUresult KeyOf(const void** tools, CUcontext ctx, CUstream stream, unsigned long long* key) {
  void* object = nullptr;
  const int per_thread = stream == CU_STREAM_PER_THREAD ? 1 : 0;
  const CUresult r = reinterpret_cast<StreamObjectFn>(const_cast<void*>(tools[51]))(ctx, stream, &object, per_thread);
  if (r != CUDA_SUCCESS) return r;
  return reinterpret_cast<StreamKeyFn>(const_cast<void*>(tools[39]))(ctx, object, key);
}

void KeepFunction(void* opaque, CUfunction f, uint64_t) { static_cast<std::vector<CUfunction>*>(opaque)->push_back(f); }

}  // namespace

int LibraryTables(int, char**) {
  CUdevice dev;
  const CUcontext ctx = Setup(&dev);
  const void** tools = nullptr;
  const void** modules = nullptr;
  CK(ExportTable({0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2}, &tools));
  CK(ExportTable({0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e}, &modules));

  // Streams: one stream's key is the same every time and is its ID; two live streams' differ;
  // the per-thread stream's key differs between threads.
  CUstream a = nullptr, b = nullptr;
  CK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  unsigned long long ka = 0, ka_again = 0, kb = 0, id_a = 0, legacy = 0, legacy_again = 0;
  CK(KeyOf(tools, ctx, a, &ka));
  CK(KeyOf(tools, ctx, a, &ka_again));
  CK(KeyOf(tools, ctx, b, &kb));
  CK(cuStreamGetId(a, &id_a));
  CK(KeyOf(tools, ctx, nullptr, &legacy));
  CK(KeyOf(tools, ctx, nullptr, &legacy_again));
  printf("stream keys: the same again: %s, the stream's ID: %s, another stream's differs: %s, the NULL stream's "
         "the same again: %s\n", ka == ka_again ? "yes" : "no", ka == id_a ? "yes" : "no", kb != ka ? "yes" : "no",
         legacy == legacy_again && legacy != ka && legacy != kb ? "yes" : "no");
  unsigned long long mine = 0, theirs = 0;
  CK(KeyOf(tools, ctx, CU_STREAM_PER_THREAD, &mine));
  CUresult other = CUDA_ERROR_UNKNOWN;
  std::thread t([&] {
    if ((other = cuCtxSetCurrent(ctx)) == CUDA_SUCCESS) other = KeyOf(tools, ctx, CU_STREAM_PER_THREAD, &theirs);
  });
  t.join();
  CK(other);
  printf("per-thread stream keys of two threads differ: %s\n", mine != theirs ? "yes" : "no");
  void* object = nullptr;
  printf("stream object into nothing: %s\n",
         Name(reinterpret_cast<StreamObjectFn>(const_cast<void*>(tools[51]))(ctx, a, nullptr, 0)));
  CK(reinterpret_cast<StreamObjectFn>(const_cast<void*>(tools[51]))(ctx, a, &object, 0));
  printf("stream key into nothing: %s\n",
         Name(reinterpret_cast<StreamKeyFn>(const_cast<void*>(tools[39]))(ctx, object, nullptr)));
  CK(cuStreamDestroy(a));
  CK(cuStreamDestroy(b));

  // A module's functions, as cuFFT takes its run-time-linked kernel: each one handed to the
  // callback, the count returned; they are the handles cuModuleGetFunction gives.
  printf("module functions size %zu\n", reinterpret_cast<size_t>(modules[0]));
  CUmodule module = nullptr;
  CUfunction busy = nullptr, fill = nullptr;
  CK(gslice::test::LoadTestKernels(&module, &busy, &fill));
  std::vector<CUfunction> got;
  const int n = reinterpret_cast<ModuleFunctionsFn>(const_cast<void*>(modules[7]))(ctx, module, &KeepFunction, &got);
  std::sort(got.begin(), got.end());
  std::vector<CUfunction> want = {busy, fill};
  std::sort(want.begin(), want.end());
  printf("module functions: %d, the module's own: %s\n", n, got == want ? "yes" : "no");
  const int none = reinterpret_cast<ModuleFunctionsFn>(const_cast<void*>(modules[7]))(
      ctx, nullptr, &KeepFunction, &got);
  printf("functions of no module: %d\n", none);
  CK(cuModuleUnload(module));

  // The compute cache: declined, as to a library that compiles without it.
  const void** cache = nullptr;
  const CUresult declined =
      ExportTable({0xda, 0x91, 0x51, 0xd3, 0x3a, 0xe6, 0xcc, 0x41, 0xa5, 0xc0, 0x4f, 0x26, 0xd5, 0x33, 0xe3, 0x28}, &cache);
  printf("compute cache: %s, %s\n", Name(declined), cache == nullptr ? "null" : "set");
  // A slot nobody answers: an error, its log line naming who called.
  using Unanswered = CUresult (*)();
  printf("tools context slot 5: %s\n", Name(reinterpret_cast<Unanswered>(const_cast<void*>(tools[5]))()));
  return 0;
}

}  // namespace gslice::probe
