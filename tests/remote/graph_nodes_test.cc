// The worker's side of graph nodes whose parameters hold host pointers
// (remote/protocol/graph_nodes.h), with a recording stand-in for the driver: what a hostile
// client's request can make the worker's driver see.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "calls.h"
#include "dispatch.h"
#include "graph_nodes.h"
#include "launch.h"
#include "wire.h"

namespace gslice::remote {
namespace {

int32_t ResultOf(const Writer& out) {
  int32_t r = 0;
  std::memcpy(&r, out.buffer().data(), sizeof r);
  return r;
}

// What the stand-in driver was called with.
struct Seen {
  int calls = 0;
  CUDA_MEMCPY3D copy{};
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  std::vector<uint64_t> kernel_args;
};
Seen g_seen;
CUgraph g_bodies[2] = {reinterpret_cast<CUgraph>(0xb0d1), reinterpret_cast<CUgraph>(0xb0d2)};
const CUgraphNode kNode = reinterpret_cast<CUgraphNode>(0x40de);

CUresult FakeAddCopyNode(CUgraphNode* out, CUgraph, const CUgraphNode*, size_t, const CUDA_MEMCPY3D* copy, CUcontext) {
  ++g_seen.calls;
  g_seen.copy = *copy;
  *out = kNode;
  return CUDA_SUCCESS;
}

CUresult FakeSetCopyNode(CUgraphExec, CUgraphNode, const CUDA_MEMCPY3D* copy, CUcontext) {
  ++g_seen.calls;
  g_seen.copy = *copy;
  return CUDA_SUCCESS;
}

CUresult FakeAddNode(CUgraphNode* out, CUgraph, const CUgraphNode*, const CUgraphEdgeData*, size_t,
                     CUgraphNodeParams* p) {
  ++g_seen.calls;
  g_seen.type = p->type;
  if (p->type == CU_GRAPH_NODE_TYPE_MEMCPY) g_seen.copy = p->memcpy.copyParams;
  if (p->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) p->conditional.phGraph_out = g_bodies;
  *out = kNode;
  return CUDA_SUCCESS;
}

CUresult FakeAddKernelNode(CUgraphNode* out, CUgraph, const CUgraphNode*, size_t, const CUDA_KERNEL_NODE_PARAMS* p) {
  ++g_seen.calls;
  g_seen.kernel_args.clear();
  for (void** a = p->kernelParams; a != nullptr && *a != nullptr; ++a) {
    uint64_t v = 0;
    std::memcpy(&v, *a, sizeof v);
    g_seen.kernel_args.push_back(v);
  }
  *out = kNode;
  return CUDA_SUCCESS;
}

class GraphNodesOnTheWorker : public ::testing::Test {
 protected:
  void SetUp() override {
    g_seen = Seen{};
    g_driver[kOp_cuGraphAddMemcpyNode] = reinterpret_cast<void*>(&FakeAddCopyNode);
    g_driver[kOp_cuGraphExecMemcpyNodeSetParams] = reinterpret_cast<void*>(&FakeSetCopyNode);
    g_driver[kOp_cuGraphAddNode_v2] = reinterpret_cast<void*>(&FakeAddNode);
    g_driver[kOp_cuGraphAddKernelNode_v2] = reinterpret_cast<void*>(&FakeAddKernelNode);
  }
  void TearDown() override {
    for (uint32_t op : {kOp_cuGraphAddMemcpyNode, kOp_cuGraphExecMemcpyNodeSetParams, kOp_cuGraphAddNode_v2,
                        kOp_cuGraphAddKernelNode_v2}) {
      g_driver[op] = nullptr;
    }
  }

