// The worker's side of the graph nodes whose parameters hold host pointers (wire format and
// what is accepted: remote/protocol/graph_nodes.h). The driver copies a kernel node's
// arguments when the node is made or set, so the arguments laid out here live for the call.
#include <cuda.h>

#include <vector>

#include "dispatch.h"
#include "graph_nodes.h"

namespace gslice::remote {
namespace {

const CUgraphNode* DataOrNull(const std::vector<CUgraphNode>& deps) { return deps.empty() ? nullptr : deps.data(); }

CUresult ServeAddKernelNode(Reader& r, Writer& w) {
  CUgraph graph{};
  std::vector<CUgraphNode> deps;
  CUDA_KERNEL_NODE_PARAMS p{};
  DriverKernelArguments arguments;
  if (!r.Get(&graph) || !DecodeDependencies(&r, &deps) || !DecodeKernelNode(&r, &p) || !arguments.Read(&r) ||
      !r.AtEnd()) {
    return kMalformed;
  }
  arguments.PointInto(&p);
  using Fn = CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, const CUDA_KERNEL_NODE_PARAMS*);
  auto fn = reinterpret_cast<Fn>(g_driver[kOp_cuGraphAddKernelNode_v2]);
  if (fn == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUgraphNode node = nullptr;
  const CUresult res = fn(&node, graph, DataOrNull(deps), deps.size(), &p);
  if (res == CUDA_SUCCESS) w.Put(node);
  return res;
}

CUresult ServeSetKernelNode(Reader& r, Writer&) {
  CUgraphExec exec{};
  CUgraphNode node{};
  CUDA_KERNEL_NODE_PARAMS p{};
  DriverKernelArguments arguments;
  if (!r.Get(&exec) || !r.Get(&node) || !DecodeKernelNode(&r, &p) || !arguments.Read(&r) || !r.AtEnd()) {
    return kMalformed;
  }
  arguments.PointInto(&p);
  using Fn = CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS*);
  auto fn = reinterpret_cast<Fn>(g_driver[kOp_cuGraphExecKernelNodeSetParams_v2]);
  if (fn == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return fn(exec, node, &p);
}

CUresult ServeAddCopyNode(Reader& r, Writer& w) {
  CUgraph graph{};
  std::vector<CUgraphNode> deps;
  CUDA_MEMCPY3D copy{};
  CUcontext ctx{};
  if (!r.Get(&graph) || !DecodeDependencies(&r, &deps) || !r.GetInto(&copy, sizeof copy) || !r.Get(&ctx) ||
      !r.AtEnd()) {
    return kMalformed;
  }
  if (!ToDeviceCopy(&copy)) return CUDA_ERROR_NOT_SUPPORTED;
  using Fn = CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, const CUDA_MEMCPY3D*, CUcontext);
  auto fn = reinterpret_cast<Fn>(g_driver[kOp_cuGraphAddMemcpyNode]);
  if (fn == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUgraphNode node = nullptr;
  const CUresult res = fn(&node, graph, DataOrNull(deps), deps.size(), &copy, ctx);
  if (res == CUDA_SUCCESS) w.Put(node);
  return res;
}

CUresult ServeSetCopyNode(Reader& r, Writer&) {
  CUgraphExec exec{};
  CUgraphNode node{};
  CUDA_MEMCPY3D copy{};
  CUcontext ctx{};
  if (!r.Get(&exec) || !r.Get(&node) || !r.GetInto(&copy, sizeof copy) || !r.Get(&ctx) || !r.AtEnd()) {
    return kMalformed;
  }
  if (!ToDeviceCopy(&copy)) return CUDA_ERROR_NOT_SUPPORTED;
  using Fn = CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_MEMCPY3D*, CUcontext);
  auto fn = reinterpret_cast<Fn>(g_driver[kOp_cuGraphExecMemcpyNodeSetParams]);
  if (fn == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return fn(exec, node, &copy, ctx);
}

CUresult ServeAddNode(uint32_t op, bool with_edges, Reader& r, Writer& w) {
  CUgraph graph{};
  std::vector<CUgraphNode> deps;
  std::vector<CUgraphEdgeData> edges;
  uint8_t edges_present = 0;
  CUgraphNodeParams p;
  if (!r.Get(&graph) || !DecodeDependencies(&r, &deps)) return kMalformed;
  if (with_edges) {
    if (!r.GetFlag(&edges_present)) return kMalformed;
    if (edges_present) {
      edges.resize(deps.size());
      if (deps.empty() || !r.GetInto(edges.data(), edges.size() * sizeof(CUgraphEdgeData))) return kMalformed;
    }
  }
  if (!r.GetInto(&p, sizeof p)) return kMalformed;
  if (!GraphNodeKindForwarded(p.type)) return CUDA_ERROR_NOT_SUPPORTED;
  // Every pointer of the structure is the worker's own from here on.
  DriverKernelArguments arguments;
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      if (!arguments.Read(&r)) return kMalformed;
      arguments.PointInto(&p.kernel);
      break;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (!ToDeviceCopy(&p.memcpy.copyParams)) return CUDA_ERROR_NOT_SUPPORTED;
      break;
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      if (p.conditional.size > kMaxConditionalBodies) return kMalformed;
      p.conditional.phGraph_out = nullptr;  // the driver's answer
      break;
    default:
      break;  // memsets, empty nodes and child graphs hold device pointers and handles only
  }
  if (!r.AtEnd()) return kMalformed;
  if (g_driver[op] == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUgraphNode node = nullptr;
  CUresult res;
  if (with_edges) {
    using Fn = CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, const CUgraphEdgeData*, size_t,
                            CUgraphNodeParams*);
    res = reinterpret_cast<Fn>(g_driver[op])(&node, graph, DataOrNull(deps), edges_present ? edges.data() : nullptr,
                                            deps.size(), &p);
  } else {
    using Fn = CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*);
    res = reinterpret_cast<Fn>(g_driver[op])(&node, graph, DataOrNull(deps), deps.size(), &p);
  }
  if (res != CUDA_SUCCESS) return res;
  if (p.type == CU_GRAPH_NODE_TYPE_CONDITIONAL && p.conditional.size > 0 && p.conditional.phGraph_out == nullptr) {
    return CUDA_ERROR_NOT_SUPPORTED;  // no bodies to send: the node cannot be filled
  }
  w.Put(node);
  if (p.type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
    w.Put<uint32_t>(p.conditional.size);
    if (p.conditional.size > 0) w.PutBytes(p.conditional.phGraph_out, p.conditional.size * sizeof(CUgraph));
  }
  return res;
}

