// cuStreamGetCaptureInfo through the client. The driver hands out pointers to the capture's
// dependency arrays, which live on the worker: the worker sends their contents, and the client
// keeps a copy per thread, valid until this thread's next cuStreamGetCaptureInfo (the driver's
// arrays change with the capture anyway).
//
// Request: u64 stream, u8 which outputs the caller wants (kWant*). Reply after the result:
// i32 status, u64 id, u64 graph, u64 count; when the dependencies were asked for, count node
// handles; when the edge data was asked for, u8 present and (if 1) count CUgraphEdgeData.
#include <cuda.h>

#include <vector>

#include "call.h"
#include "client_calls.h"
#include "refusals.h"
#include "seen_state.h"
#include "sizes.h"

namespace gslice::remote {
namespace {

thread_local std::vector<CUgraphNode> t_dependencies;
thread_local std::vector<CUgraphEdgeData> t_edges;

CUresult CaptureInfo(uint32_t op, CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                     const CUgraphNode** dependencies, const CUgraphEdgeData** edges, size_t* count) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const uint8_t want = static_cast<uint8_t>((id != nullptr ? kWantId : 0) | (graph != nullptr ? kWantGraph : 0) |
                                            (dependencies != nullptr ? kWantDependencies : 0) |
                                            (edges != nullptr ? kWantEdges : 0) | (count != nullptr ? kWantCount : 0));
  if (StreamKnownNotCapturing(stream)) {
    // No capture under way (remote/client/seen_state.cc): what the worker would send back.
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (id != nullptr) *id = 0;
    if (graph != nullptr) *graph = nullptr;
    if (count != nullptr) *count = 0;
    if (dependencies != nullptr) *dependencies = nullptr;
    if (edges != nullptr) *edges = nullptr;
    return CUDA_SUCCESS;
  }
  Call call(op);
  call.request().Put(stream);
  call.request().Put(want);
  const CUresult res = call.Run();
  if (res != CUDA_SUCCESS) return res;
  Reader& r = call.reply();
  int32_t got_status = 0;
  uint64_t got_id = 0, got_graph = 0, got_count = 0;
  if (!r.Get(&got_status) || !r.Get(&got_id) || !r.Get(&got_graph) || !r.Get(&got_count) ||
      got_count > kMaxCaptureDependencies) {
    return call.Malformed();
  }
  if (dependencies != nullptr) {
    t_dependencies.resize(got_count);
    if (got_count > 0 && !r.GetInto(t_dependencies.data(), got_count * sizeof(CUgraphNode))) return call.Malformed();
  }
  uint8_t edges_present = 0;
  if (edges != nullptr) {
    if (!r.GetFlag(&edges_present)) return call.Malformed();
    t_edges.resize(edges_present ? got_count : 0);
    if (edges_present && got_count > 0 && !r.GetInto(t_edges.data(), got_count * sizeof(CUgraphEdgeData))) {
      return call.Malformed();
    }
  }
  if (!r.AtEnd()) return call.Malformed();
  *status = static_cast<CUstreamCaptureStatus>(got_status);
  if (id != nullptr) *id = got_id;
  if (graph != nullptr) *graph = reinterpret_cast<CUgraph>(static_cast<uintptr_t>(got_graph));
  if (count != nullptr) *count = got_count;
  if (dependencies != nullptr) *dependencies = got_count > 0 ? t_dependencies.data() : nullptr;
  if (edges != nullptr) *edges = edges_present && got_count > 0 ? t_edges.data() : nullptr;
  return res;
}

}  // namespace
}  // namespace gslice::remote

using namespace gslice::remote;

extern "C" CUresult gslice_remote_call_cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus* status,
                                                               cuuint64_t* id, CUgraph* graph,
                                                               const CUgraphNode** deps, size_t* count) {
  return CaptureInfo(kOp_cuStreamGetCaptureInfo_v2, hStream, status, id, graph, deps, nullptr, count);
}

extern "C" CUresult gslice_remote_call_cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus* status,
                                                                    cuuint64_t* id, CUgraph* graph,
                                                                    const CUgraphNode** deps, size_t* count) {
  return CaptureInfo(kOp_cuStreamGetCaptureInfo_v2_ptsz, hStream, status, id, graph, deps, nullptr, count);
}

extern "C" CUresult gslice_remote_call_cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus* status,
                                                               cuuint64_t* id, CUgraph* graph,
                                                               const CUgraphNode** deps,
                                                               const CUgraphEdgeData** edges, size_t* count) {
  return CaptureInfo(kOp_cuStreamGetCaptureInfo_v3, hStream, status, id, graph, deps, edges, count);
}

extern "C" CUresult gslice_remote_call_cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus* status,
                                                                    cuuint64_t* id, CUgraph* graph,
                                                                    const CUgraphNode** deps,
                                                                    const CUgraphEdgeData** edges, size_t* count) {
  return CaptureInfo(kOp_cuStreamGetCaptureInfo_v3_ptsz, hStream, status, id, graph, deps, edges, count);
}
