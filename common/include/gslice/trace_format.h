// Timelines (docs/trace.md): the per-process part a shim writes and the merged trace file the
// CLI (gslice run --trace) and gsliced (gslice trace) make of a program's parts.
//
// A part is text, one record a line, written by one process when it stops recording:
//
//   gslice-trace-part 1
//   P <pid> <started_mono_ns> <started_unix_ns> <dropped> <slice name, JSON string> <note, JSON string>
//   C <offset_ns> <uncertainty_ns> [<reference_ns> <drift_ppb>]   (optional, right after P)
//   M <a whole metadata event, JSON object>                 (process_name, thread_name)
//   E <ts_ns> <dur_ns or -1> <the event's other members, JSON, no braces>
//
// Times in a part are CLOCK_MONOTONIC nanoseconds, so the parts of one node share one clock;
// the merge puts the file's zero at the earliest part's start (otherData.gslice.started_unix_ns
// is the wall time of that zero) and writes ts/dur in microseconds. A part recorded on another
// host's clock (a remote worker's, remote/client/client_trace.h) carries a clock line: its
// time t is t + offset_ns + (t - reference_ns) * drift_ppb / 1e9 on the file's clock, known to
// +- uncertainty_ns (listed as the
// process's otherData clock; the largest as otherData.gslice.clock_uncertainty_ns). A part
// whose clock line does not parse is left out. Lines that do not parse (a process killed while
// writing) are skipped; a merge never fails on a part's content.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gslice {

inline constexpr const char* kTracePartMagic = "gslice-trace-part 1";
inline constexpr int kTraceFormatVersion = 1;
// GPU stream tracks: tid = kTraceStreamTidBase + the stream's per-process number.
inline constexpr int64_t kTraceStreamTidBase = 1000000000;

// The folder into which the processes of slice `slice` of the ledger at ledger_dir write their
// parts for request `request` (Ledger::SetTraceRequest): made by the ledger's writer, owned by
// the slice's owner, mode 0700.
std::string TraceRequestFolder(const std::string& ledger_dir, int slice, uint32_t request);

struct TraceMergeResult {
  int parts = 0;            // parts that had a header
  int64_t events = 0;       // events written
  int64_t dropped = 0;      // the parts' dropped events, summed
  int64_t started_unix_ns = 0;
  int aligned_parts = 0;              // parts with a clock line
  int64_t clock_uncertainty_ns = 0;   // the largest of theirs
};

// Merges the parts (their contents) into one trace file (docs/trace.md): a Chrome trace event
// JSON object whose otherData.gslice names the slice. slice: the name for otherData ("" takes
// the first part's).
std::string MergeTraceParts(const std::vector<std::string>& parts, const std::string& slice,
                            TraceMergeResult* result = nullptr);

// Reads every regular file named *.part in dir into parts: not through symlinks, single-linked,
// owned by `owner` (when owner >= 0; a privileged reader of a user's folder takes only that
// user's own files), at most kTraceMaxParts of them and kTraceMaxPartsBytes in all. Returns
// false with error set when dir cannot be read.
inline constexpr int kTraceMaxParts = 1024;
inline constexpr int64_t kTraceMaxPartsBytes = int64_t{256} << 20;
bool ReadTraceParts(const std::string& dir, std::vector<std::string>* parts, std::string* error,
                    int64_t owner = -1);

// JSON string literal of s (quotes included), control characters escaped, invalid UTF-8 kept.
std::string TraceJsonString(const std::string& s);

}  // namespace gslice