CUresult ServeExecUpdate(Reader& r, Writer& w) {
  CUgraphExec exec{};
  CUgraph graph{};
  uint8_t want = 0;
  if (!r.Get(&exec) || !r.Get(&graph) || !r.GetFlag(&want) || !r.AtEnd()) return kMalformed;
  using Fn = CUresult (*)(CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo*);
  auto fn = reinterpret_cast<Fn>(g_driver[kOp_cuGraphExecUpdate_v2]);
  CUgraphExecUpdateResultInfo info{};
  const CUresult res = fn != nullptr ? fn(exec, graph, want ? &info : nullptr) : CUDA_ERROR_NOT_SUPPORTED;
  if (want) w.PutBytes(&info, sizeof info);
  return res;
}

}  // namespace

CUresult Serve_cuGraphAddKernelNode_v2(Reader& r, Writer& w) { return ServeAddKernelNode(r, w); }
CUresult Serve_cuGraphExecKernelNodeSetParams_v2(Reader& r, Writer& w) { return ServeSetKernelNode(r, w); }
CUresult Serve_cuGraphAddMemcpyNode(Reader& r, Writer& w) { return ServeAddCopyNode(r, w); }
CUresult Serve_cuGraphExecMemcpyNodeSetParams(Reader& r, Writer& w) { return ServeSetCopyNode(r, w); }
CUresult Serve_cuGraphAddNode(Reader& r, Writer& w) { return ServeAddNode(kOp_cuGraphAddNode, false, r, w); }
CUresult Serve_cuGraphAddNode_v2(Reader& r, Writer& w) { return ServeAddNode(kOp_cuGraphAddNode_v2, true, r, w); }
CUresult Serve_cuGraphExecUpdate_v2(Reader& r, Writer& w) { return ServeExecUpdate(r, w); }

}  // namespace gslice::remote
