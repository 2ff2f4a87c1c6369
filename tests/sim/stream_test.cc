// Streams, events, ordering, priorities, the legacy default stream.
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "sim_test.h"

namespace gslice::test {
namespace {

using StreamTest = SimTest;

// PTX the driver's compiler rejects (an empty module of just the header is valid PTX).
constexpr const char* kBadPtx = ".version 8.0\n.target sm_90\n.address_size 64\nnot ptx at all\n";

// The test kernels in the form the driver under test loads: the sim's image, or PTX.
const char* KernelImage() { return SimTest::OnSim() ? SimTestImage() : TestKernelsPtx(); }

uint32_t ReadWord(CUdeviceptr p) {
  uint32_t v = 0;
  EXPECT_EQ(cuMemcpyDtoH(&v, p, 4), CUDA_SUCCESS);
  return v;
}

TEST_F(StreamTest, WorkRunsAsynchronouslyAndInOrder) {
  CUdeviceptr p;
  CHECK_CU(cuMemAlloc(&p, 4096));
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK_CU(LaunchFill(fill_, p, 1, 1, s));
  CHECK_CU(LaunchBusy(busy_, 200000, s));
  CHECK_CU(LaunchFill(fill_, p, 2, 1, s));
  EXPECT_CU(CUDA_ERROR_NOT_READY, cuStreamQuery(s));  // the launch did not wait
  CHECK_CU(cuStreamSynchronize(s));
  EXPECT_CU(CUDA_SUCCESS, cuStreamQuery(s));
  EXPECT_EQ(ReadWord(p), 2u);
  CHECK_CU(cuStreamDestroy(s));  // (a destroyed stream's handle is not used again: undefined)
  CHECK_CU(cuMemFree(p));
}

TEST_F(StreamTest, EventsOrderStreamsAndMeasureTime) {
  CUdeviceptr p;
  CHECK_CU(cuMemAlloc(&p, 4096));
  CUstream a, b;
  CHECK_CU(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  CUevent done_a;
  CHECK_CU(cuEventCreate(&done_a, CU_EVENT_DISABLE_TIMING));
  EXPECT_CU(CUDA_SUCCESS, cuEventQuery(done_a));  // never recorded: complete
  CHECK_CU(LaunchBusy(busy_, 100000, a));
  CHECK_CU(LaunchFill(fill_, p, 1, 1, a));
  CHECK_CU(cuEventRecord(done_a, a));
  CHECK_CU(cuStreamWaitEvent(b, done_a, 0));
  CHECK_CU(LaunchFill(fill_, p, 2, 1, b));  // must land after a's fill
  EXPECT_CU(CUDA_ERROR_NOT_READY, cuEventQuery(done_a));
  CHECK_CU(cuStreamSynchronize(b));
  EXPECT_CU(CUDA_SUCCESS, cuEventQuery(done_a));
  EXPECT_EQ(ReadWord(p), 2u);

  // Elapsed time between events around busy kernels of 10 ms and 80 ms.
  CUevent e0, e1, e2;
  CHECK_CU(cuEventCreate(&e0, 0));
  CHECK_CU(cuEventCreate(&e1, 0));
  CHECK_CU(cuEventCreate(&e2, 0));
  float ms = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cuEventElapsedTime(&ms, e0, e1));  // not recorded
  CHECK_CU(cuEventRecord(e0, a));
  CHECK_CU(LaunchBusy(busy_, 10000, a));
  CHECK_CU(cuEventRecord(e1, a));
  CHECK_CU(LaunchBusy(busy_, 80000, a));
  CHECK_CU(cuEventRecord(e2, a));
  EXPECT_CU(CUDA_ERROR_NOT_READY, cuEventElapsedTime(&ms, e0, e2));
  CHECK_CU(cuEventSynchronize(e2));
  float short_ms = 0, long_ms = 0;
  CHECK_CU(cuEventElapsedTime(&short_ms, e0, e1));
  CHECK_CU(cuEventElapsedTime(&long_ms, e1, e2));
  EXPECT_GE(short_ms, 10.0f);
  EXPECT_GE(long_ms, 80.0f);
  EXPECT_GT(long_ms, short_ms);
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cuEventElapsedTime(&ms, done_a, e1));  // no timing
  for (CUevent e : {done_a, e0, e1, e2}) CHECK_CU(cuEventDestroy(e));  // not used again
  CHECK_CU(cuStreamDestroy(a));
  CHECK_CU(cuStreamDestroy(b));
  CHECK_CU(cuMemFree(p));
}

TEST_F(StreamTest, LegacyStreamWaitsForBlockingStreamsOnly) {
  CUdeviceptr p;
  CHECK_CU(cuMemAlloc(&p, 4096));
  CUstream blocking, nonblocking;
  CHECK_CU(cuStreamCreate(&blocking, 0));
  CHECK_CU(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING));
  CHECK_CU(LaunchBusy(busy_, 300000, nonblocking));
  CHECK_CU(LaunchBusy(busy_, 50000, blocking));
  CHECK_CU(LaunchFill(fill_, p, 1, 1, blocking));
  CHECK_CU(LaunchFill(fill_, p, 2, 1, nullptr));  // the legacy stream: after blocking's work
  CHECK_CU(cuStreamSynchronize(nullptr));
  EXPECT_EQ(ReadWord(p), 2u);
  EXPECT_CU(CUDA_SUCCESS, cuStreamQuery(blocking));
  EXPECT_CU(CUDA_ERROR_NOT_READY, cuStreamQuery(nonblocking));
  // ... and blocking streams wait for earlier legacy work.
  CHECK_CU(LaunchBusy(busy_, 50000, CU_STREAM_LEGACY));
  CHECK_CU(LaunchFill(fill_, p, 3, 1, CU_STREAM_LEGACY));
  CHECK_CU(LaunchFill(fill_, p, 4, 1, blocking));
  CHECK_CU(cuStreamSynchronize(blocking));
  EXPECT_EQ(ReadWord(p), 4u);
  CHECK_CU(cuCtxSynchronize());
  EXPECT_CU(CUDA_SUCCESS, cuStreamQuery(nonblocking));
  CHECK_CU(cuStreamDestroy(blocking));
  CHECK_CU(cuStreamDestroy(nonblocking));
  CHECK_CU(cuMemFree(p));
}

