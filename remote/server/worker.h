// A client's worker process (gslice-remoted --worker-fd): serves one connection.
#pragma once

namespace gslice::remote {

// Loads libcuda.so.1, answers the handshake (already read by the session that started this
// process) and serves calls on fd until the client closes it. Returns the exit status:
// 0 when the client went away, 1 when the driver could not be loaded, 3 when the client broke
// the protocol. Never 2 or 127: those mean `gslice run` refused the slice (server.cc).
int RunWorker(int fd);

}  // namespace gslice::remote
