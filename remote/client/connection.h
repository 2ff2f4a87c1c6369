// The forwarding client's side of a call: one connection per process to gslice-remoted
// (GSLICE_REMOTE; tls:// with the token of GSLICE_REMOTE_TOKEN_FILE), made at the first call
// that needs a GPU (before it, device queries go to a probe connection that holds no slice:
// attach.h), shared by the process's threads, and the per-thread context stack whose top each
// request carries. Each thread's requests carry its lane, which the worker serves on a thread
// of its own: a thread waiting in a synchronisation holds up no other thread's calls. Runs
// inside applications: libc only, no exceptions, never raises a signal.
//
// The parts, each with its own header:
//   call.h            a forwarded call and the answers the client keeps
//   context_stack.h   the calling thread's context stack
//   transport.h       the connection: send queue, flusher, lanes, the reader of answers
//   worker_attach.h   the probe, attaching to a worker, the move to shared memory
//   handshake.h       connecting and the hello
//   deferred_copies.h where the bytes of a deferred copy go
//   refusals.h        what the client does not forward
//   call_stats.h      what the process's calls cost
//
// Failures become CUresults with one log line: no server configured or reachable, or the
// handshake refused -> CUDA_ERROR_NO_DEVICE; the connection lost or a reply that breaks the
// protocol -> CUDA_ERROR_DEVICE_UNAVAILABLE, for this and every later call of every thread
// (never retried silently: the worker and everything it held are gone).
#pragma once

#include <cuda.h>

namespace gslice::remote {

inline constexpr CUresult kNoServerResult = CUDA_ERROR_NO_DEVICE;
inline constexpr CUresult kLostResult = CUDA_ERROR_DEVICE_UNAVAILABLE;

}  // namespace gslice::remote
