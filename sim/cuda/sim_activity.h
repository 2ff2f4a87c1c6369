// The sim driver's report of simulated GPU activity, the one interface between the simulated
// libcuda.so.1 and the sim's libcupti.so (sim/cupti): the sim's CUPTI subscribes through
// gsliceSimSubscribeKernelActivity, exported by the sim driver, and turns each report into a
// CUPTI kernel activity record, so the shim's recorder reads real timing data from the sim.
#pragma once

#include <stdint.h>

extern "C" {

// The simulated GPU activity of kernels, for the sim's CUPTI (sim/cupti): each kernel that ran
// is reported once it ended, with its device start and end on CLOCK_MONOTONIC.
struct GsliceSimKernelActivity {
  const char* name;       // the kernel's name (valid during the call)
  uint64_t start_ns;      // MonotonicNs when it started on the device
  uint64_t end_ns;        // ... and when it ended
  uint32_t device;        // the device ordinal in this process
  uint32_t context_id;    // the context's serial
  uint32_t stream_id;     // the stream's id
  uint32_t correlation_id;
};

// Exported by the sim driver. sink receives every kernel that ends from then on, on the
// stream's worker thread; nullptr unsubscribes.
typedef void (*GsliceSimKernelSink)(const GsliceSimKernelActivity*);
void gsliceSimSubscribeKernelActivity(GsliceSimKernelSink sink);

}  // extern "C"
