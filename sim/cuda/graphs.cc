// Stream capture and CUDA graphs. A graph is a list of nodes in an order in which each node
// follows the nodes it depends on: nodes are added after their dependencies (by hand or by
// capture), so the order of adding is such an order, and the sim keeps it. An instantiated
// graph runs that list on the stream it is launched on, as one piece of work; its nodes' work
// is fixed at instantiation and changed only by the cuGraphExec*SetParams calls and
// cuGraphExecUpdate. A child graph node holds a copy of the child made when it was added, as
// the driver's does.
//
// What a graph may hold: work captured on a stream (launches, copies, memsets, host functions),
// and nodes added by hand: kernels, device-to-device and host copies, memsets, empty nodes,
// child graphs, memory allocations (reserved when added, freed with the graph) and IF
// conditionals. A conditional's value is its handle's default when the
// handle assigns it (CU_GRAPH_COND_ASSIGN_DEFAULT), else 0: no kernel of the sim sets one, so
// WHILE and SWITCH conditionals, which only a kernel ends or steers, are refused. Edges added
// later (cuGraphAddDependencies) are taken when they agree with the order and refused when not;
// the sim has no cross-stream capture (cuStreamWaitEvent on a capturing stream is not recorded).
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "driver.h"

using namespace gslice::sim;

// An entry point and its per-thread-default-stream twin (as in driver.cc).
#define STREAM_ENTRY(name, suffix_pt, params, call)               \
  GSLICE_SIM_EXPORT CUresult name params { return call(false); } \
  GSLICE_SIM_EXPORT CUresult name##suffix_pt params { return call(true); }

namespace {

using Work = std::function<void()>;
using WorkList = std::vector<Work>;

struct ConditionalValue {
  CUgraph_st* graph = nullptr;  // the graph the handle was created for
  unsigned default_value = 0;
  unsigned flags = 0;
  unsigned Value() const { return (flags & CU_GRAPH_COND_ASSIGN_DEFAULT) != 0 ? default_value : 0; }
};

}  // namespace

struct SimNode {
  CUgraph_st* owner = nullptr;
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  std::vector<CUgraphNode> deps;
  Work work;                           // kernels, copies, memsets, captured work; empty otherwise
  CUgraph child = nullptr;             // a child graph node's copy of its graph
  std::vector<CUgraph> bodies;         // an IF conditional's body graphs (then, else)
  std::shared_ptr<ConditionalValue> condition;
  CUdeviceptr memory = 0;              // a memory allocation node's, freed with its graph
};

struct CUgraph_st {
  CUctx_st* ctx = nullptr;
  unsigned long long capture_id = 0;
  std::vector<std::unique_ptr<SimNode>> nodes;  // each after the nodes it depends on
  CUgraphNode last_captured = nullptr;          // what the next captured node depends on
};

struct CUgraphExec_st {
  std::vector<CUgraphNode> nodes;               // the graph's top-level nodes, in order
  std::vector<CUgraphNodeType> types;           // of nodes
  std::shared_ptr<const WorkList> work;         // nodes[i]'s work (empty: nothing to run)
  std::vector<bool> enabled;
};