TEST_F(StreamTest, DestroyedStreamFinishesItsWork) {
  CUdeviceptr p;
  CHECK_CU(cuMemAlloc(&p, 4096));
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK_CU(LaunchBusy(busy_, 50000, s));
  CHECK_CU(LaunchFill(fill_, p, 9, 1, s));
  CHECK_CU(cuStreamDestroy(s));
  CHECK_CU(cuCtxSynchronize());
  // The stream left the context's books at destroy; wait for its worker explicitly.
  for (int i = 0; i < 200 && ReadWord(p) != 9u; ++i) usleep(5000);
  EXPECT_EQ(ReadWord(p), 9u);
  CHECK_CU(cuMemFree(p));
}

TEST_F(StreamTest, PriorityRangeAndClamping) {
  int least = 1, greatest = 1;
  CHECK_CU(cuCtxGetStreamPriorityRange(&least, &greatest));
  EXPECT_EQ(least, 0);
  EXPECT_EQ(greatest, -5);
  CUstream s;
  CHECK_CU(cuStreamCreateWithPriority(&s, 0, -100));
  int p = 0;
  CHECK_CU(cuStreamGetPriority(s, &p));
  EXPECT_EQ(p, greatest);
  CHECK_CU(cuStreamDestroy(s));
  CHECK_CU(cuStreamCreateWithPriority(&s, 0, 7));
  CHECK_CU(cuStreamGetPriority(s, &p));
  EXPECT_EQ(p, least);
  CHECK_CU(cuStreamDestroy(s));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuStreamCreate(&s, 0x8));
}

