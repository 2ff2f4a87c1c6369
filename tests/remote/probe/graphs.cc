// Graphs built by hand and by capture into a graph, as XLA's command buffers build them: memset,
// kernel, copy, empty and child-graph nodes with dependencies, work captured into the graph
// after a node, IF conditionals, then the executable graph's nodes changed in place.
#include <vector>

#include "probe.h"

namespace gslice::probe {
namespace {

constexpr size_t kWords = 1 << 14;

void VerifyHalves(CUdeviceptr p, uint32_t first, uint32_t second, const char* what) {
  std::vector<uint32_t> host(kWords);
  CK(cuMemcpyDtoH(host.data(), p, kWords * 4));
  for (size_t i = 0; i < kWords; ++i) Expect(host[i] == (i < kWords / 2 ? first : second), what);
}

CUDA_MEMSET_NODE_PARAMS Memset32(CUdeviceptr dst, uint32_t value, size_t words) {
  return CUDA_MEMSET_NODE_PARAMS{.dst = dst, .pitch = 0, .value = value, .elementSize = 4, .width = words,
                                 .height = 1};
}

CUDA_MEMCPY3D DeviceCopy(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  CUDA_MEMCPY3D c{};
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = src;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = dst;
  c.WidthInBytes = bytes;
  c.Height = 1;
  c.Depth = 1;
  return c;
}

// An IF conditional whose handle assigns value at each launch, its body a memset of words at dst.
CUgraphNode AddIf(CUgraph graph, CUcontext ctx, unsigned value, CUdeviceptr dst, uint32_t pattern) {
  CUgraphConditionalHandle handle = 0;
  CK(cuGraphConditionalHandleCreate(&handle, graph, ctx, value, CU_GRAPH_COND_ASSIGN_DEFAULT));
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.conditional.handle = handle;
  p.conditional.type = CU_GRAPH_COND_TYPE_IF;
  p.conditional.size = 1;
  p.conditional.ctx = ctx;
  CUgraphNode node = nullptr;
  CK(cuGraphAddNode(&node, graph, nullptr, nullptr, 0, &p));
  Expect(p.conditional.phGraph_out != nullptr && p.conditional.phGraph_out[0] != nullptr, "a conditional's body");
  const CUDA_MEMSET_NODE_PARAMS body = Memset32(dst, pattern, kWords);
  CUgraphNode in_body = nullptr;
  CK(cuGraphAddMemsetNode(&in_body, p.conditional.phGraph_out[0], nullptr, 0, &body, ctx));
  return node;
}

}  // namespace

int GraphNodes(int, char**) {
  CUdevice dev;
  CUcontext ctx = Setup(&dev);
  CUmodule module;
  CUfunction busy, fill;
  CK(gslice::test::LoadTestKernels(&module, &busy, &fill));
  CUstream stream;
  CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a = 0, b = 0, c = 0, d = 0, e = 0;
  for (CUdeviceptr* p : {&a, &b, &c, &d, &e}) CK(cuMemAlloc(p, kWords * 4));

  CUgraph graph = nullptr, child = nullptr;
  CK(cuGraphCreate(&graph, 0));
  // a = 2s; then b = 0x42s by a kernel; then a's first half = b's; then nothing; then c = 3s in
  // a child graph.
  const CUDA_MEMSET_NODE_PARAMS set_a = Memset32(a, 0x02020202u, kWords);
  CUgraphNode n_set = nullptr, n_fill = nullptr, n_copy = nullptr, n_join = nullptr, n_child = nullptr;
  CK(cuGraphAddMemsetNode(&n_set, graph, nullptr, 0, &set_a, ctx));
  uint32_t pattern = 0x42424242u;
  uint64_t count = kWords;
  void* args[] = {&b, &pattern, &count};
  CUDA_KERNEL_NODE_PARAMS kernel{.func = fill, .gridDimX = 64, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 256,
                                 .blockDimY = 1, .blockDimZ = 1, .sharedMemBytes = 0, .kernelParams = args,
                                 .extra = nullptr, .kern = nullptr, .ctx = nullptr};
  CK(cuGraphAddKernelNode(&n_fill, graph, &n_set, 1, &kernel));
  pattern = 0x99999999u;  // the node holds the arguments it was given
  const CUDA_MEMCPY3D copy = DeviceCopy(a, b, kWords * 2);
  CK(cuGraphAddMemcpyNode(&n_copy, graph, &n_fill, 1, &copy, ctx));
  CK(cuGraphAddEmptyNode(&n_join, graph, &n_copy, 1));
  CK(cuGraphCreate(&child, 0));
  const CUDA_MEMSET_NODE_PARAMS set_c = Memset32(c, 0x03030303u, kWords);
  CUgraphNode in_child = nullptr;
  CK(cuGraphAddMemsetNode(&in_child, child, nullptr, 0, &set_c, ctx));
  CK(cuGraphAddChildGraphNode(&n_child, graph, &n_join, 1, child));
  CUgraph child_copy = nullptr;
  CK(cuGraphChildGraphNodeGetGraph(n_child, &child_copy));
  printf("child node holds a copy of its graph: %s\n", child_copy != nullptr && child_copy != child ? "yes" : "no");

  // Captured after the child node: c's second half = 5s.
  CK(cuStreamBeginCaptureToGraph(stream, graph, &n_child, nullptr, 1, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CK(cuStreamIsCapturing(stream, &status));
  CK(gslice::test::LaunchFill(fill, c + kWords * 2, 0x05050505u, kWords / 2, stream));
  CUgraph captured = nullptr;
  CK(cuStreamEndCapture(stream, &captured));
  printf("capture into the graph: %s, ended into the same graph: %s\n",
         status == CU_STREAM_CAPTURE_STATUS_ACTIVE ? "capturing" : "not capturing", captured == graph ? "yes" : "no");

  // d = 6s when the condition is 1; e stays when it is 0.
  AddIf(graph, ctx, 1, d, 0x06060606u);
  AddIf(graph, ctx, 0, e, 0x0e0e0e0eu);

  size_t nodes = 0, roots = 0, deps = 0;
  CK(cuGraphGetNodes(graph, nullptr, &nodes));
  CK(cuGraphGetRootNodes(graph, nullptr, &roots));
  CK(cuGraphNodeGetDependencies(n_copy, nullptr, nullptr, &deps));
  CUgraphNode dep = nullptr;
  size_t one = 1;
  CK(cuGraphNodeGetDependencies(n_copy, &dep, nullptr, &one));
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  CK(cuGraphNodeGetType(n_fill, &type));
  printf("graph of %zu nodes, %zu roots; the copy depends on %zu node%s, the kernel node: %s; kernel node type %s\n",
         nodes, roots, deps, deps == 1 ? "" : "s", dep == n_fill ? "yes" : "no",
         type == CU_GRAPH_NODE_TYPE_KERNEL ? "kernel" : "other");

  CUgraphExec exec = nullptr;
  CK(cuGraphInstantiate(&exec, graph, 0));
  for (int round = 0; round < 2; ++round) {
    for (CUdeviceptr p : {a, b, c, d, e}) CK(cuMemsetD32(p, 0x07070707u, kWords));
    CK(cuGraphLaunch(exec, stream));
    CK(cuStreamSynchronize(stream));
    VerifyHalves(a, 0x42424242u, 0x02020202u, "a: copied half, set half");
    VerifyHalves(b, 0x42424242u, 0x42424242u, "b: the kernel node");
    VerifyHalves(c, 0x03030303u, 0x05050505u, "c: the child graph, then the captured kernel");
    VerifyHalves(d, 0x06060606u, 0x06060606u, "d: the IF whose condition is 1");
    VerifyHalves(e, 0x07070707u, 0x07070707u, "e: the IF whose condition is 0");
  }
  printf("hand-built graph launched twice: results verified\n");

  // The executable graph's nodes changed in place: the kernel's argument, the memset's value,
  // the copy disabled.
  pattern = 0x43434343u;
  CK(cuGraphExecKernelNodeSetParams(exec, n_fill, &kernel));
  const CUDA_MEMSET_NODE_PARAMS set_a8 = Memset32(a, 0x08080808u, kWords);
  CK(cuGraphExecMemsetNodeSetParams(exec, n_set, &set_a8, ctx));
  const CUDA_MEMCPY3D copy_back = DeviceCopy(b, a, kWords * 2);
  CK(cuGraphExecMemcpyNodeSetParams(exec, n_copy, &copy_back, ctx));
  CK(cuGraphLaunch(exec, stream));
  CK(cuStreamSynchronize(stream));
  VerifyHalves(a, 0x08080808u, 0x08080808u, "a: the memset's new value");
  VerifyHalves(b, 0x08080808u, 0x43434343u, "b: the kernel's new argument, then the copy's new direction");
  CK(cuGraphNodeSetEnabled(exec, n_copy, 0));
  CK(cuGraphLaunch(exec, stream));
  CK(cuStreamSynchronize(stream));
  VerifyHalves(b, 0x43434343u, 0x43434343u, "b: the copy disabled");
  printf("executable graph's nodes set: results verified\n");

  // The executable graph updated from its graph: the nodes' work as the graph has it again.
  CK(cuGraphNodeSetEnabled(exec, n_copy, 1));
  CUgraphExecUpdateResultInfo info{};
  CK(cuGraphExecUpdate(exec, graph, &info));
  CK(cuGraphLaunch(exec, stream));
  CK(cuStreamSynchronize(stream));
  VerifyHalves(a, 0x42424242u, 0x02020202u, "a after the update");
  VerifyHalves(b, 0x42424242u, 0x42424242u, "b after the update");
  CUgraph other = nullptr;
  CK(cuGraphCreate(&other, 0));
  CUgraphNode lone = nullptr;
  CK(cuGraphAddEmptyNode(&lone, other, nullptr, 0));
  const CUresult mismatched = cuGraphExecUpdate(exec, other, &info);
  printf("update from its graph: %s; from a graph of another shape: %s (%s)\n",
         "verified", Name(mismatched),
         info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED ? "topology changed" : "other");
  CK(cuGraphDestroy(other));

  CK(cuGraphExecDestroy(exec));
  CK(cuGraphDestroy(graph));
  CK(cuGraphDestroy(child));
  return 0;
}

// A copy node naming host memory: what the driver answers for it.
int GraphHostCopy(int, char**) {
  CUdevice dev;
  CUcontext ctx = Setup(&dev);
  CUdeviceptr a = 0;
  CK(cuMemAlloc(&a, 4096));
  std::vector<uint8_t> host(4096, 1);
  CUgraph graph = nullptr;
  CK(cuGraphCreate(&graph, 0));
  CUDA_MEMCPY3D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_HOST;
  copy.srcHost = host.data();
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.dstDevice = a;
  copy.WidthInBytes = host.size();
  copy.Height = 1;
  copy.Depth = 1;
  CUgraphNode node = nullptr;
  printf("host-to-device copy node: %s\n", Name(cuGraphAddMemcpyNode(&node, graph, nullptr, 0, &copy, ctx)));
  CK(cuGraphDestroy(graph));
  return 0;
}

}  // namespace gslice::probe
