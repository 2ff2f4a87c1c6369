// The worker's side of cuStreamGetCaptureInfo (encoding: remote/client/capture_calls.cc): the
// driver's dependency arrays are sent by value.
#include <cuda.h>

#include "dispatch.h"
#include "sizes.h"

namespace gslice::remote {
namespace {

CUresult ServeCaptureInfo(uint32_t op, bool v3, Reader& r, Writer& w) {
  CUstream stream{};
  uint8_t want = 0;
  if (!r.Get(&stream) || !r.Get(&want) || (want & ~kWantAll) != 0 || (!v3 && (want & kWantEdges) != 0) ||
      !r.AtEnd()) {
    return kMalformed;
  }
  if (g_driver[op] == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph graph = nullptr;
  const CUgraphNode* deps = nullptr;
  const CUgraphEdgeData* edges = nullptr;
  size_t count = 0;
  // The count is needed to send the arrays, whether or not the caller asked for it.
  size_t* count_arg = (want & (kWantCount | kWantDependencies | kWantEdges)) != 0 ? &count : nullptr;
  CUresult res;
  if (v3) {
    using Fn = CUresult (*)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*, const CUgraphNode**,
                            const CUgraphEdgeData**, size_t*);
    res = reinterpret_cast<Fn>(g_driver[op])(stream, &status, (want & kWantId) ? &id : nullptr,
                                            (want & kWantGraph) ? &graph : nullptr,
                                            (want & kWantDependencies) ? &deps : nullptr,
                                            (want & kWantEdges) ? &edges : nullptr, count_arg);
  } else {
    using Fn = CUresult (*)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*, const CUgraphNode**, size_t*);
    res = reinterpret_cast<Fn>(g_driver[op])(stream, &status, (want & kWantId) ? &id : nullptr,
                                            (want & kWantGraph) ? &graph : nullptr,
                                            (want & kWantDependencies) ? &deps : nullptr, count_arg);
  }
  if (res != CUDA_SUCCESS) return res;
  if (count > kMaxCaptureDependencies || ((want & kWantDependencies) && count > 0 && deps == nullptr)) {
    return CUDA_ERROR_NOT_SUPPORTED;  // more than one answer carries, or no array to send
  }
  w.Put<int32_t>(status);
  w.Put<uint64_t>(id);
  w.Put<uint64_t>(reinterpret_cast<uintptr_t>(graph));
  w.Put<uint64_t>(count);
  if ((want & kWantDependencies) && count > 0) w.PutBytes(deps, count * sizeof(CUgraphNode));
  if (want & kWantEdges) {
    w.Put<uint8_t>(edges != nullptr && count > 0);
    if (edges != nullptr && count > 0) w.PutBytes(edges, count * sizeof(CUgraphEdgeData));
  }
  return res;
}

}  // namespace

CUresult Serve_cuStreamGetCaptureInfo_v2(Reader& r, Writer& w) {
  return ServeCaptureInfo(kOp_cuStreamGetCaptureInfo_v2, false, r, w);
}
CUresult Serve_cuStreamGetCaptureInfo_v2_ptsz(Reader& r, Writer& w) {
  return ServeCaptureInfo(kOp_cuStreamGetCaptureInfo_v2_ptsz, false, r, w);
}
CUresult Serve_cuStreamGetCaptureInfo_v3(Reader& r, Writer& w) {
  return ServeCaptureInfo(kOp_cuStreamGetCaptureInfo_v3, true, r, w);
}
CUresult Serve_cuStreamGetCaptureInfo_v3_ptsz(Reader& r, Writer& w) {
  return ServeCaptureInfo(kOp_cuStreamGetCaptureInfo_v3_ptsz, true, r, w);
}

}  // namespace gslice::remote
