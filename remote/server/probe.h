// A client's probe (wire.h: kOpProbe): answers the calls a client makes before it holds a
// slice (attach.h: AnswersWithoutSlice) from the driver, in the session process, with no
// worker, no context and no slice. Device memory is reported as the worker's shim would: the
// slice's memory where that is less than the device's; NVML reads (nvml_calls.def: noslice)
// come from the node's NVML, with memory as the slice's (none used yet: there is no worker)
// and no processes.
#pragma once

#include <string>

#include "socket_io.h"

namespace gslice::remote {

struct ProbeOptions {
  std::string driver;  // the driver library to load ("libcuda.so.1", or the simulated one)
  std::string nvml;    // the NVML library ("libnvidia-ml.so.1", or the simulated one); if it
                       // cannot be loaded, NVML calls are answered NVML_ERROR_NOT_SUPPORTED
  std::string memory;  // the slice the client asks for ("2GiB" or "2GiB,1GiB", per device)
};

// Serves the probe on c (a socket, or a TLS session whose token was checked) until the client
// closes it. Returns the exit status: 0 when the
// client went away, 1 when the driver could not be loaded, 3 when the client broke the
// protocol (a call outside AnswersWithoutSlice, a frame too large).
int RunProbe(const Channel& c, const ProbeOptions& options);

}  // namespace gslice::remote
