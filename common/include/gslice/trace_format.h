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
//
// This header is the format's one reader and one writer: whoever writes a part's header, clock
// line or a JSON string in one (the shim's recorder, the remote client and worker) uses the
// writer below, and whoever reads one (the merge, the remote client) the reader.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace gslice {

inline constexpr const char* kTracePartMagic = "gslice-trace-part 1";
inline constexpr int kTraceFormatVersion = 1;
// GPU stream tracks: tid = kTraceStreamTidBase + the stream's per-process number.
inline constexpr int64_t kTraceStreamTidBase = 1000000000;

// ---- writing and reading a part's header ---------------------------------------------------

// A part's P line.
struct TracePartHeader {
  int64_t pid = 0;
  int64_t started_mono_ns = 0;
  int64_t started_unix_ns = 0;
  int64_t dropped = 0;             // events the process could not keep
  std::string slice_json = "\"\"";  // the slice's name, as a JSON string literal
  std::string note_json = "\"\"";   // what the process says of its GPU activity, likewise
};

// A part's optional clock line (C): the part's times are another host's; t on the part's
// clock is Convert(t) on the file's.
struct TracePartClock {
  int64_t offset_ns = 0;       // added to the part's times
  int64_t uncertainty_ns = 0;  // +- ns of that offset
  int64_t reference_ns = 0;    // the part's time at which offset holds
  double drift_ppb = 0;        // how much offset grows per ns of the part's clock, in 1e-9
  int64_t Convert(int64_t t) const {
    return t + offset_ns + static_cast<int64_t>(static_cast<double>(t - reference_ns) * drift_ppb / 1e9);
  }
};

// The magic line and the P line, each ending in a newline.
std::string TracePartHead(const TracePartHeader& header);
// The C line, ending in a newline.
std::string TracePartClockLine(const TracePartClock& clock);

// Reads the magic line and the P line at the start of text. False when they are not there or
// do not parse (the slice and the note must be JSON string literals); else *body is where
// the next line starts.
bool ParseTracePartHead(std::string_view text, TracePartHeader* header, size_t* body);
// Reads a C line (without its newline). False when it does not parse.
bool ParseTracePartClockLine(std::string_view line, TracePartClock* clock);

// Calls put(const char*, size_t) with s as a JSON string literal (quotes included): `"` and
// `\` escaped, newline, tab and return as \n \t \r, other control characters as \u00XX,
// everything else (invalid UTF-8 too) as it is. No allocation: the shim's recorder streams it.
template <typename Put>
void PutTraceJsonString(std::string_view s, Put&& put) {
  put("\"", 1);
  size_t from = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    if (i > from) put(s.data() + from, i - from);
    from = i + 1;
    char esc[8];
    int n = 2;
    esc[0] = '\\';
    switch (c) {
      case '"': esc[1] = '"'; break;
      case '\\': esc[1] = '\\'; break;
      case '\n': esc[1] = 'n'; break;
      case '\t': esc[1] = 't'; break;
      case '\r': esc[1] = 'r'; break;
      default: n = snprintf(esc, sizeof esc, "\\u%04x", c);
    }
    put(esc, static_cast<size_t>(n));
  }
  if (s.size() > from) put(s.data() + from, s.size() - from);
  put("\"", 1);
}

// JSON string literal of s (quotes included), as PutTraceJsonString writes it.
std::string TraceJsonString(std::string_view s);

// ---- merging parts -------------------------------------------------------------------------

// The folder into which the processes of slice `slice` of the ledger at ledger_dir write their
// parts for request `request` (Ledger::SetTraceRequest): made by the ledger's writer, owned by
// the slice's owner, mode 0700.
std::string TraceRequestFolder(const std::string& ledger_dir, int slice, uint32_t request);

// What a merge reads and writes is bounded: parts are written by the slice's processes, which a
// reader as privileged as gsliced does not trust. A merge streams each part a line at a time
// and never holds a part or the merged file whole.
inline constexpr int kTraceMaxParts = 1024;
inline constexpr int64_t kTraceMaxPartsBytes = int64_t{256} << 20;
// No writer makes a longer line (a name is at most 1 KiB before escaping).
inline constexpr int64_t kTraceMaxLineBytes = int64_t{64} << 10;
struct TraceMergeLimits {
  int max_parts = kTraceMaxParts;                // more *.part files are left out
  int64_t max_read_bytes = kTraceMaxPartsBytes;  // of all parts together; the rest is not read
  int64_t max_line_bytes = kTraceMaxLineBytes;   // a longer line is skipped
  int64_t max_output_bytes = 0;                  // > 0: events that would make the file longer
                                                 // are left out (counted as cut_events)
};

struct TraceMergeResult {
  int parts = 0;            // parts that had a header
  int64_t events = 0;       // events written
  int64_t dropped = 0;      // the parts' dropped events, summed
  int64_t started_unix_ns = 0;
  int aligned_parts = 0;              // parts with a clock line
  int64_t clock_uncertainty_ns = 0;   // the largest of theirs
  // Where the limits held something back (all 0 for parts within them):
  int parts_left_out = 0;         // *.part files past max_parts, or not regular, single-linked
                                  // files of the owner
  int64_t bytes_read = 0;         // of the parts, headers included
  bool read_cut = false;          // max_read_bytes was reached: the rest was not read
  int64_t long_lines = 0;         // lines longer than max_line_bytes, skipped
  int64_t cut_events = 0;         // events left out to keep the file within max_output_bytes
  int64_t output_bytes = 0;       // the merged file's size
};

// Merges parts into one trace file (docs/trace.md): a Chrome trace event JSON object whose
// otherData.gslice names the slice. slice: the name for otherData ("" takes the first part's).
// out receives the file in pieces, in order; when it returns false the merge stops (and
// returns false). Events and metadata are written in the parts' order, each part's in its
// lines' order.
using TraceSink = std::function<bool(std::string_view)>;

// Merges the parts in memory (tests, small inputs).
std::string MergeTraceParts(const std::vector<std::string>& parts, const std::string& slice,
                            TraceMergeResult* result = nullptr, const TraceMergeLimits& limits = {});

// Merges every *.part in folder dir: regular files, not through symbolic links,
// single-linked, owned by `owner` (when owner >= 0: a privileged reader of a user's folder
// takes only that user's own files), at most limits.max_parts of them. False when dir cannot
// be read (*error says why) or out returned false (*error untouched: out knows why).
bool MergeTracePartsInFolder(const std::string& dir, const std::string& slice, int64_t owner,
                             const TraceMergeLimits& limits, const TraceSink& out, TraceMergeResult* result,
                             std::string* error);

}  // namespace gslice
