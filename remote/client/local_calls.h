// The client's hand-written calls of calls.def (local_calls.cc): what the rest of the client
// tells them.
#pragma once

namespace gslice::remote {

// The kernel-parameter layouts cached per function are dropped when modules come and go
// (a new function may reuse a freed handle).
void ForgetKernelLayouts();

}  // namespace gslice::remote
