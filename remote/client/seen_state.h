// What the client has seen its own program do (seen_state.cc): streams it made, captures
// under way, function attributes it knows the value of and attribute sets the driver accepted;
// answered, or sent without waiting, without a round trip.
// Thread-safe (a lock of its own, taken with no other held).
#pragma once

#include <cuda.h>

namespace gslice::remote {

// Contexts' devices, as the client saw the contexts made: a device's primary context retained,
// a context created on a device. cuCtxGetDevice (before= of both forms) is answered from them
// without a lock (frameworks ask it around every launch: 8,600 times a ResNet-50 step), else
// false (a context the client did not see made: the kept answers or the worker answer).
void RememberContextDevice(CUcontext ctx, CUdevice dev, bool primary);
// The context is destroyed: its handle may name another context, on another device, later.
void ForgetContextDevice(CUcontext ctx);
// Device dev's primary context is released or reset (it may be destroyed with it).
void ForgetPrimaryContextDevice(CUdevice dev);
bool RemoteAnswerContextDevice(CUresult* result, CUdevice* device);
bool RemoteAnswerContextDeviceOf(CUresult* result, CUdevice* device, CUcontext ctx);

void RememberStream(CUstream stream);
void ForgetStream(CUstream stream);
void RememberCapture(CUstream stream);
void ForgetCapture(CUstream stream);
// A stream this client made, while no capture is under way in the process.
bool StreamKnownNotCapturing(CUstream stream);

// cuStreamIsCapturing of a known stream while no capture is under way: NONE, on the client
// (true with *result and *status set).
bool RemoteAnswerNotCapturing(CUresult* result, CUstream stream, CUstreamCaptureStatus* status);
// A kernel's or function's attribute set (calls.def: before= of cuKernelSetAttribute and
// cuFuncSetAttribute, which answer every set here: always true with *result set). To the value
// the client knows it has: nothing to do. One the driver is known to accept (seen_state.cc):
// sent without waiting, its error (should the driver give one) reported by the thread's next
// synchronisation. Any other: one round trip, the driver's result returned.
bool RemoteSetKernelAttribute(CUresult* result, CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev);
bool RemoteSetFuncAttribute(CUresult* result, CUfunction hfunc, CUfunction_attribute attrib, int value);
// Forgets which sets the driver accepts: handles may be gone, or reused for other functions
// (a module or library loaded or unloaded, a context destroyed, released or reset).
void ForgetAcceptedSets();

}  // namespace gslice::remote
