// Graph nodes whose parameters hold host pointers, through the client (wire format and what the
// worker accepts: remote/protocol/graph_nodes.h). A kernel node's kernelParams point at the
// kernel's arguments in this process: they are laid out and sent as a launch's are
// (local_calls.h: KernelArguments), and the worker's driver copies them into the node, as it
// does for the application. A copy node naming host memory is refused here with a line naming
// the call, and again by the worker. A conditional's body graphs are the worker's: the client
// keeps the array cuGraphAddNode hands out (phGraph_out) for as long as the process lives, as
// the driver keeps it for the node's life. cuGraphExecUpdate_v2 is here too: its result info is
// the answer that matters when the update fails, which generated calls do not bring back.
#include <cuda.h>
#include <pthread.h>

#include <map>
#include <vector>

#include "call.h"
#include "client_calls.h"
#include "graph_nodes.h"
#include "local_calls.h"
#include "pointer_answers.h"
#include "refusals.h"

namespace gslice::remote {
namespace {

// What the worker answered as a conditional's bodies, by node. Never freed: the driver's array
// is valid while the node lives, and the client does not see a node go.
pthread_mutex_t g_bodies_mu = PTHREAD_MUTEX_INITIALIZER;
std::map<CUgraphNode, std::vector<CUgraph>>* g_bodies = nullptr;

CUgraph* KeepBodies(CUgraphNode node, std::vector<CUgraph> bodies) {
  pthread_mutex_lock(&g_bodies_mu);
  if (g_bodies == nullptr) g_bodies = new std::map<CUgraphNode, std::vector<CUgraph>>();
  std::vector<CUgraph>& kept = (*g_bodies)[node];
  kept = std::move(bodies);
  CUgraph* at = kept.data();
  pthread_mutex_unlock(&g_bodies_mu);
  return at;
}

CUresult RefuseHostCopy(const char* call) {
  return RefuseWhat(call, "a copy node with host memory or an array (only device-to-device copies are)");
}

const char* NodeKindName(CUgraphNodeType type) {
  switch (type) {
    case CU_GRAPH_NODE_TYPE_HOST: return "a host node (a function the worker would call)";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return "an event wait node";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return "an event record node";
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL: return "an external semaphore signal node";
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT: return "an external semaphore wait node";
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return "a memory allocation node";
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return "a memory free node";
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: return "a batch memory operation node";
    default: return "a node of this type";
  }
}

bool DependenciesValid(const CUgraphNode* deps, size_t count) {
  return (count == 0 || deps != nullptr) && count <= kMaxGraphDependencies;
}

// The kernel a node names: its function, else its library kernel (the layout tells them apart).
CUfunction NodeKernel(CUfunction func, CUkernel kern) {
  return func != nullptr ? func : reinterpret_cast<CUfunction>(kern);
}

// Runs call and reads the node handle it answers.
CUresult RunForNode(Call& call, CUgraphNode* out) {
  const CUresult res = call.Run();
  if (res != CUDA_SUCCESS) return res;
  CUgraphNode node = nullptr;
  if (!call.reply().Get(&node) || !call.reply().AtEnd()) return call.Malformed();
  *out = node;
  return res;
}

CUresult AddKernelNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                       const CUDA_KERNEL_NODE_PARAMS* p) {
  if (out == nullptr || p == nullptr || !DependenciesValid(deps, count)) return CUDA_ERROR_INVALID_VALUE;
  KernelArguments arguments;
  CUresult r = ReadKernelArguments(NodeKernel(p->func, p->kern), p->kernelParams, p->extra, &arguments);
  if (r != CUDA_SUCCESS) return r;
  Call call(kOp_cuGraphAddKernelNode_v2);
  call.request().Put(graph);
  EncodeDependencies(deps, count, &call.request());
  EncodeKernelNode(*p, &call.request());
  if (!EncodeKernelArguments(arguments, &call.request())) return CUDA_ERROR_INVALID_VALUE;
  return RunForNode(call, out);
}

CUresult SetKernelNode(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  KernelArguments arguments;
  CUresult r = ReadKernelArguments(NodeKernel(p->func, p->kern), p->kernelParams, p->extra, &arguments);
  if (r != CUDA_SUCCESS) return r;
  Call call(kOp_cuGraphExecKernelNodeSetParams_v2);
  call.request().Put(exec);
  call.request().Put(node);
  EncodeKernelNode(*p, &call.request());
  if (!EncodeKernelArguments(arguments, &call.request())) return CUDA_ERROR_INVALID_VALUE;
  const CUresult res = call.Run();
  if (res != CUDA_SUCCESS) return res;
  if (!call.reply().AtEnd()) return call.Malformed();
  return res;
}

CUresult AddCopyNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count, const CUDA_MEMCPY3D* p,
                     CUcontext ctx) {
  if (out == nullptr || p == nullptr || !DependenciesValid(deps, count)) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D copy = *p;
  if (!ToDeviceCopy(&copy)) return RefuseHostCopy("cuGraphAddMemcpyNode");
  Call call(kOp_cuGraphAddMemcpyNode);
  call.request().Put(graph);
  EncodeDependencies(deps, count, &call.request());
  call.request().PutBytes(&copy, sizeof copy);
  call.request().Put(ctx);
  return RunForNode(call, out);
}

CUresult SetCopyNode(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D* p, CUcontext ctx) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D copy = *p;
  if (!ToDeviceCopy(&copy)) return RefuseHostCopy("cuGraphExecMemcpyNodeSetParams");
  Call call(kOp_cuGraphExecMemcpyNodeSetParams);
  call.request().Put(exec);
  call.request().Put(node);
  call.request().PutBytes(&copy, sizeof copy);
  call.request().Put(ctx);
  const CUresult res = call.Run();
  if (res != CUDA_SUCCESS) return res;
  if (!call.reply().AtEnd()) return call.Malformed();
  return res;
}

