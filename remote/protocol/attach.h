// Attach on use: which calls a client answers before it holds a slice.
//
// A client connects lazily. Until its first call that needs a GPU it talks to a probe
// (kOpProbe, wire.h): a process on the server that has loaded the driver but holds no
// context, no memory and no slice, and answers only the calls below. Everything else makes
// the client attach: the server starts its worker in a slice and the client replays its
// cuInit there. A program that only initialises the driver and asks what the devices are
// (cudart's start, torch.cuda.is_available(), device properties, nvidia-smi's NVML queries)
// therefore never holds GPU memory; one that never calls the driver never connects at all.
#pragma once

#include <cstdint>

#include "calls.h"

namespace gslice::remote {

// cuInit, cuGetProcAddress_v2 (the server's driver names the symbol; nothing is created),
// every `cached` call of calls.def (the driver version, device count, names, UUIDs, bus ids,
// attributes, total memory - the slice's, as the worker's shim would report it) and every
// `noslice` call of nvml_calls.def (NVML's reads: memory as the slice's with nothing used yet,
// no processes).
inline bool AnswersWithoutSlice(uint32_t op) {
  return op < kOpCount && (kOpCached[op] || kOpNoSlice[op] || op == kOp_cuInit || op == kOp_cuGetProcAddress_v2);
}

}  // namespace gslice::remote
