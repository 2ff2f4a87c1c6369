// The wire format of a kernel launch (calls.def: custom cuLaunchKernel, cuLaunchKernelEx and
// their _ptsz forms) and of the cluster occupancy queries (cuOccupancyMaxActiveClusters,
// cuOccupancyMaxPotentialClusterSize), after the request prefix. The client writes it
// (remote/client/local_calls.cc), the worker reads it (remote/server/dispatch.cc); this is
// the one definition of both.
//
//   configuration  u64 f, 7 x u32 (grid x, y, z, block x, y, z, shared memory bytes),
//                  u64 stream, u32 attribute count (at most kMaxLaunchAttributes; 0 for
//                  cuLaunchKernel) and the CUlaunchAttributes as they are
//   parameters     (launches only) u8 which: bit 0 kernelParams, bit 1 extra; then
//                  kernelParams: u32 count (at most kMaxKernelParams), u32 size + bytes each;
//                  extra: u64 size + the bytes of its parameter buffer
//
// A cluster query carries the configuration alone and is answered with an i32. Reading
// defends against a hostile client: every count and size is checked against its limit before
// use, and what is read points into the request (nothing is copied).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "wire.h"

namespace gslice::remote {

inline constexpr uint32_t kMaxLaunchAttributes = 64;
inline constexpr uint32_t kMaxKernelParams = 4096;
inline constexpr uint64_t kMaxParamBytes = 32768;  // the driver's limit on a kernel's parameters

// A launch's configuration, as cuLaunchKernelEx's CUlaunchConfig holds it.
struct LaunchConfig {
  CUfunction f{};
  unsigned dims[7] = {};  // grid x, y, z, block x, y, z, shared memory bytes
  CUstream stream{};
  uint32_t num_attrs = 0;
  const CUlaunchAttribute* attrs = nullptr;  // num_attrs of them
};

// REQUIRES: c.num_attrs <= kMaxLaunchAttributes, c.attrs non-null when c.num_attrs > 0.
// Inlined: it is on every launch's path, as the writes it replaces were.
[[gnu::always_inline]] inline void EncodeLaunchConfig(const LaunchConfig& c, Writer* w) {
  w->Put(c.f);
  for (unsigned d : c.dims) w->Put(d);
  w->Put(c.stream);
  w->Put<uint32_t>(c.num_attrs);
  if (c.num_attrs > 0) w->PutBytes(c.attrs, c.num_attrs * sizeof(CUlaunchAttribute));
}

// False when the request is short or names too many attributes. *attrs holds the attributes
// (c->attrs points into it; nullptr when there are none).
inline bool DecodeLaunchConfig(Reader* r, LaunchConfig* c, std::vector<CUlaunchAttribute>* attrs) {
  if (!r->Get(&c->f)) return false;
  for (unsigned& d : c->dims)
    if (!r->Get(&d)) return false;
  if (!r->Get(&c->stream) || !r->Get(&c->num_attrs) || c->num_attrs > kMaxLaunchAttributes) return false;
  attrs->assign(c->num_attrs, CUlaunchAttribute{});
  if (c->num_attrs > 0 && !r->GetInto(attrs->data(), c->num_attrs * sizeof(CUlaunchAttribute))) return false;
  c->attrs = c->num_attrs > 0 ? attrs->data() : nullptr;
  return true;
}

// cuLaunchKernelEx's configuration of a decoded one.
inline CUlaunchConfig ToDriverConfig(const LaunchConfig& c) {
  return CUlaunchConfig{.gridDimX = c.dims[0], .gridDimY = c.dims[1], .gridDimZ = c.dims[2], .blockDimX = c.dims[3],
                        .blockDimY = c.dims[4], .blockDimZ = c.dims[5], .sharedMemBytes = c.dims[6],
                        .hStream = c.stream, .attrs = const_cast<CUlaunchAttribute*>(c.attrs),
                        .numAttrs = c.num_attrs};
}

inline constexpr uint8_t kLaunchKernelParams = 1;
inline constexpr uint8_t kLaunchExtra = 2;

// A launch's parameters: kernelParams (params[i] of sizes[i] bytes, count of them), or extra's
// parameter buffer (extra_bytes bytes). False when one of kernelParams is NULL (what was written
// is not to be sent). REQUIRES: count <= kMaxKernelParams, every size and extra_bytes at most
// kMaxParamBytes.
[[gnu::always_inline]] inline bool EncodeLaunchParams(void* const* params, const uint32_t* sizes, uint32_t count,
                                                     const void* extra, uint64_t extra_bytes, Writer* w) {
  w->Put<uint8_t>(static_cast<uint8_t>((params != nullptr ? kLaunchKernelParams : 0) |
                                       (extra != nullptr ? kLaunchExtra : 0)));
  if (params != nullptr) {
    w->Put<uint32_t>(count);
    for (uint32_t i = 0; i < count; ++i) {
      if (params[i] == nullptr) return false;
      w->Put<uint32_t>(sizes[i]);
      w->PutBytes(params[i], sizes[i]);
    }
  }
  if (extra != nullptr) {
    w->Put<uint64_t>(extra_bytes);
    w->PutBytes(extra, extra_bytes);
  }
  return true;
}

// The parameters as read: each points into the request.
struct LaunchParams {
  uint8_t which = 0;  // kLaunchKernelParams | kLaunchExtra
  std::vector<std::pair<const uint8_t*, uint32_t>> params;
  const uint8_t* extra = nullptr;
  uint64_t extra_bytes = 0;
};

// False when the request is short, which names another part, or a count or size is over its
// limit.
inline bool DecodeLaunchParams(Reader* r, LaunchParams* p) {
  if (!r->Get(&p->which) || p->which > (kLaunchKernelParams | kLaunchExtra)) return false;
  if (p->which & kLaunchKernelParams) {
    uint32_t count = 0;
    if (!r->Get(&count) || count > kMaxKernelParams) return false;
    p->params.resize(count);
    for (auto& [data, size] : p->params) {
      if (!r->Get(&size) || size > kMaxParamBytes || !r->GetBytes(size, &data)) return false;
    }
  }
  if (p->which & kLaunchExtra) {
    if (!r->Get(&p->extra_bytes) || p->extra_bytes > kMaxParamBytes || !r->GetBytes(p->extra_bytes, &p->extra)) {
      return false;
    }
  }
  return true;
}

}  // namespace gslice::remote
