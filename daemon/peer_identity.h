// Who is at the other end of an API connection, as the kernel says, never as a request
// says: the unix socket's peer credentials, or the holder of the TCP listener's token.
#pragma once

#include <cstdint>

#include "registry.h"

namespace gslice {

// The caller on the connected unix socket `fd`: SO_PEERCRED's uid, gid and pid at connect
// time; the name from the passwd database ("uid-N" when it has none usable in names);
// admin when uid 0, or when the peer's primary or supplementary groups include
// `admin_gid` (-1: none). Nobody in particular (Caller{}) when the kernel does not say.
Caller UnixPeerCaller(int fd, int64_t admin_gid);

// A TCP caller with the token: an admin without a kernel identity.
Caller TokenCaller();

}  // namespace gslice