namespace {

std::mutex g_graphs_mu;  // guards the tables below and every graph's nodes
std::map<CUgraph, std::shared_ptr<CUgraph_st>> g_graphs;
std::map<CUgraphExec, std::unique_ptr<CUgraphExec_st>> g_execs;
std::map<CUgraphNode, SimNode*> g_nodes;  // every live node of every graph
std::map<CUgraphConditionalHandle, std::shared_ptr<ConditionalValue>> g_conditions;
unsigned long long g_next_capture_id = 0;            // REQUIRES g_graphs_mu
CUgraphConditionalHandle g_next_condition = 0;       // REQUIRES g_graphs_mu
thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

CUgraphNode Handle(SimNode* n) { return reinterpret_cast<CUgraphNode>(n); }

std::shared_ptr<CUgraph_st> FindGraphLocked(CUgraph h) {
  auto it = g_graphs.find(h);
  return it == g_graphs.end() ? nullptr : it->second;
}

SimNode* FindNodeLocked(CUgraphNode h) {
  auto it = g_nodes.find(h);
  return it == g_nodes.end() ? nullptr : it->second;
}

// Appends node to graph after checking that its dependencies are nodes of graph.
// REQUIRES g_graphs_mu.
CUresult AddNodeLocked(CUgraph h, const CUgraphNode* deps, size_t num_deps, std::unique_ptr<SimNode> node,
                       CUgraphNode* out) {
  if (out == nullptr || (num_deps > 0 && deps == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<CUgraph_st> graph = FindGraphLocked(h);
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < num_deps; ++i) {
    SimNode* dep = FindNodeLocked(deps[i]);
    if (dep == nullptr || dep->owner != graph.get()) return CUDA_ERROR_INVALID_VALUE;
  }
  node->owner = graph.get();
  node->deps.assign(deps, deps + num_deps);
  *out = Handle(node.get());
  g_nodes[*out] = node.get();
  graph->nodes.push_back(std::move(node));
  return CUDA_SUCCESS;
}

// Forgets graph h and what it owns: its nodes and its conditionals' bodies; adds the memory its
// allocation nodes hold to *to_free, for the caller to free once it no longer holds g_graphs_mu
// (freeing takes the driver's locks, which a capture holds while it takes g_graphs_mu).
// REQUIRES g_graphs_mu.
void DestroyGraphLocked(CUgraph h, std::vector<CUdeviceptr>* to_free) {
  auto it = g_graphs.find(h);
  if (it == g_graphs.end()) return;
  std::shared_ptr<CUgraph_st> graph = std::move(it->second);
  g_graphs.erase(it);
  for (const auto& node : graph->nodes) {
    g_nodes.erase(Handle(node.get()));
    if (node->memory != 0) to_free->push_back(node->memory);
    if (node->child != nullptr) DestroyGraphLocked(node->child, to_free);
    for (CUgraph body : node->bodies) DestroyGraphLocked(body, to_free);
  }
  for (auto c = g_conditions.begin(); c != g_conditions.end();) {
    c = c->second->graph == graph.get() ? g_conditions.erase(c) : std::next(c);
  }
}

// A copy of graph h (a child graph node's: the driver clones the child). REQUIRES g_graphs_mu.
CUresult CloneGraphLocked(CUgraph h, CUgraph* out) {
  std::shared_ptr<CUgraph_st> from = FindGraphLocked(h);
  if (from == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto copy = std::make_shared<CUgraph_st>();
  copy->ctx = from->ctx;
  std::map<CUgraphNode, CUgraphNode> renamed;
  for (const auto& node : from->nodes) {
    auto n = std::make_unique<SimNode>(*node);
    n->owner = copy.get();
    n->memory = 0;  // the original's to free
    for (CUgraphNode& d : n->deps) d = renamed[d];
    if (node->child != nullptr && CloneGraphLocked(node->child, &n->child) != CUDA_SUCCESS) n->child = nullptr;
    for (CUgraph& body : n->bodies) {
      if (CloneGraphLocked(body, &body) != CUDA_SUCCESS) body = nullptr;
    }
    renamed[Handle(node.get())] = Handle(n.get());
    g_nodes[Handle(n.get())] = n.get();
    copy->nodes.push_back(std::move(n));
  }
  *out = reinterpret_cast<CUgraph>(copy.get());
  g_graphs[*out] = std::move(copy);
  return CUDA_SUCCESS;
}

WorkList GraphWorkLocked(const CUgraph_st& graph);

// What node runs when its graph is launched, fixed now. REQUIRES g_graphs_mu.
Work NodeWorkLocked(const SimNode& node) {
  if (node.child != nullptr) {
    std::shared_ptr<CUgraph_st> child = FindGraphLocked(node.child);
    if (child == nullptr) return nullptr;
    auto list = std::make_shared<const WorkList>(GraphWorkLocked(*child));
    return [list] {
      for (const Work& w : *list) w();
    };
  }
  if (node.condition != nullptr) {
    std::vector<std::shared_ptr<const WorkList>> bodies;
    for (CUgraph b : node.bodies) {
      std::shared_ptr<CUgraph_st> body = FindGraphLocked(b);
      bodies.push_back(std::make_shared<const WorkList>(body != nullptr ? GraphWorkLocked(*body) : WorkList{}));
    }
    const unsigned value = node.condition->Value();
    // IF runs bodies[0] when the value is not 0, bodies[1] (when there is one) when it is.
    const size_t pick = value != 0 ? 0 : 1;
    if (pick >= bodies.size()) return nullptr;
    std::shared_ptr<const WorkList> list = bodies[pick];
    return [list] {
      for (const Work& w : *list) w();
    };
  }
  return node.work;
}

WorkList GraphWorkLocked(const CUgraph_st& graph) {
  WorkList list;
  for (const auto& node : graph.nodes) {
    if (Work w = NodeWorkLocked(*node)) list.push_back(std::move(w));
  }
  return list;
}

// ---- Capture.

CUresult BeginCapture(CUstream h, CUstreamCaptureMode mode, bool pt, CUgraph into, const CUgraphNode* deps,
                      size_t num_deps) {
  REQUIRE_INIT(d);
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (num_deps > 0 && deps == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  if (s->kind == StreamKind::kLegacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  std::shared_ptr<CUgraph_st> graph;
  {
    std::lock_guard<std::mutex> g(g_graphs_mu);
    if (into != nullptr) {
      graph = FindGraphLocked(into);
      if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
      // The sim records one chain: the captured work follows the last dependency named.
      for (size_t i = 0; i < num_deps; ++i) {
        SimNode* dep = FindNodeLocked(deps[i]);
        if (dep == nullptr || dep->owner != graph.get()) return CUDA_ERROR_INVALID_VALUE;
      }
      graph->last_captured = num_deps > 0 ? deps[num_deps - 1] : nullptr;
    } else {
      graph = std::make_shared<CUgraph_st>();
      graph->ctx = s->ctx;
    }
    graph->capture_id = ++g_next_capture_id;
  }
  std::lock_guard<std::mutex> g(s->ctx->m);
  if (s->capture) return CUDA_ERROR_ILLEGAL_STATE;
  s->capture = std::move(graph);
  return CUDA_SUCCESS;
}

CUresult EndCapture(CUstream h, CUgraph* out, bool pt) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  std::shared_ptr<CUgraph_st> graph;
  {
    std::lock_guard<std::mutex> g(s->ctx->m);
    if (!s->capture) return CUDA_ERROR_ILLEGAL_STATE;
    graph = std::move(s->capture);
    s->capture.reset();
  }
  std::lock_guard<std::mutex> g(g_graphs_mu);
  *out = reinterpret_cast<CUgraph>(graph.get());
  g_graphs[*out] = std::move(graph);  // a graph captured into was there already
  return CUDA_SUCCESS;
}

CUresult CaptureInfo(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                     const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* num_deps, bool pt) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> g(s->ctx->m);
  *status = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  if (!s->capture) return CUDA_SUCCESS;
  if (id != nullptr) *id = s->capture->capture_id;
  if (graph != nullptr) *graph = reinterpret_cast<CUgraph>(s->capture.get());
  if (deps != nullptr) *deps = nullptr;  // the sim reports no dependency edges
  if (edges != nullptr) *edges = nullptr;
  if (num_deps != nullptr) *num_deps = 0;
  return CUDA_SUCCESS;
}

// ---- Instantiation and launches.

CUresult Instantiate(CUgraphExec* out, CUgraph h) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_graphs_mu);
  std::shared_ptr<CUgraph_st> graph = FindGraphLocked(h);
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto exec = std::make_unique<CUgraphExec_st>();
  WorkList work;
  for (const auto& node : graph->nodes) {
    exec->nodes.push_back(Handle(node.get()));
    exec->types.push_back(node->type);
    work.push_back(NodeWorkLocked(*node));
  }
  exec->work = std::make_shared<const WorkList>(std::move(work));
  exec->enabled.assign(exec->nodes.size(), true);
  *out = reinterpret_cast<CUgraphExec>(exec.get());
  g_execs[*out] = std::move(exec);
  return CUDA_SUCCESS;
}

CUresult GraphLaunch(CUgraphExec h, CUstream stream, bool pt) {
  REQUIRE_INIT(d);
  auto run = std::make_shared<WorkList>();
  {
    std::lock_guard<std::mutex> g(g_graphs_mu);
    auto it = g_execs.find(h);
    if (it == g_execs.end()) return CUDA_ERROR_INVALID_VALUE;
    const CUgraphExec_st& exec = *it->second;
    for (size_t i = 0; i < exec.nodes.size(); ++i) {
      if (exec.enabled[i] && (*exec.work)[i]) run->push_back((*exec.work)[i]);
    }
  }
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(stream, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  ApiGate gate;
  Enqueue(s, [run] {
    for (const Work& w : *run) w();
  });
  return CUDA_SUCCESS;
}

CUresult GraphUpload(CUgraphExec h, CUstream stream, bool pt) {
  REQUIRE_INIT(d);
  {
    std::lock_guard<std::mutex> g(g_graphs_mu);
    if (g_execs.count(h) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  std::shared_ptr<CUstream_st> s;
  return ResolveStream(stream, pt, &s);
}

// Replaces the work of node in exec (the cuGraphExec*SetParams calls): a launch already
// enqueued keeps the work it was given. REQUIRES g_graphs_mu.
CUresult SetExecWorkLocked(CUgraphExec h, CUgraphNode node, CUgraphNodeType type, Work work) {
  auto it = g_execs.find(h);
  if (it == g_execs.end()) return CUDA_ERROR_INVALID_VALUE;
  CUgraphExec_st& exec = *it->second;
  SimNode* n = FindNodeLocked(node);
  if (n == nullptr || n->type != type) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < exec.nodes.size(); ++i) {
    if (exec.nodes[i] != node) continue;
    auto copy = std::make_shared<WorkList>(*exec.work);
    (*copy)[i] = std::move(work);
    exec.work = std::move(copy);
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;  // not a node of the graph exec was made from
}

// ---- Node work.

CUresult KernelNodeWork(const CUDA_KERNEL_NODE_PARAMS* p, Work* work) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* ctx = p->ctx != nullptr ? p->ctx : CurrentContext();
  if (ctx == nullptr || !ContextLive(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  // A node names its kernel by function or by library kernel (the sim's are the same objects).
  CUfunction f = p->func != nullptr ? p->func : reinterpret_cast<CUfunction>(p->kern);
  const unsigned dims[7] = {p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX, p->blockDimY, p->blockDimZ,
                            p->sharedMemBytes};
  const CUresult r = CheckLaunch(f, dims);
  if (r != CUDA_SUCCESS) return r;
  return MakeKernelWork(ctx, f, p->kernelParams, p->extra, 0, 0, work);
}

CUresult MemsetNodeWork(const CUDA_MEMSET_NODE_PARAMS* p, Work* work) {
  if (p == nullptr || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) || p->width == 0 ||
      p->height == 0 || (p->height > 1 && p->pitch < p->width * p->elementSize)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const size_t row = p->width * p->elementSize;
  const size_t extent = (p->height - 1) * p->pitch + row;
  if (!DeviceRangeValid(p->dst, extent)) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_MEMSET_NODE_PARAMS m = *p;
  *work = [m] {
    for (size_t y = 0; y < m.height; ++y) {
      auto* at = reinterpret_cast<uint8_t*>(m.dst + y * m.pitch);
      for (size_t x = 0; x < m.width; ++x) std::memcpy(at + x * m.elementSize, &m.value, m.elementSize);
    }
  };
  return CUDA_SUCCESS;
}

// One side of a copy node: its address and whether it is device memory the sim knows.
CUresult CopySide(CUmemorytype type, CUdeviceptr device, const void* host, size_t pitch, size_t height,
                  size_t x, size_t y, size_t z, const CUDA_MEMCPY3D& p, uintptr_t* base) {
  const size_t row_pitch = pitch != 0 ? pitch : p.WidthInBytes;
  const size_t slice = row_pitch * (height != 0 ? height : p.Height);
  const uintptr_t start = (type == CU_MEMORYTYPE_HOST ? reinterpret_cast<uintptr_t>(host) : device) + x +
                          y * row_pitch + z * slice;
  if (type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED) {
    const size_t extent = (p.Depth - 1) * slice + (p.Height - 1) * row_pitch + p.WidthInBytes;
    if (!DeviceRangeValid(start, extent)) return CUDA_ERROR_INVALID_VALUE;
  } else if (type != CU_MEMORYTYPE_HOST) {
    return CUDA_ERROR_NOT_SUPPORTED;  // arrays: the sim has none
  }
  *base = start;
  return CUDA_SUCCESS;
}

CUresult MemcpyNodeWork(const CUDA_MEMCPY3D* p, Work* work) {
  if (p == nullptr || p->WidthInBytes == 0 || p->Height == 0 || p->Depth == 0) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_MEMCPY3D c = *p;
  uintptr_t src = 0, dst = 0;
  CUresult r = CopySide(c.srcMemoryType, c.srcDevice, c.srcHost, c.srcPitch, c.srcHeight, c.srcXInBytes, c.srcY,
                        c.srcZ, c, &src);
  if (r == CUDA_SUCCESS) {
    r = CopySide(c.dstMemoryType, c.dstDevice, c.dstHost, c.dstPitch, c.dstHeight, c.dstXInBytes, c.dstY, c.dstZ,
                 c, &dst);
  }
  if (r != CUDA_SUCCESS) return r;
  const size_t src_pitch = c.srcPitch != 0 ? c.srcPitch : c.WidthInBytes;
  const size_t dst_pitch = c.dstPitch != 0 ? c.dstPitch : c.WidthInBytes;
  const size_t src_slice = src_pitch * (c.srcHeight != 0 ? c.srcHeight : c.Height);
  const size_t dst_slice = dst_pitch * (c.dstHeight != 0 ? c.dstHeight : c.Height);
  *work = [c, src, dst, src_pitch, dst_pitch, src_slice, dst_slice] {
    for (size_t z = 0; z < c.Depth; ++z) {
      for (size_t y = 0; y < c.Height; ++y) {
        std::memmove(reinterpret_cast<void*>(dst + z * dst_slice + y * dst_pitch),
                     reinterpret_cast<const void*>(src + z * src_slice + y * src_pitch), c.WidthInBytes);
      }
    }
  };
  return CUDA_SUCCESS;
}

// A node of the given type and work, added to graph h.
CUresult AddWorkNode(CUgraphNode* out, CUgraph h, const CUgraphNode* deps, size_t num_deps, CUgraphNodeType type,
                     Work work) {
  auto node = std::make_unique<SimNode>();
  node->type = type;
  node->work = std::move(work);
  std::lock_guard<std::mutex> g(g_graphs_mu);
  return AddNodeLocked(h, deps, num_deps, std::move(node), out);
}

CUresult AddChildNode(CUgraphNode* out, CUgraph h, const CUgraphNode* deps, size_t num_deps, CUgraph child) {
  std::lock_guard<std::mutex> g(g_graphs_mu);
  if (FindGraphLocked(h) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto node = std::make_unique<SimNode>();
  node->type = CU_GRAPH_NODE_TYPE_GRAPH;
  CUresult r = CloneGraphLocked(child, &node->child);
  if (r != CUDA_SUCCESS) return r;
  const CUgraph copy = node->child;
  r = AddNodeLocked(h, deps, num_deps, std::move(node), out);
  std::vector<CUdeviceptr> none;  // a copy holds no allocation node's memory (CloneGraphLocked)
  if (r != CUDA_SUCCESS) DestroyGraphLocked(copy, &none);
  return r;
}

// An IF conditional of size bodies (1: then; 2: then and else), whose body graphs it creates.
CUresult AddConditionalNode(CUgraphNode* out, CUgraph h, const CUgraphNode* deps, size_t num_deps,
                            CUDA_CONDITIONAL_NODE_PARAMS* p) {
  if (p->type != CU_GRAPH_COND_TYPE_IF) return CUDA_ERROR_NOT_SUPPORTED;  // see the top of this file
  if (p->size != 1 && p->size != 2) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> g(g_graphs_mu);
  std::shared_ptr<CUgraph_st> graph = FindGraphLocked(h);
  auto c = g_conditions.find(p->handle);
  if (graph == nullptr || c == g_conditions.end() || c->second->graph != graph.get()) return CUDA_ERROR_INVALID_VALUE;
  auto node = std::make_unique<SimNode>();
  node->type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  node->condition = c->second;
  for (unsigned i = 0; i < p->size; ++i) {
    auto body = std::make_shared<CUgraph_st>();
    body->ctx = graph->ctx;
    const CUgraph b = reinterpret_cast<CUgraph>(body.get());
    g_graphs[b] = std::move(body);
    node->bodies.push_back(b);
  }
  // A refused node is gone when AddNodeLocked returns: its bodies are forgotten by the copy.
  const std::vector<CUgraph> bodies = node->bodies;
  const CUresult r = AddNodeLocked(h, deps, num_deps, std::move(node), out);
  if (r != CUDA_SUCCESS) {
    for (CUgraph b : bodies) g_graphs.erase(b);
    return r;
  }
  p->phGraph_out = FindNodeLocked(*out)->bodies.data();  // valid while the node lives, as the driver's
  return CUDA_SUCCESS;
}

CUresult AddNode(CUgraphNode* out, CUgraph h, const CUgraphNode* deps, size_t num_deps, CUgraphNodeParams* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  Work work;
  CUresult r = CUDA_SUCCESS;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return AddWorkNode(out, h, deps, num_deps, p->type, nullptr);
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const CUDA_KERNEL_NODE_PARAMS k{.func = p->kernel.func, .gridDimX = p->kernel.gridDimX,
                                      .gridDimY = p->kernel.gridDimY, .gridDimZ = p->kernel.gridDimZ,
                                      .blockDimX = p->kernel.blockDimX, .blockDimY = p->kernel.blockDimY,
                                      .blockDimZ = p->kernel.blockDimZ, .sharedMemBytes = p->kernel.sharedMemBytes,
                                      .kernelParams = p->kernel.kernelParams, .extra = p->kernel.extra,
                                      .kern = p->kernel.kern, .ctx = p->kernel.ctx};
      r = KernelNodeWork(&k, &work);
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS m{.dst = p->memset.dst, .pitch = p->memset.pitch, .value = p->memset.value,
                                      .elementSize = p->memset.elementSize, .width = p->memset.width,
                                      .height = p->memset.height};
      r = MemsetNodeWork(&m, &work);
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      r = MemcpyNodeWork(&p->memcpy.copyParams, &work);
      break;
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return AddChildNode(out, h, deps, num_deps, p->graph.graph);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      return AddConditionalNode(out, h, deps, num_deps, &p->conditional);
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (r != CUDA_SUCCESS) return r;
  return AddWorkNode(out, h, deps, num_deps, p->type, std::move(work));
}

}  // namespace

namespace gslice::sim {

void CaptureOp(CUgraph_st* graph, std::function<void()> run) {
  auto node = std::make_unique<SimNode>();
  node->owner = graph;
  node->type = CU_GRAPH_NODE_TYPE_KERNEL;  // the sim does not tell captured kinds apart
  node->work = std::move(run);
  std::lock_guard<std::mutex> g(g_graphs_mu);  // after the stream's ctx->m, as everywhere
  if (graph->last_captured != nullptr) node->deps.push_back(graph->last_captured);
  graph->last_captured = Handle(node.get());
  g_nodes[Handle(node.get())] = node.get();
  graph->nodes.push_back(std::move(node));
}

}  // namespace gslice::sim

STREAM_ENTRY(cuStreamBeginCapture_v2, _ptsz, (CUstream h, CUstreamCaptureMode mode),
             [&](bool pt) { return BeginCapture(h, mode, pt, nullptr, nullptr, 0); })
STREAM_ENTRY(cuStreamBeginCaptureToGraph, _ptsz,
             (CUstream h, CUgraph graph, const CUgraphNode* deps, const CUgraphEdgeData* edges, size_t num_deps,
              CUstreamCaptureMode mode),
             [&](bool pt) {
               (void)edges;  // default edges only: the sim has no edge types
               if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
               return BeginCapture(h, mode, pt, graph, deps, num_deps);
             })
STREAM_ENTRY(cuStreamEndCapture, _ptsz, (CUstream h, CUgraph* graph), [&](bool pt) { return EndCapture(h, graph, pt); })
STREAM_ENTRY(cuStreamGetCaptureInfo_v2, _ptsz,
             (CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph, const CUgraphNode** deps,
              size_t* num_deps),
             [&](bool pt) { return CaptureInfo(h, status, id, graph, deps, nullptr, num_deps, pt); })
STREAM_ENTRY(cuStreamGetCaptureInfo_v3, _ptsz,
             (CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph, const CUgraphNode** deps,
              const CUgraphEdgeData** edges, size_t* num_deps),
             [&](bool pt) { return CaptureInfo(h, status, id, graph, deps, edges, num_deps, pt); })
STREAM_ENTRY(cuGraphLaunch, _ptsz, (CUgraphExec exec, CUstream h), [&](bool pt) { return GraphLaunch(exec, h, pt); })
STREAM_ENTRY(cuGraphUpload, _ptsz, (CUgraphExec exec, CUstream h), [&](bool pt) { return GraphUpload(exec, h, pt); })

GSLICE_SIM_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, t_capture_mode);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuGraphCreate(CUgraph* out, unsigned int flags) {
  if (out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  REQUIRE_CONTEXT(ctx);
  auto graph = std::make_shared<CUgraph_st>();
  graph->ctx = ctx;
  std::lock_guard<std::mutex> g(g_graphs_mu);
  *out = reinterpret_cast<CUgraph>(graph.get());
  g_graphs[*out] = std::move(graph);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph graph, unsigned long long flags) {
  (void)flags;  // upload, auto-free, priority: nothing to do in the sim
  return Instantiate(out, graph);
}

GSLICE_SIM_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec* out, CUgraph graph,
                                                        CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult r = Instantiate(out, graph);
  params->hErrNode_out = nullptr;
  params->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return r;
}

GSLICE_SIM_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* out, CUgraph graph,
                                                             CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return cuGraphInstantiateWithParams(out, graph, params);
}

GSLICE_SIM_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) {
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_graphs_mu);
  return g_execs.erase(exec) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

GSLICE_SIM_EXPORT CUresult cuGraphDestroy(CUgraph graph) {
  REQUIRE_INIT(d);
  std::vector<CUdeviceptr> to_free;
  {
    std::lock_guard<std::mutex> g(g_graphs_mu);
    if (FindGraphLocked(graph) == nullptr) return CUDA_ERROR_INVALID_VALUE;
    DestroyGraphLocked(graph, &to_free);
  }
  for (CUdeviceptr p : to_free) cuMemFree(p);
  return CUDA_SUCCESS;
}

// Lists graph's nodes (or its root nodes, those that depend on none), in the graph's order.
static CUresult ListNodes(CUgraph graph, CUgraphNode* nodes, size_t* num, bool roots_only) {
  if (num == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_graphs_mu);
  std::shared_ptr<CUgraph_st> found = FindGraphLocked(graph);
  if (found == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> listed;
  for (const auto& n : found->nodes) {
    if (!roots_only || n->deps.empty()) listed.push_back(Handle(n.get()));
  }
  if (nodes != nullptr) {
    for (size_t i = 0; i < *num; ++i) nodes[i] = i < listed.size() ? listed[i] : nullptr;
    if (*num > listed.size()) *num = listed.size();
  } else {
    *num = listed.size();
  }
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* num) {
  return ListNodes(graph, nodes, num, false);
}

GSLICE_SIM_EXPORT CUresult cuGraphGetRootNodes(CUgraph graph, CUgraphNode* nodes, size_t* num) {
  return ListNodes(graph, nodes, num, true);
}

GSLICE_SIM_EXPORT CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  if (type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_graphs_mu);
  SimNode* n = FindNodeLocked(node);
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *type = n->type;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuGraphNodeGetDependencies_v2(CUgraphNode node, CUgraphNode* deps, CUgraphEdgeData* edges,
                                                         size_t* num) {
  if (num == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_graphs_mu);
  SimNode* n = FindNodeLocked(node);
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (deps == nullptr) {
    *num = n->deps.size();
    return CUDA_SUCCESS;
  }
  for (size_t i = 0; i < *num; ++i) {
    deps[i] = i < n->deps.size() ? n->deps[i] : nullptr;
    if (edges != nullptr) edges[i] = CUgraphEdgeData{};
  }
  if (*num > n->deps.size()) *num = n->deps.size();
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuGraphAddDependencies_v2(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to,
                                                     const CUgraphEdgeData* edges, size_t num);

// The forms without edge data (cuda.h names the newer ones cuGraphNodeGetDependencies and
// cuGraphAddDependencies).
#undef cuGraphNodeGetDependencies
#undef cuGraphAddDependencies
GSLICE_SIM_EXPORT CUresult cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode* deps, size_t* num) {
  return cuGraphNodeGetDependencies_v2(node, deps, nullptr, num);
}

GSLICE_SIM_EXPORT CUresult cuGraphAddDependencies(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to,
                                                  size_t num) {
  return cuGraphAddDependencies_v2(graph, from, to, nullptr, num);
}

GSLICE_SIM_EXPORT CUresult cuGraphAddDependencies_v2(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to,
                                                     const CUgraphEdgeData* edges, size_t num) {
  (void)edges;  // default edges only
  if (num > 0 && (from == nullptr || to == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_graphs_mu);
  std::shared_ptr<CUgraph_st> found = FindGraphLocked(graph);
  if (found == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto position = [&](CUgraphNode h) {
    for (size_t i = 0; i < found->nodes.size(); ++i)
      if (Handle(found->nodes[i].get()) == h) return i;
    return found->nodes.size();
  };
  for (size_t i = 0; i < num; ++i) {
    const size_t a = position(from[i]), b = position(to[i]);
    if (a == found->nodes.size() || b == found->nodes.size() || a == b) return CUDA_ERROR_INVALID_VALUE;
    if (a > b) return CUDA_ERROR_NOT_SUPPORTED;  // against the order the sim runs (see the top)
  }
  for (size_t i = 0; i < num; ++i) found->nodes[position(to[i])]->deps.push_back(from[i]);
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t num) {
  REQUIRE_INIT(d);
  return AddWorkNode(out, graph, deps, num, CU_GRAPH_NODE_TYPE_EMPTY, nullptr);
}

// Makes a node's work (make: its params checked and turned into Work) and adds the node.
template <typename Make>
CUresult AddMadeNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t num, CUgraphNodeType type,
                     Make make) {
  Work work;
  const CUresult r = make(&work);
  if (r != CUDA_SUCCESS) return r;
  return AddWorkNode(out, graph, deps, num, type, std::move(work));
}

GSLICE_SIM_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps,
                                                   size_t num, const CUDA_KERNEL_NODE_PARAMS* params) {
  REQUIRE_INIT(d);
  return AddMadeNode(out, graph, deps, num, CU_GRAPH_NODE_TYPE_KERNEL, [params](Work* w) { return KernelNodeWork(params, w); });
}

GSLICE_SIM_EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t num,
                                                const CUDA_MEMSET_NODE_PARAMS* params, CUcontext ctx) {
  (void)ctx;
  REQUIRE_INIT(d);
  return AddMadeNode(out, graph, deps, num, CU_GRAPH_NODE_TYPE_MEMSET, [params](Work* w) { return MemsetNodeWork(params, w); });
}

GSLICE_SIM_EXPORT CUresult cuGraphAddMemcpyNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t num,
                                                const CUDA_MEMCPY3D* params, CUcontext ctx) {
  (void)ctx;
  REQUIRE_INIT(d);
  return AddMadeNode(out, graph, deps, num, CU_GRAPH_NODE_TYPE_MEMCPY, [params](Work* w) { return MemcpyNodeWork(params, w); });
}

GSLICE_SIM_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps,
                                                    size_t num, CUgraph child) {
  REQUIRE_INIT(d);
  return AddChildNode(out, graph, deps, num, child);
}