  // Dispatches request; returns the result and leaves the reply after it in *reply.
  static int32_t Run(uint32_t op, const Writer& request, std::vector<uint8_t>* reply = nullptr) {
    Reader in(request.buffer().data(), request.size());
    Writer out;
    EXPECT_EQ(Dispatch(op, in, out), Dispatched::kAnswered);
    if (reply != nullptr) reply->assign(out.buffer().begin() + sizeof(int32_t), out.buffer().end());
    return ResultOf(out);
  }
};

CUDA_MEMCPY3D HostToDevice(const void* host) {
  CUDA_MEMCPY3D c{};
  c.srcMemoryType = CU_MEMORYTYPE_HOST;
  c.srcHost = host;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = 0x1000;
  c.WidthInBytes = 64;
  c.Height = 1;
  c.Depth = 1;
  return c;
}

TEST_F(GraphNodesOnTheWorker, ACopyNodeNamingHostMemoryNeverReachesTheDriver) {
  static const char kWorkerSecret[64] = "what the worker holds";
  for (CUmemorytype type : {CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_UNIFIED, CU_MEMORYTYPE_ARRAY}) {
    SCOPED_TRACE(static_cast<int>(type));
    CUDA_MEMCPY3D copy = HostToDevice(kWorkerSecret);
    copy.srcMemoryType = type;
    Writer add;  // cuGraphAddMemcpyNode: graph, no dependencies, the copy, the context
    add.Put<uint64_t>(0x6a);
    EncodeDependencies(nullptr, 0, &add);
    add.PutBytes(&copy, sizeof copy);
    add.Put<uint64_t>(0);
    EXPECT_EQ(Run(kOp_cuGraphAddMemcpyNode, add), CUDA_ERROR_NOT_SUPPORTED);
    Writer set;  // cuGraphExecMemcpyNodeSetParams: exec, node, the copy, the context
    set.Put<uint64_t>(0xe8);
    set.Put<uint64_t>(0x40de);
    set.PutBytes(&copy, sizeof copy);
    set.Put<uint64_t>(0);
    EXPECT_EQ(Run(kOp_cuGraphExecMemcpyNodeSetParams, set), CUDA_ERROR_NOT_SUPPORTED);
    CUgraphNodeParams p{};
    p.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    p.memcpy.copyParams = copy;
    Writer any;  // cuGraphAddNode_v2: graph, no dependencies, no edges, the node
    any.Put<uint64_t>(0x6a);
    EncodeDependencies(nullptr, 0, &any);
    any.Put<uint8_t>(0);
    any.PutBytes(&p, sizeof p);
    EXPECT_EQ(Run(kOp_cuGraphAddNode_v2, any), CUDA_ERROR_NOT_SUPPORTED);
  }
  EXPECT_EQ(g_seen.calls, 0);
}

TEST_F(GraphNodesOnTheWorker, ADeviceCopyReachesTheDriverWithNoOtherAddress) {
  CUDA_MEMCPY3D copy = HostToDevice(reinterpret_cast<const void*>(0xdead0000));
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.srcDevice = 0x2000;
  copy.dstHost = reinterpret_cast<void*>(0xdead1000);
  Writer add;
  add.Put<uint64_t>(0x6a);
  EncodeDependencies(nullptr, 0, &add);
  add.PutBytes(&copy, sizeof copy);
  add.Put<uint64_t>(0);
  std::vector<uint8_t> reply;
  ASSERT_EQ(Run(kOp_cuGraphAddMemcpyNode, add, &reply), CUDA_SUCCESS);
  ASSERT_EQ(g_seen.calls, 1);
  EXPECT_EQ(g_seen.copy.srcDevice, 0x2000u);
  EXPECT_EQ(g_seen.copy.dstDevice, 0x1000u);
  EXPECT_EQ(g_seen.copy.srcHost, nullptr);
  EXPECT_EQ(g_seen.copy.dstHost, nullptr);
  ASSERT_EQ(reply.size(), sizeof(CUgraphNode));
}

TEST_F(GraphNodesOnTheWorker, NodeKindsHoldingOtherPointersAreRefused) {
  for (CUgraphNodeType type : {CU_GRAPH_NODE_TYPE_HOST, CU_GRAPH_NODE_TYPE_MEM_ALLOC, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP,
                               CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL}) {
    CUgraphNodeParams p{};
    p.type = type;
    p.host.fn = reinterpret_cast<CUhostFn>(0xdead2000);
    Writer any;
    any.Put<uint64_t>(0x6a);
    EncodeDependencies(nullptr, 0, &any);
    any.Put<uint8_t>(0);
    any.PutBytes(&p, sizeof p);
    EXPECT_EQ(Run(kOp_cuGraphAddNode_v2, any), CUDA_ERROR_NOT_SUPPORTED) << type;
  }
  EXPECT_EQ(g_seen.calls, 0);
}

TEST_F(GraphNodesOnTheWorker, AConditionalsBodiesComeBackAndItsCountIsBounded) {
  CUgraphNodeParams p{};
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.conditional.type = CU_GRAPH_COND_TYPE_IF;
  p.conditional.size = 2;
  p.conditional.phGraph_out = reinterpret_cast<CUgraph*>(0xdead3000);  // the client's; never followed
  Writer any;
  any.Put<uint64_t>(0x6a);
  EncodeDependencies(nullptr, 0, &any);
  any.Put<uint8_t>(0);
  any.PutBytes(&p, sizeof p);
  std::vector<uint8_t> reply;
  ASSERT_EQ(Run(kOp_cuGraphAddNode_v2, any, &reply), CUDA_SUCCESS);
  Reader r(reply.data(), reply.size());
  CUgraphNode node = nullptr;
  uint32_t count = 0;
  CUgraph bodies[2] = {};
  ASSERT_TRUE(r.Get(&node) && r.Get(&count) && count == 2 && r.GetInto(bodies, sizeof bodies) && r.AtEnd());
  EXPECT_EQ(node, kNode);
  EXPECT_EQ(bodies[0], g_bodies[0]);
  EXPECT_EQ(bodies[1], g_bodies[1]);

  p.conditional.size = kMaxConditionalBodies + 1;
  Writer big;
  big.Put<uint64_t>(0x6a);
  EncodeDependencies(nullptr, 0, &big);
  big.Put<uint8_t>(0);
  big.PutBytes(&p, sizeof p);
  Reader in(big.buffer().data(), big.size());
  Writer out;
  EXPECT_EQ(Dispatch(kOp_cuGraphAddNode_v2, in, out), Dispatched::kRefused);
  EXPECT_EQ(g_seen.calls, 1);
}

TEST_F(GraphNodesOnTheWorker, AKernelNodesArgumentsArriveLaidOutAndTheirCountIsBounded) {
  CUDA_KERNEL_NODE_PARAMS node{.func = reinterpret_cast<CUfunction>(0xf0), .gridDimX = 1, .gridDimY = 1,
                               .gridDimZ = 1, .blockDimX = 32, .blockDimY = 1, .blockDimZ = 1, .sharedMemBytes = 0,
                               .kernelParams = nullptr, .extra = nullptr, .kern = nullptr, .ctx = nullptr};
  uint64_t dst = 0x1000, count = 77;
  void* params[] = {&dst, &count};
  const uint32_t sizes[] = {8, 8};
  Writer add;
  add.Put<uint64_t>(0x6a);
  EncodeDependencies(nullptr, 0, &add);
  EncodeKernelNode(node, &add);
  ASSERT_TRUE(EncodeLaunchParams(params, sizes, 2, nullptr, 0, &add));
  ASSERT_EQ(Run(kOp_cuGraphAddKernelNode_v2, add), CUDA_SUCCESS);
  EXPECT_EQ(g_seen.kernel_args, (std::vector<uint64_t>{0x1000, 77}));

  Writer many;  // more dependencies than one request carries
  many.Put<uint64_t>(0x6a);
  many.Put<uint64_t>(kMaxGraphDependencies + 1);
  Reader in(many.buffer().data(), many.size());
  Writer out;
  EXPECT_EQ(Dispatch(kOp_cuGraphAddKernelNode_v2, in, out), Dispatched::kRefused);
  EXPECT_EQ(g_seen.calls, 1);
}

}  // namespace
}  // namespace gslice::remote