TEST_F(StreamTest, HigherPriorityStreamGoesFirst) {
  CUstream low, high;
  CHECK_CU(cuStreamCreateWithPriority(&low, CU_STREAM_NON_BLOCKING, 0));
  CHECK_CU(cuStreamCreateWithPriority(&high, CU_STREAM_NON_BLOCKING, -5));
  for (int i = 0; i < 40; ++i) CHECK_CU(LaunchBusy(busy_, 5000, low));  // 200 ms backlog
  usleep(10000);
  CUevent done;
  CHECK_CU(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  CHECK_CU(LaunchBusy(busy_, 5000, high));
  CHECK_CU(cuEventRecord(done, high));
  CHECK_CU(cuEventSynchronize(done));
  // The urgent kernel overtook the backlog, which is still running.
  EXPECT_CU(CUDA_ERROR_NOT_READY, cuStreamQuery(low));
  CHECK_CU(cuStreamSynchronize(low));
  CHECK_CU(cuEventDestroy(done));
  CHECK_CU(cuStreamDestroy(low));
  CHECK_CU(cuStreamDestroy(high));
}

TEST_F(StreamTest, KernelLaunchValidation) {
  CUdeviceptr p;
  CHECK_CU(cuMemAlloc(&p, 4096));
  uint64_t us = 1;
  void* args[] = {&us};
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuLaunchKernel(busy_, 0, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuLaunchKernel(busy_, 1, 1, 1, 2048, 1, 1, 0, nullptr, args, nullptr));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuLaunchKernel(busy_, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));
  // (Made-up function or stream handles are not tried: the driver leaves them undefined.)
  // Arguments through `extra`, and cuLaunchKernelEx.
  struct {
    CUdeviceptr dst;
    uint32_t pattern;
    uint32_t pad;
    uint64_t count;
  } packed{p, 0x600d, 0, 2};
  size_t size = sizeof packed;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  CHECK_CU(cuLaunchKernel(fill_, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, extra));
  CUlaunchConfig cfg{};
  cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 32;
  cfg.blockDimY = cfg.blockDimZ = 1;
  uint32_t pattern = 0xbeef;
  uint64_t count = 1;
  void* fargs[] = {&p, &pattern, &count};
  CHECK_CU(cuLaunchKernelEx(&cfg, fill_, fargs, nullptr));
  CHECK_CU(cuCtxSynchronize());
  uint32_t got[2];
  CHECK_CU(cuMemcpyDtoH(got, p, sizeof got));
  EXPECT_EQ(got[0], 0xbeefu);
  EXPECT_EQ(got[1], 0x600du);
  CHECK_CU(cuMemFree(p));
}

TEST_F(StreamTest, HostFunctionsRunInStreamOrder) {
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  std::atomic<int> calls{0};
  CHECK_CU(LaunchBusy(busy_, 100000, s));
  CHECK_CU(cuLaunchHostFunc(s, [](void* p) { static_cast<std::atomic<int>*>(p)->fetch_add(1); }, &calls));
  EXPECT_EQ(calls.load(), 0);  // still behind the kernel
  CHECK_CU(cuStreamSynchronize(s));
  EXPECT_EQ(calls.load(), 1);
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  CHECK_CU(cuStreamIsCapturing(s, &capture));
  EXPECT_EQ(capture, CU_STREAM_CAPTURE_STATUS_NONE);
  CHECK_CU(cuStreamDestroy(s));
}

TEST_F(StreamTest, CooperativeLaunchAndFunctionAttributes) {
  CUdeviceptr p;
  CHECK_CU(cuMemAlloc(&p, 4096));
  uint32_t pattern = 0xc0;
  uint64_t count = 4;
  void* args[] = {&p, &pattern, &count};
  CHECK_CU(cuLaunchCooperativeKernel(fill_, 2, 1, 1, 64, 1, 1, 0, nullptr, args));
  CHECK_CU(cuCtxSynchronize());
  EXPECT_EQ(ReadWord(p + 12), 0xc0u);
  int v = 0;
  CHECK_CU(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fill_));
  EXPECT_EQ(v, 1024);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX, fill_));
  CHECK_CU(cuMemFree(p));
}