// The sim reserves an allocation node's memory when the node is added, for the graph's life (the
// driver reserves it when the graph runs, at the address given now).
GSLICE_SIM_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps,
                                                  size_t num, CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  if (out == nullptr || params == nullptr || params->bytesize == 0 ||
      params->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  REQUIRE_INIT(d);
  auto node = std::make_unique<SimNode>();
  node->type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  CUresult r = cuMemAlloc(&node->memory, params->bytesize);
  if (r != CUDA_SUCCESS) return r;
  const CUdeviceptr memory = node->memory;
  {
    std::lock_guard<std::mutex> g(g_graphs_mu);
    r = AddNodeLocked(graph, deps, num, std::move(node), out);
  }
  if (r != CUDA_SUCCESS) {
    cuMemFree(memory);
    return r;
  }
  params->dptr = memory;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_graphs_mu);
  SimNode* n = FindNodeLocked(node);
  if (n == nullptr || n->type != CU_GRAPH_NODE_TYPE_GRAPH) return CUDA_ERROR_INVALID_VALUE;
  *out = n->child;
  return CUDA_SUCCESS;
}

GSLICE_SIM_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps,
                                             const CUgraphEdgeData* edges, size_t num, CUgraphNodeParams* params) {
  (void)edges;  // default edges only
  return AddNode(out, graph, deps, num, params);
}

