#include "gslice/trace_format.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <memory>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gslice {
namespace {

// A part being merged: its header, its clock when it has one, how many lines they take.
struct Part {
  TracePartHeader head;
  bool ok = false;
  bool aligned = false;  // a clock line: the part's times are another host's
  TracePartClock clock;
  int head_lines = 0;    // lines before the events: 2, or 3 with a clock line
  int64_t Convert(int64_t t) const { return aligned ? clock.Convert(t) : t; }
};

// One part's lines, read in bounded pieces.
class LineSource {
 public:
  virtual ~LineSource() = default;
  // The next whole line, without its newline; false at the end. A line longer than the limit
  // is skipped (counted in long_lines); a last line without a newline (a process killed while
  // writing) is not a line.
  virtual bool Next(std::string_view* line) = 0;
};

// A part in memory.
class StringLines final : public LineSource {
 public:
  StringLines(std::string_view text, const TraceMergeLimits& limits, TraceMergeResult* r)
      : text_(text), limits_(limits), r_(r) {}
  bool Next(std::string_view* line) override {
    for (;;) {
      const size_t nl = text_.find('\n', pos_);
      if (nl == std::string_view::npos) return false;
      const size_t start = pos_;
      pos_ = nl + 1;
      r_->bytes_read += static_cast<int64_t>(nl + 1 - start);
      if (static_cast<int64_t>(nl - start) > limits_.max_line_bytes) {
        ++r_->long_lines;
        continue;
      }
      *line = text_.substr(start, nl - start);
      return true;
    }
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  const TraceMergeLimits& limits_;
  TraceMergeResult* r_;
};

// A part file, read through a buffer of one line's bound: however large the file, no more
// than that is held, and no more than what remains of limits.max_read_bytes (over all parts)
// is read.
class FileLines final : public LineSource {
 public:
  FileLines(int fd, const TraceMergeLimits& limits, TraceMergeResult* r)
      : fd_(fd), limits_(limits), r_(r), buf_(static_cast<size_t>(limits.max_line_bytes) + 1 + (64 << 10)) {}
  ~FileLines() override { close(fd_); }
  bool Next(std::string_view* line) override {
    bool skipping = false;  // inside a line longer than the bound
    for (;;) {
      const char* nl = static_cast<const char*>(memchr(buf_.data() + start_, '\n', end_ - start_));
      if (nl != nullptr) {
        const size_t len = static_cast<size_t>(nl - (buf_.data() + start_));
        const size_t at = start_;
        start_ += len + 1;
        if (skipping || static_cast<int64_t>(len) > limits_.max_line_bytes) {
          ++r_->long_lines;
          skipping = false;
          continue;
        }
        *line = std::string_view(buf_.data() + at, len);
        return true;
      }
      if (static_cast<int64_t>(end_ - start_) > limits_.max_line_bytes) {
        skipping = true;  // drop what is held of it, keep looking for its end
        start_ = end_;
      }
      if (!Fill()) return false;
    }
  }

 private:
  // Moves what is left to the front and reads more. False at the end of the file, on an error
  // or when the read bound is reached.
  bool Fill() {
    if (start_ > 0) {
      memmove(buf_.data(), buf_.data() + start_, end_ - start_);
      end_ -= start_;
      start_ = 0;
    }
    const int64_t left = limits_.max_read_bytes - r_->bytes_read;
    if (left <= 0) {
      r_->read_cut = true;
      return false;
    }
    // Small reads first: the headers' pass reads a few lines of each part, and what it reads
    // counts towards the bound as the events' pass does.
    const size_t room = std::min({buf_.size() - end_, static_cast<size_t>(left), chunk_});
    chunk_ = std::min(chunk_ * 2, buf_.size());
    ssize_t n;
    do {
      n = read(fd_, buf_.data() + end_, room);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return false;
    end_ += static_cast<size_t>(n);
    r_->bytes_read += n;
    return true;
  }

  const int fd_;
  const TraceMergeLimits& limits_;
  TraceMergeResult* r_;
  std::vector<char> buf_;
  size_t start_ = 0, end_ = 0;  // the unread bytes held: buf_[start_, end_)
  size_t chunk_ = 4096;         // the next read's size
};

// Opens part k for reading from its start; null when it can no longer be read.
using OpenPart = std::function<std::unique_ptr<LineSource>(size_t k)>;

// Parses a JSON string literal at s[*i], after spaces; advances *i past it.
bool ReadJsonString(std::string_view s, size_t* i, std::string* out) {
  while (*i < s.size() && s[*i] == ' ') ++*i;
  if (*i >= s.size() || s[*i] != '"') return false;
  const size_t start = *i;
  for (size_t j = start + 1; j < s.size(); ++j) {
    if (s[j] == '\\') {
      ++j;
      continue;
    }
    if (s[j] == '"') {
      out->assign(s.substr(start, j + 1 - start));
      *i = j + 1;
      return true;
    }
  }
  return false;
}

// Microseconds with nanosecond precision, as JSON.
void AppendMicros(std::string* out, int64_t ns) {
  char buf[48];
  const bool neg = ns < 0;
  const uint64_t a = neg ? static_cast<uint64_t>(-ns) : static_cast<uint64_t>(ns);
  snprintf(buf, sizeof buf, "%s%" PRIu64 ".%03" PRIu64, neg ? "-" : "", a / 1000, a % 1000);
  out->append(buf);
}

// The rest of an event line must look like JSON members: no newline, balanced braces and
// quotes. A cheap check that keeps a torn line out of the file.
bool LooksLikeMembers(const char* s, size_t n) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < n; ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') {
      if (--depth < 0) return false;
    }
  }
  return depth == 0 && !in_string && n > 0 && s[0] == '"';
}

}  // namespace