TEST_F(StreamTest, LibrariesAndKernels) {
  CUlibrary lib;
  EXPECT_CU(CUDA_ERROR_INVALID_PTX,
            cuLibraryLoadData(&lib, kBadPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CHECK_CU(cuLibraryLoadData(&lib, KernelImage(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel k;
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuLibraryGetKernel(&k, lib, "nope"));
  CHECK_CU(cuLibraryGetKernel(&k, lib, "gslice_fill"));
  const char* name = nullptr;
  CHECK_CU(cuKernelGetName(&name, k));
  EXPECT_STREQ(name, "gslice_fill");
  CUfunction f;
  CHECK_CU(cuKernelGetFunction(&f, k));
  CUdeviceptr p;
  CHECK_CU(cuMemAlloc(&p, 4096));
  CHECK_CU(LaunchFill(f, p, 0x1b, 1, nullptr));
  // A CUkernel may be launched directly, as with the driver.
  CHECK_CU(LaunchFill(reinterpret_cast<CUfunction>(k), p + 4, 0x2b, 1, nullptr));
  CHECK_CU(cuCtxSynchronize());
  EXPECT_EQ(ReadWord(p), 0x1bu);
  EXPECT_EQ(ReadWord(p + 4), 0x2bu);
  CHECK_CU(cuLibraryUnload(lib));  // (an unloaded library's handle is not used again: undefined)
  CHECK_CU(cuMemFree(p));
}

// A fatbin library (how cudart and the CUDA libraries register their kernels) is held so that
// the program starts: its kernels are found by name and refused when launched or laid out, its
// globals are zeroed memory, a plain fatbin module still is not loaded. Context limits read back.
TEST_F(StreamTest, FatbinLibrariesAreHeldButNotRun) {
  alignas(8) unsigned char fatbin[16 + 64] = {};
  const uint32_t magic = 0xBA55ED50u;
  const uint16_t version = 1, header = 16;
  const uint64_t body = 64;
  memcpy(fatbin, &magic, 4);
  memcpy(fatbin + 4, &version, 2);
  memcpy(fatbin + 6, &header, 2);
  memcpy(fatbin + 8, &body, 8);
  CUmodule m;
  EXPECT_CU(CUDA_ERROR_NO_BINARY_FOR_GPU, cuModuleLoadData(&m, fatbin));
  CUlibrary lib;
  CHECK_CU(cuLibraryLoadData(&lib, fatbin, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel k;
  CHECK_CU(cuLibraryGetKernel(&k, lib, "_Z6kernelPf"));
  CUkernel again;
  CHECK_CU(cuLibraryGetKernel(&again, lib, "_Z6kernelPf"));
  EXPECT_EQ(k, again);
  CUfunction f;
  CHECK_CU(cuKernelGetFunction(&f, k));
  CHECK_CU(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 65536, k, 0));
  int blocks = 0;
  CHECK_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 256, 0));
  EXPECT_EQ(blocks, 8);
  size_t offset = 0, size = 0;
  EXPECT_CU(CUDA_ERROR_NO_BINARY_FOR_GPU, cuFuncGetParamInfo(f, 0, &offset, &size));
  // Its globals are zeroed device memory, the same for the same name.
  CUdeviceptr global = 0, same = 0;
  size_t bytes = 0;
  CHECK_CU(cuLibraryGetGlobal(&global, &bytes, lib, "table"));
  CHECK_CU(cuLibraryGetGlobal(&same, nullptr, lib, "table"));
  EXPECT_EQ(global, same);
  EXPECT_GE(bytes, 4096u);
  EXPECT_EQ(ReadWord(global), 0u);
  size_t stack = 0;
  CHECK_CU(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096));
  CHECK_CU(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
  EXPECT_EQ(stack, 4096u);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuCtxSetLimit(CU_LIMIT_SHMEM_SIZE, 1));
  CUdeviceptr p;
  CHECK_CU(cuMemAlloc(&p, 4096));
  EXPECT_CU(CUDA_ERROR_NO_BINARY_FOR_GPU, LaunchFill(f, p, 0x1b, 1, nullptr));
  CHECK_CU(cuCtxSynchronize());  // nothing was queued: the context is fine
  CHECK_CU(cuMemFree(p));
  CHECK_CU(cuLibraryUnload(lib));
}

TEST_F(StreamTest, ModuleImages) {
  CUmodule m;
  EXPECT_CU(CUDA_ERROR_INVALID_PTX, cuModuleLoadData(&m, kBadPtx));
  EXPECT_CU(CUDA_ERROR_INVALID_IMAGE, cuModuleLoadData(&m, "gslice-sim-module 1\nkernel x warp\n"));
  EXPECT_CU(CUDA_ERROR_INVALID_IMAGE, cuModuleLoadData(&m, "hello"));
  EXPECT_CU(CUDA_ERROR_FILE_NOT_FOUND, cuModuleLoad(&m, "/nonexistent/gslice.mod"));
  CHECK_CU(cuModuleLoadData(&m, KernelImage()));
  CUfunction f;
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuModuleGetFunction(&f, m, "nope"));
  CHECK_CU(cuModuleGetFunction(&f, m, "gslice_busy"));
  CHECK_CU(LaunchBusy(f, 1, nullptr));
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuModuleUnload(m));  // (an unloaded module's handles are not used again: undefined)
}

}  // namespace
}  // namespace gslice::test
