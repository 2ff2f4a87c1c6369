// Prometheus text exposition of the node: every metric gsliced exports is declared once in
// kMetrics (metrics.cc) with its type and help; names follow Prometheus conventions (base
// units in the name, ratios 0..1, counters end in _total).
#pragma once

#include <string>

#include "registry.h"

namespace gslice {

struct ApiCounters;  // api_server.h

// The metrics page for `snap` plus the registry's and the API's counters.
std::string RenderMetrics(const NodeSnapshot& snap, const RegistryCounters& registry,
                          const ApiCounters* api, double start_time_seconds);

}  // namespace gslice