std::string TraceRequestFolder(const std::string& ledger_dir, int slice, uint32_t request) {
  return ledger_dir + "/trace-" + std::to_string(slice) + "-" + std::to_string(request);
}

std::string TraceJsonString(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  PutTraceJsonString(s, [&](const char* p, size_t n) { out.append(p, n); });
  return out;
}

std::string TracePartHead(const TracePartHeader& h) {
  return std::string(kTracePartMagic) + "\nP " + std::to_string(h.pid) + " " + std::to_string(h.started_mono_ns) + " " +
         std::to_string(h.started_unix_ns) + " " + std::to_string(h.dropped) + " " + h.slice_json + " " + h.note_json +
         "\n";
}

std::string TracePartClockLine(const TracePartClock& c) {
  char line[128];
  snprintf(line, sizeof line, "C %lld %lld %lld %.3f\n", static_cast<long long>(c.offset_ns),
           static_cast<long long>(c.uncertainty_ns), static_cast<long long>(c.reference_ns), c.drift_ppb);
  return line;
}

bool ParseTracePartHead(std::string_view text, TracePartHeader* h, size_t* body) {
  const size_t magic = strlen(kTracePartMagic);
  if (text.size() <= magic || text.compare(0, magic, kTracePartMagic) != 0 || text[magic] != '\n') return false;
  const size_t nl = text.find('\n', magic + 1);
  if (nl == std::string_view::npos) return false;
  const std::string line(text.substr(magic + 1, nl - magic - 1));
  long long pid, mono, unix_ns, dropped;
  int n = 0;
  if (sscanf(line.c_str(), "P %lld %lld %lld %lld%n", &pid, &mono, &unix_ns, &dropped, &n) != 4) return false;
  size_t i = static_cast<size_t>(n);
  TracePartHeader out;
  if (!ReadJsonString(line, &i, &out.slice_json) || !ReadJsonString(line, &i, &out.note_json)) return false;
  out.pid = pid;
  out.started_mono_ns = mono;
  out.started_unix_ns = unix_ns;
  out.dropped = dropped;
  *h = std::move(out);
  *body = nl + 1;
  return true;
}

bool ParseTracePartClockLine(std::string_view line, TracePartClock* c) {
  const std::string text(line);
  long long offset, uncertainty, reference = 0;
  double drift = 0;
  char extra;
  const int n = sscanf(text.c_str(), "C %lld %lld %lld %lf %c", &offset, &uncertainty, &reference, &drift, &extra);
  if ((n != 2 && n != 4) || uncertainty < 0 || !(drift > -1e8 && drift < 1e8)) return false;
  *c = TracePartClock{.offset_ns = offset, .uncertainty_ns = uncertainty, .reference_ns = reference, .drift_ppb = drift};
  return true;
}