// The CUDA 12.2 form, without edge data (cuda.h names the newer one cuGraphAddNode).
#undef cuGraphAddNode
GSLICE_SIM_EXPORT CUresult cuGraphAddNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t num,
                                          CUgraphNodeParams* params) {
  return AddNode(out, graph, deps, num, params);
}

GSLICE_SIM_EXPORT CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle* out, CUgraph graph, CUcontext ctx,
                                                          unsigned int default_value, unsigned int flags) {
  (void)ctx;
  if (out == nullptr || (flags & ~CU_GRAPH_COND_ASSIGN_DEFAULT) != 0) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_graphs_mu);
  std::shared_ptr<CUgraph_st> found = FindGraphLocked(graph);
  if (found == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto value = std::make_shared<ConditionalValue>();
  value->graph = found.get();
  value->default_value = default_value;
  value->flags = flags;
  *out = ++g_next_condition;
  g_conditions[*out] = std::move(value);
  return CUDA_SUCCESS;
}

// Makes a node's new work (make: its params checked and turned into Work) and sets it in exec.
template <typename Make>
CUresult SetExecWork(CUgraphExec exec, CUgraphNode node, CUgraphNodeType type, Make make) {
  Work work;
  const CUresult r = make(&work);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> g(g_graphs_mu);
  return SetExecWorkLocked(exec, node, type, std::move(work));
}

