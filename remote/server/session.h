// One client's session process (docs/remote.md): forked by the listener for each connection.
//
// In order, every step within the handshake deadline (SIGALRM ends the session):
//   1. who the client is: over tls://, the TLS handshake and the token, whose tenant the
//      listener must still know (session_control.h); on a unix socket or loopback TCP, the
//      client's own uid from the kernel (peer_uid.h);
//   2. the session confines itself to that identity (privilege.h): from here on it, its probe
//      and its worker run as the client's uid, never the server's;
//   3. the client's hello: a probe (device queries, answered here, attach.h), or a worker, which
//      the listener must let in (the tenant's worker limit), started as
//      `gslice run --memory ... -- gslice-remoted --worker-fd N`, so that it runs in a slice
//      like a local program and reaches gsliced as the client's uid.
// A refusal at any step reaches the client as a refused hello with the reason, and the server's
// log says why; nothing of the client runs before step 2.
#pragma once

#include <string>
#include <vector>

#include "tenants.h"
#include "tls.h"

namespace gslice::remote {

struct SessionSetup {
  bool sim = false;
  TlsServer* tls = nullptr;               // a tls:// listener's: TLS and a token first
  const TenantTable* tenants = nullptr;   // with tls: who each token is
  TenantRules rules;                      // which local uids may have a worker
  int control = -1;                       // this session's end of its control pair
  std::vector<std::string> hidden;        // files the client's processes must not see
  std::string placeholder;                // what covers them (privilege.h)
  bool syscall_filter = true;             // --syscall-filter (privilege.h, step 4)
  std::string syscall_log;                // --syscall-log
  int handshake_timeout_s = 10;
};

// Serves the client on fd; returns the session's exit status.
int Session(int fd, const SessionSetup& setup);

}  // namespace gslice::remote
