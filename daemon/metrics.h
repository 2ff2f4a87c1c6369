// Prometheus text exposition of the node: every metric gsliced exports is declared once in
// kMetrics (metrics.cc) with its type and help; names follow Prometheus conventions (base
// units in the name, ratios 0..1, counters end in _total).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "registry.h"

namespace gslice {

// The metrics page for `snap` and the registry's counters.
std::string RenderMetrics(const NodeSnapshot& snap, const RegistryCounters& registry,
                          double start_time_seconds);
// Every metric name gsliced exports, in the order of the page.
std::vector<std::string> MetricNames();

// The API's requests by status code (rendered apart: it changes with every request).
std::string RenderApiMetrics(const std::map<int, uint64_t>& requests_by_code);

}  // namespace gslice