GSLICE_SIM_EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                             const CUDA_KERNEL_NODE_PARAMS* params) {
  REQUIRE_INIT(d);
  return SetExecWork(exec, node, CU_GRAPH_NODE_TYPE_KERNEL, [params](Work* w) { return KernelNodeWork(params, w); });
}

GSLICE_SIM_EXPORT CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                          const CUDA_MEMSET_NODE_PARAMS* params, CUcontext ctx) {
  (void)ctx;
  REQUIRE_INIT(d);
  return SetExecWork(exec, node, CU_GRAPH_NODE_TYPE_MEMSET, [params](Work* w) { return MemsetNodeWork(params, w); });
}

GSLICE_SIM_EXPORT CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                          const CUDA_MEMCPY3D* params, CUcontext ctx) {
  (void)ctx;
  REQUIRE_INIT(d);
  return SetExecWork(exec, node, CU_GRAPH_NODE_TYPE_MEMCPY, [params](Work* w) { return MemcpyNodeWork(params, w); });
}

GSLICE_SIM_EXPORT CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraph child) {
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_graphs_mu);
  std::shared_ptr<CUgraph_st> found = FindGraphLocked(child);
  if (found == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto list = std::make_shared<const WorkList>(GraphWorkLocked(*found));
  return SetExecWorkLocked(exec, node, CU_GRAPH_NODE_TYPE_GRAPH, [list] {
    for (const Work& w : *list) w();
  });
}

