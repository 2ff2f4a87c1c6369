// The private integrity table's answer (export_tables.cc, d4082055 slot 1): HMAC-MD2
// (RFC 1319, RFC 2104) under the driver's fixed key of what the driver binds: the driver
// version, the request's version and time, the process and thread, the addresses of the cudart
// and integrity tables and of the integrity function, and every device's UUID and PCI location
// (asked of the server through the client's own calls, whose answers it caches).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace gslice::remote {

// The addresses the hash binds, fixed for the life of the process.
struct IntegrityTables {
  const void* cudart_table;
  const void* integrity_table;
  const void* integrity_function;
};

// At most this many devices are hashed (the first ones).
inline constexpr int kMaxHashedDevices = 64;

// The hash for a request of `version` at `unix_seconds`, into result. A call that fails on the
// way returns its result (result untouched); NULL result: CUDA_ERROR_INVALID_VALUE.
CUresult IntegrityHash(uint32_t version, uint64_t unix_seconds, const IntegrityTables& tables, uint64_t result[2]);

}  // namespace gslice::remote