namespace {

// Gives what it is given to out in pieces of about 64 KiB, counting it; once out fails, takes
// nothing more.
struct Output {
  static constexpr size_t kPiece = 64 << 10;
  explicit Output(const TraceSink& sink) : out(sink) { pending.reserve(kPiece * 2); }
  const TraceSink& out;
  std::string pending;
  int64_t written = 0;
  bool failed = false;
  void Put(std::string_view piece) {
    written += static_cast<int64_t>(piece.size());
    pending.append(piece);
    if (pending.size() >= kPiece) Flush();
  }
  void Flush() {
    if (!failed && !pending.empty() && !out(pending)) failed = true;
    pending.clear();
  }
};

// The merge of n parts, each opened (twice: once for the headers, once for the events) by open.
bool Merge(size_t n, const OpenPart& open, const std::string& slice, const TraceMergeLimits& limits,
           const TraceSink& out, TraceMergeResult* result) {
  TraceMergeResult& r = *result;
  std::vector<Part> heads(n);
  int64_t base_mono = 0, base_unix = 0;
  std::string slice_json = slice.empty() ? "" : TraceJsonString(slice);
  std::string notes;
  for (size_t k = 0; k < n; ++k) {
    std::unique_ptr<LineSource> lines = open(k);
    std::string_view line;
    if (lines == nullptr || !lines->Next(&line)) continue;
    std::string head(line);
    if (!lines->Next(&line)) continue;
    head.append("\n").append(line).append("\n");
    Part& p = heads[k];
    size_t body = 0;
    if (!ParseTracePartHead(head, &p.head, &body)) continue;
    p.ok = true;
    p.head_lines = 2;
    if (lines->Next(&line) && line.substr(0, 2) == "C ") {
      if (!ParseTracePartClockLine(line, &p.clock)) {
        p.ok = false;  // times on an unknown clock would mislead: the part is left out
        continue;
      }
      p.aligned = true;
      p.head_lines = 3;
    }
    ++r.parts;
    r.dropped += p.head.dropped;
    const int64_t start = p.Convert(p.head.started_mono_ns);
    if (base_mono == 0 || start < base_mono) {
      base_mono = start;
      base_unix = p.head.started_unix_ns;
    }
    if (p.aligned) {
      r.aligned_parts++;
      r.clock_uncertainty_ns = std::max(r.clock_uncertainty_ns, p.clock.uncertainty_ns);
    }
    if (slice_json.empty() || slice_json == "\"\"") slice_json = p.head.slice_json;
    if (!notes.empty()) notes += ",";
    notes += "{\"pid\":" + std::to_string(p.head.pid) + ",\"dropped_events\":" + std::to_string(p.head.dropped) +
             ",\"gpu_activity\":" + p.head.note_json;
    if (p.aligned) {
      char drift[64];
      snprintf(drift, sizeof drift, "%.3f", p.clock.drift_ppb);
      notes += ",\"clock\":{\"offset_ns\":" + std::to_string(p.clock.offset_ns) +
               ",\"uncertainty_ns\":" + std::to_string(p.clock.uncertainty_ns) +
               ",\"reference_ns\":" + std::to_string(p.clock.reference_ns) + ",\"drift_ppb\":" + drift + "}";
    }
    notes += "}";
  }
  if (slice_json.empty()) slice_json = "\"\"";
  r.started_unix_ns = base_unix;

  // The file's end, known before the first event but for the count of events cut; with the
  // largest count it could have, the room events must leave for it.
  auto tail = [&](int64_t cut) {
    return "],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{\"gslice\":{\"version\":" +
           std::to_string(kTraceFormatVersion) + ",\"slice\":" + slice_json +
           ",\"started_unix_ns\":" + std::to_string(base_unix) + ",\"dropped_events\":" + std::to_string(r.dropped) +
           (r.aligned_parts > 0 ? ",\"clock_uncertainty_ns\":" + std::to_string(r.clock_uncertainty_ns) : std::string()) +
           (cut > 0 ? ",\"cut_events\":" + std::to_string(cut) + ",\"max_bytes\":" +
                          std::to_string(limits.max_output_bytes)
                    : std::string()) +
           ",\"processes\":[" + notes + "]}}}\n";
  };
  const int64_t reserve = static_cast<int64_t>(tail(INT64_MAX).size());

  Output o(out);
  o.Put("{\"traceEvents\":[");
  bool first = true;
  std::string event;
  // Writes one event (or counts it cut when it would not leave room for the end).
  auto emit = [&](std::string_view text) {
    const int64_t size = static_cast<int64_t>(text.size()) + (first ? 0 : 2);
    if (limits.max_output_bytes > 0 && o.written + size + reserve > limits.max_output_bytes) {
      ++r.cut_events;
      return;
    }
    if (!first) o.Put(",\n");
    first = false;
    o.Put(text);
  };
  for (size_t k = 0; k < n && !o.failed; ++k) {
    const Part& part = heads[k];
    if (!part.ok) continue;
    std::unique_ptr<LineSource> lines = open(k);
    if (lines == nullptr) continue;
    std::string_view text;
    bool more = true;
    for (int skip = 0; skip < part.head_lines && more; ++skip) more = lines->Next(&text);
    while (more && !o.failed && lines->Next(&text)) {
      const char* line = text.data();
      const size_t len = text.size();
      if (len < 3 || line[1] != ' ') continue;
      if (line[0] == 'M') {
        if (line[2] != '{' || line[len - 1] != '}') continue;
        emit(text.substr(2));
        continue;
      }
      if (line[0] != 'E') continue;
      // "E <ts> <dur> <members>", read within the line's bytes.
      const char* const end = line + len;
      int64_t ts = 0, dur = 0;
      const auto [after_ts, ts_error] = std::from_chars(line + 2, end, ts);
      if (ts_error != std::errc() || after_ts == end || *after_ts != ' ') continue;
      const auto [after_dur, dur_error] = std::from_chars(after_ts + 1, end, dur);
      if (dur_error != std::errc() || after_dur == end || *after_dur != ' ') continue;
      const std::string_view rest(after_dur + 1, static_cast<size_t>(end - after_dur - 1));
      if (!LooksLikeMembers(rest.data(), rest.size())) continue;
      const int64_t at = part.Convert(ts);
      event.assign("{\"ts\":");
      AppendMicros(&event, at - base_mono);
      if (dur >= 0) {
        event += ",\"dur\":";
        AppendMicros(&event, part.aligned ? part.Convert(ts + dur) - at : dur);
      }
      event += ",";
      event.append(rest);
      event += "}";
      const int64_t cut_before = r.cut_events;
      emit(event);
      if (r.cut_events == cut_before) ++r.events;
    }
  }
  o.Put(tail(r.cut_events));
  o.Flush();
  r.output_bytes = o.written;
  return !o.failed;
}

}  // namespace

