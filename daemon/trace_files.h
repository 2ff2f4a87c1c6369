// Where gsliced keeps each slice's latest trace (docs/trace.md) and how it reads one back.
//
// A slice's trace is `<state dir>/traces/<slice name>.json`, the state dir being the folder of
// gsliced's `database`. The file is written whole (AtomicFile), so a reader sees the previous
// trace or the new one, never part of one. Slice names are validated names
// (model.h: ValidateName), so a path built from one never leaves the traces folder.
#pragma once

#include <cstdint>
#include <string>

#include "config.h"
#include "status.h"

namespace gslice {

// The largest trace gsliced serves, and so keeps: a trace is read whole into memory to be
// answered, and a recording's merge leaves out the events past it.
inline constexpr uint64_t kMaxServedTraceBytes = 64ull << 20;

// `<folder of config.database>/traces`.
std::string TraceDir(const DaemonConfig& config);

// `<trace_dir>/<slice>.json`. REQUIRES: ValidateName("slice", slice) is ok.
std::string TracePath(const std::string& trace_dir, const std::string& slice);

// Reads the trace at `path` whole. NotFound when there is none; an error that says what to do
// when it is not a regular file (symbolic links are not followed) or holds more than
// `max_bytes`, in which case nothing more than `max_bytes` + 1 bytes is read.
Result<std::string> ReadTraceFile(const std::string& path, uint64_t max_bytes = kMaxServedTraceBytes);

}  // namespace gslice
