// The wire format of the graph calls whose node parameters hold host pointers (calls.def:
// custom cuGraphAddKernelNode_v2, cuGraphExecKernelNodeSetParams_v2, cuGraphAddMemcpyNode,
// cuGraphExecMemcpyNodeSetParams, cuGraphAddNode, cuGraphAddNode_v2) and of cuGraphExecUpdate_v2,
// whose answer matters when it fails, after the request
// prefix. The client writes it (remote/client/graph_nodes.cc), the worker reads it
// (remote/server/graph_nodes.cc); this is the one definition of both.
//
//   add a node     u64 graph, dependencies, the node; answered with u64 node (cuGraphAddNode
//                  of a conditional: then u32 count and that many body graphs)
//   set a node     u64 graph exec, u64 node, the node
//   dependencies   u64 count (at most kMaxGraphDependencies), count CUgraphNode; for
//                  cuGraphAddNode_v2 then u8 present and (if 1) count CUgraphEdgeData
//   kernel node    launch.h's configuration (stream 0, no attributes), u64 kern, u64 ctx,
//                  launch.h's parameters (kernelParams laid out as a launch's, or extra's)
//   copy node      the CUDA_MEMCPY3D as it is, u64 ctx
//   any node       (cuGraphAddNode) the CUgraphNodeParams as it is; a kernel's is followed by
//                  launch.h's parameters, whose pointers in it are the worker's to set
//   exec update    (cuGraphExecUpdate_v2) u64 graph exec, u64 graph, u8 whether the result info
//                  is wanted; answered, whatever the result, with the CUgraphExecUpdateResultInfo
//                  when it was
//
// Trust: the worker's driver would follow a host address of a copy node in the worker's own
// memory (a tenant reading or writing what its worker holds), so a copy names device memory on
// both sides (DeviceCopy) and the worker clears every other address of the structure before its
// driver sees it. cuGraphAddNode takes the kinds in GraphNodeKindForwarded only; the others hold
// pointers the worker could not vouch for (a host function, semaphore and memory-operation
// arrays). Every count is checked against its limit before use.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "launch.h"
#include "wire.h"

namespace gslice::remote {

// More dependencies than one node of a real graph has; bounds what one request carries.
inline constexpr uint64_t kMaxGraphDependencies = 1u << 16;
// More body graphs than a conditional of a real graph has (a SWITCH's cases).
inline constexpr uint32_t kMaxConditionalBodies = 1u << 12;

// Whether *copy reads and writes device memory only (a copy node the worker's driver may make);
// if so, clears every address in it but the two device pointers, else leaves it as it is.
inline bool ToDeviceCopy(CUDA_MEMCPY3D* copy) {
  if (copy->srcMemoryType != CU_MEMORYTYPE_DEVICE || copy->dstMemoryType != CU_MEMORYTYPE_DEVICE) return false;
  copy->srcHost = nullptr;
  copy->dstHost = nullptr;
  copy->srcArray = nullptr;
  copy->dstArray = nullptr;
  copy->reserved0 = nullptr;
  copy->reserved1 = nullptr;
  return true;
}

// The kinds of node cuGraphAddNode forwards.
inline bool GraphNodeKindForwarded(CUgraphNodeType type) {
  switch (type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
    case CU_GRAPH_NODE_TYPE_MEMCPY:
    case CU_GRAPH_NODE_TYPE_MEMSET:
    case CU_GRAPH_NODE_TYPE_EMPTY:
    case CU_GRAPH_NODE_TYPE_GRAPH:
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      return true;
    default:
      return false;
  }
}

// REQUIRES: count <= kMaxGraphDependencies, deps non-null when count > 0.
inline void EncodeDependencies(const CUgraphNode* deps, uint64_t count, Writer* w) {
  w->Put<uint64_t>(count);
  if (count > 0) w->PutBytes(deps, count * sizeof(CUgraphNode));
}

// False when the request is short or names too many. *deps holds them.
inline bool DecodeDependencies(Reader* r, std::vector<CUgraphNode>* deps) {
  uint64_t count = 0;
  if (!r->Get(&count) || count > kMaxGraphDependencies) return false;
  deps->assign(count, nullptr);
  return count == 0 || r->GetInto(deps->data(), count * sizeof(CUgraphNode));
}

// A kernel node's parameters but its arguments (which follow: launch.h's EncodeLaunchParams).
inline void EncodeKernelNode(const CUDA_KERNEL_NODE_PARAMS& p, Writer* w) {
  EncodeLaunchConfig(LaunchConfig{.f = p.func,
                                  .dims = {p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX, p.blockDimY, p.blockDimZ,
                                           p.sharedMemBytes},
                                  .stream = nullptr,
                                  .num_attrs = 0,
                                  .attrs = nullptr},
                     w);
  w->Put(p.kern);
  w->Put(p.ctx);
}

// False when the request is short or names attributes (a node has none). Sets every field of *p
// but kernelParams and extra (NULL: the reader's to point at the arguments).
inline bool DecodeKernelNode(Reader* r, CUDA_KERNEL_NODE_PARAMS* p) {
  LaunchConfig c;
  std::vector<CUlaunchAttribute> attrs;
  if (!DecodeLaunchConfig(r, &c, &attrs) || c.num_attrs != 0 || c.stream != nullptr) return false;
  *p = CUDA_KERNEL_NODE_PARAMS{.func = c.f, .gridDimX = c.dims[0], .gridDimY = c.dims[1], .gridDimZ = c.dims[2],
                               .blockDimX = c.dims[3], .blockDimY = c.dims[4], .blockDimZ = c.dims[5],
                               .sharedMemBytes = c.dims[6], .kernelParams = nullptr, .extra = nullptr,
                               .kern = nullptr, .ctx = nullptr};
  return r->Get(&p->kern) && r->Get(&p->ctx);
}

}  // namespace gslice::remote
