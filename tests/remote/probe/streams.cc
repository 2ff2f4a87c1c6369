// gslice_remote_probe's stream modes: kernels, deferred errors, graphs and captures, host
// functions and callbacks, stream memory operations, threads sharing a context.
#include "probe.h"

#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace gslice::probe {

int Busy(int argc, char** argv) {
  CUdevice dev;
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

int Deferred(int, char**) {
  CUdevice dev;
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

int Graph(int, char**) {
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

int CaptureCopy(int, char**) {
  CUdevice dev;
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

namespace {
struct Order {
  std::vector<std::string> seen;
  std::vector<CUresult> status;
};

}  // namespace

int Callbacks(int, char**) {
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

int Memops(int, char**) {
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

int Threads(int argc, char** argv) {
  CUdevice dev;
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

int Handoff(int, char**) {
  CUdevice dev;
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

}  // namespace gslice::probe
