// The forwarding libcuda.so.1's connection, lent to the forwarding libnvidia-ml.so.1 of the same
// folder: NVML calls travel on the process's one connection, so they reach the worker - and the
// slice - that its CUDA calls use. These two functions are the only exports of the client that
// are not driver symbols; the NVML client finds them with dlsym (remote/client/nvml_forwarding.cc).
#include <stdlib.h>
#include <string.h>

#include "call.h"

using namespace gslice::remote;

// One round trip of request op. request is the whole payload (its first 8 bytes, the context,
// are replaced with the calling thread's). Returns 1 when the server answered: *result is the
// call's result and *reply (malloc'd, the caller frees it; NULL when empty) holds the
// *reply_len bytes that followed it. Returns 0 when it did not: *result is the connection's
// failure (CUDA_ERROR_NO_DEVICE: no server; CUDA_ERROR_DEVICE_UNAVAILABLE: lost).
extern "C" __attribute__((visibility("default"))) int gslice_remote_exchange(uint32_t op, const void* request,
                                                                             size_t request_len, int32_t* result,
                                                                             void** reply, size_t* reply_len) {
  *reply = nullptr;
  *reply_len = 0;
  if (op >= kOpCount || kOpKinds[op] != CallKind::kForward || request_len < sizeof(uint64_t)) {
    *result = CUDA_ERROR_INVALID_VALUE;
    return 0;
  }
  Call call(op);
  std::vector<uint8_t>& buffer = call.request().buffer();
  buffer.insert(buffer.end(), static_cast<const uint8_t*>(request) + sizeof(uint64_t),
                static_cast<const uint8_t*>(request) + request_len);
  *result = call.Run();
  if (!call.answered()) return 0;
  Reader& r = call.reply();
  const size_t left = r.left();
  const uint8_t* data = nullptr;
  if (left > 0 && r.GetBytes(left, &data)) {
    *reply = malloc(left);
    if (*reply == nullptr) {
      *result = CUDA_ERROR_OUT_OF_MEMORY;
      return 1;
    }
    memcpy(*reply, data, left);
    *reply_len = left;
  }
  return 1;
}

// The answer to request op broke the protocol: the connection is dropped, as for driver calls.
extern "C" __attribute__((visibility("default"))) void gslice_remote_malformed(uint32_t op) {
  if (op < kOpCount) Call(op).Malformed();
}
