// Deferred copies (wire.h: kOpDeferredData): a copy into memory the worker cannot reach (the
// client's pageable memory) is answered with its bytes in a frame of their own, ahead of the
// answer that says the copy is done. The call registers where they go before its request
// leaves; the connection's reader (transport.cc) writes them there when they come.
//
// Thread-safe (a lock of its own, last in the transport's lock order). Never freed: frames may
// come during exit.
#pragma once

#include <cstdint>
#include <vector>

namespace gslice::remote {

// Registers where the bytes of a deferred copy go and returns the token its request carries.
uint64_t ExpectDeferred(void* p, uint64_t bytes);

// Writes a kOpDeferredData frame's bytes where its token says, once. False for a token this
// process did not give out, or bytes of another length (the server broke the protocol).
bool ApplyDeferred(const std::vector<uint8_t>& frame);

}  // namespace gslice::remote