std::string MergeTraceParts(const std::vector<std::string>& parts, const std::string& slice,
                            TraceMergeResult* result, const TraceMergeLimits& limits) {
  std::string out;
  TraceMergeResult r;
  Merge(
      parts.size(),
      [&](size_t k) -> std::unique_ptr<LineSource> { return std::make_unique<StringLines>(parts[k], limits, &r); },
      slice, limits,
      [&](std::string_view piece) {
        out.append(piece);
        return true;
      },
      &r);
  if (result != nullptr) *result = r;
  return out;
}

bool MergeTracePartsInFolder(const std::string& dir, const std::string& slice, int64_t owner,
                             const TraceMergeLimits& limits, const TraceSink& out, TraceMergeResult* result,
                             std::string* error) {
  TraceMergeResult r;
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) {
    *error = dir + ": " + strerror(errno);
    return false;
  }
  // The parts: names and identities first, so that each is opened again as the same file.
  struct Entry {
    std::string name;
    dev_t dev;
    ino_t ino;
  };
  std::vector<Entry> entries;
  // A part is opened without following a link and without blocking (a FIFO), and taken when it
  // is a regular, single-linked file of the owner; else null.
  auto open_part = [&](const std::string& name, struct stat* st) -> int {
    const int fd = openat(dfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode) || st->st_nlink != 1 ||
        (owner >= 0 && static_cast<int64_t>(st->st_uid) != owner)) {
      close(fd);
      return -1;
    }
    return fd;
  };
  const int listing = dup(dfd);
  DIR* d = listing >= 0 ? fdopendir(listing) : nullptr;
  if (d == nullptr) {
    *error = dir + ": " + strerror(errno);
    if (listing >= 0) close(listing);
    close(dfd);
    return false;
  }
  // The folder is the slice owner's: however many names it holds, only so many are looked at.
  int64_t looked_at = 0;
  while (dirent* e = readdir(d)) {
    if (++looked_at > int64_t{64} * limits.max_parts) break;
    const std::string name = e->d_name;
    if (name.size() < 6 || name.compare(name.size() - 5, 5, ".part") != 0) continue;
    if (static_cast<int>(entries.size()) >= limits.max_parts) {
      ++r.parts_left_out;
      continue;
    }
    struct stat st {};
    const int fd = open_part(name, &st);
    if (fd < 0) {
      ++r.parts_left_out;
      continue;
    }
    close(fd);
    entries.push_back({name, st.st_dev, st.st_ino});
  }
  closedir(d);
  const bool ok = Merge(
      entries.size(),
      [&](size_t k) -> std::unique_ptr<LineSource> {
        struct stat st {};
        const int fd = open_part(entries[k].name, &st);
        if (fd < 0) return nullptr;
        if (st.st_dev != entries[k].dev || st.st_ino != entries[k].ino) {
          close(fd);
          return nullptr;
        }
        return std::make_unique<FileLines>(fd, limits, &r);
      },
      slice, limits, out, &r);
  close(dfd);
  if (result != nullptr) *result = r;
  return ok;
}

}  // namespace gslice
