// Stream capture and CUDA graphs, as far as one stream goes: while a stream captures, the work
// enqueued on it (launches, copies, memsets, host functions) is recorded in order instead of
// run; an instantiated graph replays that list on the stream it is launched on, as one piece of
// work. Enough for programs that capture a stream and replay it (PyTorch's CUDA graphs on one
// stream); the sim has no dependency edges, no cross-stream capture (cuStreamWaitEvent on a
// capturing stream is not recorded) and no graph editing (not even cuGraphCreate: a graph
// comes from a capture).
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

struct CUgraph_st {
  CUctx_st* ctx = nullptr;
  unsigned long long capture_id = 0;
  std::vector<std::function<void()>> ops;  // in stream order
};

struct CUgraphExec_st {
  std::shared_ptr<const std::vector<std::function<void()>>> ops;
};

namespace gslice::sim {

void CaptureOp(CUgraph_st* graph, std::function<void()> run) { graph->ops.push_back(std::move(run)); }

}  // namespace gslice::sim

namespace {

std::mutex g_graphs_mu;  // guards the two tables: handles are checked against them
std::map<CUgraph, std::shared_ptr<CUgraph_st>> g_graphs;
std::map<CUgraphExec, std::unique_ptr<CUgraphExec_st>> g_execs;
unsigned long long g_next_capture_id = 0;  // REQUIRES g_graphs_mu
thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

CUresult BeginCapture(CUstream h, CUstreamCaptureMode mode, bool pt) {
  REQUIRE_INIT(d);
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(h, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  if (s->kind == StreamKind::kLegacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  auto graph = std::make_shared<CUgraph_st>();
  graph->ctx = s->ctx;
  {
    std::lock_guard<std::mutex> g(g_graphs_mu);
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
  g_graphs[*out] = std::move(graph);
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
  if (deps != nullptr) *deps = nullptr;  // no dependency edges in the sim
  if (edges != nullptr) *edges = nullptr;
  if (num_deps != nullptr) *num_deps = 0;
  return CUDA_SUCCESS;
}

std::shared_ptr<CUgraph_st> FindGraphLocked(CUgraph h) {
  auto it = g_graphs.find(h);
  return it == g_graphs.end() ? nullptr : it->second;
}

CUresult Instantiate(CUgraphExec* out, CUgraph h) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_graphs_mu);
  std::shared_ptr<CUgraph_st> graph = FindGraphLocked(h);
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto exec = std::make_unique<CUgraphExec_st>();
  exec->ops = std::make_shared<const std::vector<std::function<void()>>>(graph->ops);
  *out = reinterpret_cast<CUgraphExec>(exec.get());
  g_execs[*out] = std::move(exec);
  return CUDA_SUCCESS;
}

CUresult GraphLaunch(CUgraphExec h, CUstream stream, bool pt) {
  REQUIRE_INIT(d);
  std::shared_ptr<const std::vector<std::function<void()>>> ops;
  {
    std::lock_guard<std::mutex> g(g_graphs_mu);
    auto it = g_execs.find(h);
    if (it == g_execs.end()) return CUDA_ERROR_INVALID_VALUE;
    ops = it->second->ops;
  }
  std::shared_ptr<CUstream_st> s;
  CUresult r = ResolveStream(stream, pt, &s);
  if (r != CUDA_SUCCESS) return r;
  ApiGate gate;
  Enqueue(s, [ops] {
    for (const auto& op : *ops) op();
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

}  // namespace

STREAM_ENTRY(cuStreamBeginCapture_v2, _ptsz, (CUstream h, CUstreamCaptureMode mode),
             [&](bool pt) { return BeginCapture(h, mode, pt); })
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
  std::lock_guard<std::mutex> g(g_graphs_mu);
  return g_graphs.erase(graph) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// Nodes are the graph's recorded operations, in order; their handles mean nothing else here.
GSLICE_SIM_EXPORT CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* num) {
  if (num == nullptr) return CUDA_ERROR_INVALID_VALUE;
  REQUIRE_INIT(d);
  std::lock_guard<std::mutex> g(g_graphs_mu);
  std::shared_ptr<CUgraph_st> found = FindGraphLocked(graph);
  if (found == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const size_t count = found->ops.size();
  if (nodes != nullptr) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(found.get());
    for (size_t i = 0; i < *num; ++i) nodes[i] = i < count ? reinterpret_cast<CUgraphNode>(base + 16 * (i + 1)) : nullptr;
    if (*num > count) *num = count;
  } else {
    *num = count;
  }
  return CUDA_SUCCESS;
}
