// Who is at the other end of an API connection, as the kernel says, never as a request
// says: the unix socket's peer credentials, the uid owning a loopback TCP peer's socket, or
// the holder of the TCP listener's token.
#pragma once

#include <cstdint>
#include <optional>

#include "registry.h"

namespace gslice {

// The caller on the connected unix socket `fd`: SO_PEERCRED's uid, gid and pid at connect
// time; the name from the passwd database ("uid-N" when it has none usable in names);
// admin when uid 0, or when the peer's primary or supplementary groups include
// `admin_gid` (-1: none). Nobody in particular (Caller{}) when the kernel does not say.
Caller UnixPeerCaller(int fd, int64_t admin_gid);

// The uid owning the socket at the other end of the TCP connection `fd`, when that end is
// on this machine (a loopback address: 127.0.0.0/8, ::1, or either as IPv4-mapped IPv6),
// from the kernel's socket table (NETLINK_SOCK_DIAG, the socket's owner as `ss -e` shows
// it). Nothing for a peer elsewhere, or when the kernel does not say (the peer is gone).
// It names a client for connection limits only; on TCP only the token grants anything.
std::optional<int64_t> LoopbackPeerUid(int fd);

// A TCP caller with the token: an admin without a kernel identity.
Caller TokenCaller();

}  // namespace gslice
