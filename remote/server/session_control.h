// What a session process asks its listener, and the answers (docs/remote.md, "Fair limits").
//
// Each session has one end of a SOCK_SEQPACKET pair made by the listener at accept (close-on-exec:
// its worker never holds it); the listener polls the other. The session asks and waits for the
// answer; the listener answers at once, from its own count, never blocking on a session:
//
//   tenant NAME DIGEST-HEX UID GID   a tls:// client's token named this tenant: count the
//                                    session as the tenant's from now on (and end it if the
//                                    tenant is revoked)
//   worker                           may this session start its worker?
//
// The answer is one message: kYes, or kNo followed by the reason a person can act on. The
// listener's end closing (it is gone) is a no.
//
// A session trusts its listener; the listener trusts the session only until it is confined
// (privilege.h): it asks `tenant` before Confine, and `worker` is only ever counted against the
// key the listener already holds for it.
#pragma once

#include <string>

#include "tenants.h"

namespace gslice::remote {

// The largest message either side sends.
inline constexpr size_t kMaxControlMessage = 512;

inline const char kYes[] = "+";
inline const char kNo[] = "-";

// Sends request and waits for the answer. True when let in; false with the reason otherwise.
bool AskListener(int control, const std::string& request, std::string* refusal);

// Requests, as the session writes them.
std::string TenantRequest(const Tenant& t);
inline const char kWorkerRequest[] = "worker";

// A `tenant` request back into a Tenant (name, digest, uid, gid); false when malformed.
bool ParseTenantRequest(const std::string& request, Tenant* t);

}  // namespace gslice::remote
