// Events made ahead and events known to the client (event_pool.cc): frameworks make and destroy
// events around their work (PyTorch's ResNet-50 step in fp32, six of each), and each would be a
// round trip. Thread-safe (a lock of its own, taken with no other held).
#pragma once

#include <cuda.h>

namespace gslice::remote {

// calls.def: before= of cuEventCreate. Answers from the events made ahead for the current
// context and flags, making a batch of them in one round trip when there are none (true, with
// *result and *event set); false for what the worker must answer itself (no current context,
// flags other than blocking sync and timing, a null pointer).
bool RemoteEventFromPool(CUresult* result, CUevent* event, unsigned int flags);
// calls.def: after= of cuEventCreate (the worker made it): the event is the program's.
void RemoteAfterEventCreate(CUevent* event, unsigned int flags);
// calls.def: before= of cuEventDestroy_v2, which answers every destroy here (always true with
// *result set): an event this client gave out and did not see destroyed is destroyed without
// waiting (its context lives: see ReleaseEventsAhead), any other as a round trip with the
// driver's result.
bool RemoteDestroyEvent(CUresult* result, CUevent event);
// Before a context may go (destroyed, released, reset): destroys the events made ahead (not
// waited for; their contexts still live) and forgets which events the program holds.
void ReleaseEventsAhead();

}  // namespace gslice::remote
