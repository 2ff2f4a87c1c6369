// Attach on use (attach.h): until the process's first call that needs a GPU, device queries go
// to a probe, a connection of its own that holds no slice; that first call attaches: it
// connects the worker's connection (handshake.h), moves it to shared-memory rings on the same
// host (shm_ring.h), replays the cuInit the probe accepted and closes the probe. A forked
// child attaches anew (its parent's connection and probe stay the parent's).
//
// Lock order: g_probe_mu (here), then the transport's (transport.h). The probe's round trips
// are one at a time under g_probe_mu; attaching holds all three, so no thread sends, reads or
// asks the probe meanwhile, and the probe and the worker's connection are never both open
// once attached.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "transport.h"
#include "wire.h"

namespace gslice::remote {

// Attaches (connects, sets up and replays) unless this process already holds its worker.
// Returns CUDA_SUCCESS, or the connection's failure.
CUresult Attach();
inline CUresult EnsureAttached() { return HoldsWorker() ? CUDA_SUCCESS : Attach(); }

// What a probe round trip came to.
enum class ProbeAsked { kAnswered, kAttached, kFailed };

// Asks the probe (connecting it first) when the process holds no worker yet; kAttached when
// it does (the caller sends on the worker's connection instead). kAnswered: *reply holds the
// answer (the result, then the outputs). On kFailed, *result holds the connection's failure.
ProbeAsked AskProbe(uint32_t op, const Writer& request, std::vector<uint8_t>* reply, CUresult* result);

}  // namespace gslice::remote
