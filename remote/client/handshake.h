// Connecting to GSLICE_REMOTE (tcp://, unix:// or tls:// with the token of
// GSLICE_REMOTE_TOKEN_FILE) and the handshake that opens a connection: the worker's (kOpHello,
// the server starts a worker in a slice) or the probe's (kOpProbe: device queries only,
// attach.h). Holds no state: the caller owns the channel it returns (worker_attach.cc).
#pragma once

#include <cstdint>
#include <string>

#include "socket_io.h"

namespace gslice::remote {

// How long the server may take to start a worker (it runs `gslice run`, which loads the
// driver) before the handshake counts as failed; also the limit on setting up shared memory.
inline constexpr int kHelloTimeoutMs = 30000;

// Connects and says hello with op (kOpHello or kOpProbe). A tls:// server gets the TLS
// handshake and then the token as the first frame, for either. True with *out open,
// *worker_pid the server's worker (or probe) and *shown the address as a person writes it.
// False, with *why, when there is no server or it refused (the caller fails with
// kNoServerResult); nothing is left open then.
bool Handshake(uint32_t op, Channel* out, uint32_t* worker_pid, std::string* shown, std::string* why);

// Closes a connection that is no longer used (its TLS session first) and empties *c.
void CloseChannel(Channel* c);

}  // namespace gslice::remote
