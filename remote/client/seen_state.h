// What the client has seen its own program do (seen_state.cc): streams it made, captures
// under way, and function attributes it knows the value of; answered without a round trip.
// Thread-safe (a lock of its own, taken with no other held).
#pragma once

#include <cuda.h>

namespace gslice::remote {

void RememberStream(CUstream stream);
void ForgetStream(CUstream stream);
void RememberCapture(CUstream stream);
void ForgetCapture(CUstream stream);
// A stream this client made, while no capture is under way in the process.
bool StreamKnownNotCapturing(CUstream stream);

// cuStreamIsCapturing of a known stream while no capture is under way: NONE, on the client
// (true with *result and *status set).
bool RemoteAnswerNotCapturing(CUresult* result, CUstream stream, CUstreamCaptureStatus* status);
// Setting a function attribute to the value the client knows it has: nothing to do (true with
// *result set).
bool RemoteSkipKernelAttributeAsSet(CUresult* result, CUfunction_attribute attrib, int val, CUkernel kernel,
                                    CUdevice dev);
bool RemoteSkipFuncAttributeAsSet(CUresult* result, CUfunction hfunc, CUfunction_attribute attrib, int value);

}  // namespace gslice::remote