// Takes graph's nodes' work into exec when graph has exec's nodes' kinds in exec's order (the
// sim's nodes are in the order they were added, so the same building steps give the same order).
GSLICE_SIM_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  if (info == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_graphs_mu);
  auto it = g_execs.find(exec);
  std::shared_ptr<CUgraph_st> found = FindGraphLocked(graph);
  if (it == g_execs.end() || found == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUgraphExec_st& e = *it->second;
  *info = CUgraphExecUpdateResultInfo{};
  if (found->nodes.size() != e.nodes.size()) {
    info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  WorkList work;
  for (size_t i = 0; i < e.nodes.size(); ++i) {
    const SimNode& node = *found->nodes[i];
    if (node.type != e.types[i]) {
      info->result = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
      info->errorNode = Handle(found->nodes[i].get());
      info->errorFromNode = e.nodes[i];
      return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
    work.push_back(NodeWorkLocked(node));
  }
  e.work = std::make_shared<const WorkList>(std::move(work));
  info->result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}

// Attributes of a kernel node (priority, access policy): the sim runs nodes without them.
GSLICE_SIM_EXPORT CUresult cuGraphKernelNodeSetAttribute(CUgraphNode node, CUkernelNodeAttrID attr,
                                                         const CUkernelNodeAttrValue* value) {
  (void)attr;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_graphs_mu);
  SimNode* n = FindNodeLocked(node);
  return n != nullptr && n->type == CU_GRAPH_NODE_TYPE_KERNEL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

GSLICE_SIM_EXPORT CUresult cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int enabled) {
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_graphs_mu);
  auto it = g_execs.find(exec);
  if (it == g_execs.end()) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < it->second->nodes.size(); ++i) {
    if (it->second->nodes[i] != node) continue;
    it->second->enabled[i] = enabled != 0;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

GSLICE_SIM_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device) {
  REQUIRE_INIT(d);
  REQUIRE_DEVICE(d, device);
  return CUDA_SUCCESS;  // the sim has no graph memory pool
}
