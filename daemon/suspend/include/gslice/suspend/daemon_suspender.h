// gsliced's Suspender (daemon/suspender.h) on the driver's checkpoint API: slice suspend and
// resume requests from the API go to a SuspendService, which also runs idle reclaim,
// transparent resume and memory preemption for the node on its own thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "suspender.h"

namespace gslice {

struct CheckpointSuspenderOptions {
  std::string ledger_path;     // the node ledger gsliced publishes to
  std::string board_path;      // "" = GSLICE_SUSPEND_BOARD or its default
  std::string driver_library;  // "" = libcuda.so.1
  std::string nvml_library;    // "" = libnvidia-ml.so.1
};

// Starts the suspend service. When the driver has no checkpoint API (or no driver is
// installed) returns the unavailable suspender and says why in *note, so gsliced runs on
// with suspend requests answered 501.
std::unique_ptr<Suspender> MakeCheckpointSuspender(const CheckpointSuspenderOptions& options,
                                                   std::string* note);

// Hands the service the slices' idle timeouts (seconds, 0 = never), once the registry
// exists. `suspender` must come from MakeCheckpointSuspender; others are ignored.
void SetIdleTimeouts(Suspender* suspender, std::function<int64_t(const std::string& slice)> idle_timeout_s);

}  // namespace gslice
