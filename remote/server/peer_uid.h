// Which local user a client connection belongs to, from the kernel, never from the client:
// a unix socket's peer credentials (SO_PEERCRED: the uid and gid the client had when it
// connected), or for a loopback TCP connection the uid that owns the client's socket in the
// kernel's socket table (/proc/net/tcp and tcp6: the entry whose local address is this
// connection's peer and whose remote address is this connection's local one).
#pragma once

#include <sys/types.h>

#include <string>

namespace gslice::remote {

struct PeerUser {
  uid_t uid = 0;
  gid_t gid = 0;  // the user's primary group where the uid has a name, else the peer's gid (unix) or uid
  pid_t pid = 0;  // unix sockets only (0 otherwise)
};

// Who connected, for the log: "ADDR:PORT", "[ADDR6]:PORT", or "a unix socket".
std::string PeerName(int fd);

// fd: an accepted unix or loopback TCP connection. False, with the reason, when the kernel does
// not say (a TCP peer on another machine, a socket that closed).
bool LocalPeer(int fd, PeerUser* out, std::string* error);

}  // namespace gslice::remote