// cuGraphAddNode (with_edges false) and cuGraphAddNode_v2.
CUresult AddNode(const char* name, uint32_t op, bool with_edges, CUgraphNode* out, CUgraph graph,
                 const CUgraphNode* deps, const CUgraphEdgeData* edges, size_t count, CUgraphNodeParams* p) {
  if (out == nullptr || p == nullptr || !DependenciesValid(deps, count)) return CUDA_ERROR_INVALID_VALUE;
  // Graph launches may map memory from here on, whether or not the kind is forwarded.
  if (p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) NoteGraphAllocation();
  if (!GraphNodeKindForwarded(p->type)) return RefuseWhat(name, NodeKindName(p->type));
  // The worker sets the structure's pointers itself; none of this process's travels.
  CUgraphNodeParams sent = *p;
  if (sent.type == CU_GRAPH_NODE_TYPE_MEMCPY && !ToDeviceCopy(&sent.memcpy.copyParams)) return RefuseHostCopy(name);
  if (p->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && p->conditional.size > kMaxConditionalBodies) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  KernelArguments arguments;
  if (p->type == CU_GRAPH_NODE_TYPE_KERNEL) {
    CUresult r = ReadKernelArguments(NodeKernel(p->kernel.func, p->kernel.kern), p->kernel.kernelParams,
                                     p->kernel.extra, &arguments);
    if (r != CUDA_SUCCESS) return r;
  }
  Call call(op);
  Writer& w = call.request();
  w.Put(graph);
  EncodeDependencies(deps, count, &w);
  if (with_edges) {
    w.Put<uint8_t>(edges != nullptr && count > 0);
    if (edges != nullptr && count > 0) w.PutBytes(edges, count * sizeof(CUgraphEdgeData));
  }
  if (sent.type == CU_GRAPH_NODE_TYPE_KERNEL) sent.kernel.kernelParams = sent.kernel.extra = nullptr;
  if (sent.type == CU_GRAPH_NODE_TYPE_CONDITIONAL) sent.conditional.phGraph_out = nullptr;
  w.PutBytes(&sent, sizeof sent);
  if (p->type == CU_GRAPH_NODE_TYPE_KERNEL && !EncodeKernelArguments(arguments, &w)) return CUDA_ERROR_INVALID_VALUE;
  const CUresult res = call.Run();
  if (res != CUDA_SUCCESS) return res;
  Reader& r = call.reply();
  CUgraphNode node = nullptr;
  if (!r.Get(&node)) return call.Malformed();
  if (p->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
    uint32_t bodies = 0;
    if (!r.Get(&bodies) || bodies != p->conditional.size) return call.Malformed();
    std::vector<CUgraph> graphs(bodies);
    if (bodies > 0 && !r.GetInto(graphs.data(), bodies * sizeof(CUgraph))) return call.Malformed();
    if (!r.AtEnd()) return call.Malformed();
    p->conditional.phGraph_out = KeepBodies(node, std::move(graphs));
  } else if (!r.AtEnd()) {
    return call.Malformed();
  }
  *out = node;
  return res;
}

// The result info is the driver's answer when the update fails, too.
CUresult ExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  Call call(kOp_cuGraphExecUpdate_v2);
  call.request().Put(exec);
  call.request().Put(graph);
  call.request().Put<uint8_t>(info != nullptr);
  const CUresult res = call.Run();
  if (!call.answered()) return res;
  Reader& r = call.reply();
  CUgraphExecUpdateResultInfo got{};
  if ((info != nullptr && !r.GetInto(&got, sizeof got)) || !r.AtEnd()) return call.Malformed();
  if (info != nullptr) *info = got;
  return res;
}

}  // namespace
}  // namespace gslice::remote

using namespace gslice::remote;

extern "C" CUresult gslice_remote_call_cuGraphAddKernelNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                             const CUgraphNode* dependencies, size_t numDependencies,
                                                             const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  return AddKernelNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

extern "C" CUresult gslice_remote_call_cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                                       const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  return SetKernelNode(hGraphExec, hNode, nodeParams);
}

extern "C" CUresult gslice_remote_call_cuGraphAddMemcpyNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                          const CUgraphNode* dependencies, size_t numDependencies,
                                                          const CUDA_MEMCPY3D* copyParams, CUcontext ctx) {
  return AddCopyNode(phGraphNode, hGraph, dependencies, numDependencies, copyParams, ctx);
}

extern "C" CUresult gslice_remote_call_cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                                    const CUDA_MEMCPY3D* copyParams, CUcontext ctx) {
  return SetCopyNode(hGraphExec, hNode, copyParams, ctx);
}

extern "C" CUresult gslice_remote_call_cuGraphAddNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                    const CUgraphNode* dependencies, size_t numDependencies,
                                                    CUgraphNodeParams* nodeParams) {
  return AddNode("cuGraphAddNode", kOp_cuGraphAddNode, false, phGraphNode, hGraph, dependencies, nullptr,
                 numDependencies, nodeParams);
}

extern "C" CUresult gslice_remote_call_cuGraphAddNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                       const CUgraphNode* dependencies,
                                                       const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                                       CUgraphNodeParams* nodeParams) {
  return AddNode("cuGraphAddNode_v2", kOp_cuGraphAddNode_v2, true, phGraphNode, hGraph, dependencies, dependencyData,
                 numDependencies, nodeParams);
}

extern "C" CUresult gslice_remote_call_cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                                          CUgraphExecUpdateResultInfo* resultInfo) {
  return ExecUpdate(hGraphExec, hGraph, resultInfo);
}
