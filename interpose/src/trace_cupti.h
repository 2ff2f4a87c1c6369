// GPU activity for the timeline recorder (trace_recorder.h) through NVIDIA's CUPTI activity
// API: kernels, copies and memsets with the GPU's start and end, on the recorder's clock.
// libcupti.so is loaded at run time (dlopen), never linked: the shim stays libc-only, and
// without CUPTI a timeline has host events only and says why in its otherData.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gslice::trace::cupti {

// Loads CUPTI (once) and enables kernel, memcpy and memset activity; idempotent. note receives
// a JSON string literal saying what GPU activity the part holds ("cupti <path>" or why none).
// Never fails the caller.
void Start(const char* real_driver_path, char* note, size_t note_size);
// Delivers what CUPTI has buffered to the recorder (records of work not yet done come later).
void Flush();
// Disables the activity kinds (after a gsliced request ended): no cost until the next Start.
void Stop();

}  // namespace gslice::trace::cupti
