#include "gslice/trace_format.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gslice {
namespace {

// A part being merged: its header, its clock when it has one, where its lines start.
struct Part {
  TracePartHeader head;
  bool ok = false;
  bool aligned = false;  // a clock line: the part's times are another host's
  TracePartClock clock;
  size_t body = 0;  // where the lines after the header (and clock line) start
  int64_t Convert(int64_t t) const { return aligned ? clock.Convert(t) : t; }
};

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

std::string MergeTraceParts(const std::vector<std::string>& parts, const std::string& slice,
                            TraceMergeResult* result) {
  TraceMergeResult r;
  std::vector<Part> heads(parts.size());
  int64_t base_mono = 0, base_unix = 0;
  std::string slice_json = slice.empty() ? "" : TraceJsonString(slice);
  std::string notes;
  for (size_t k = 0; k < parts.size(); ++k) {
    const std::string& text = parts[k];
    Part& p = heads[k];
    size_t body = 0;
    if (!ParseTracePartHead(text, &p.head, &body)) continue;
    p.ok = true;
    p.body = body;
    if (const size_t nl = text.find('\n', body); nl != std::string::npos && text.compare(body, 2, "C ") == 0) {
      if (!ParseTracePartClockLine(std::string_view(text).substr(body, nl - body), &p.clock)) {
        p.ok = false;  // times on an unknown clock would mislead: the part is left out
        continue;
      }
      p.aligned = true;
      p.body = nl + 1;
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

  std::string out = "{\"traceEvents\":[";
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  for (size_t k = 0; k < parts.size(); ++k) {
    if (!heads[k].ok) continue;
    const std::string& text = parts[k];
    const Part& part = heads[k];
    size_t pos = part.body;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) break;  // a torn last line
      const char* line = text.data() + pos;
      const size_t len = end - pos;
      pos = end + 1;
      if (len < 3 || line[1] != ' ') continue;
      if (line[0] == 'M') {
        if (line[2] != '{' || line[len - 1] != '}') continue;
        sep();
        out.append(line + 2, len - 2);
        continue;
      }
      if (line[0] != 'E') continue;
      char* after = nullptr;
      const long long ts = strtoll(line + 2, &after, 10);
      if (after == nullptr || *after != ' ') continue;
      const long long dur = strtoll(after + 1, &after, 10);
      if (after == nullptr || *after != ' ') continue;
      const char* rest = after + 1;
      const size_t rest_len = len - static_cast<size_t>(rest - line);
      if (!LooksLikeMembers(rest, rest_len)) continue;
      sep();
      const int64_t at = part.Convert(ts);
      out += "{\"ts\":";
      AppendMicros(&out, at - base_mono);
      if (dur >= 0) {
        out += ",\"dur\":";
        AppendMicros(&out, part.aligned ? part.Convert(ts + dur) - at : dur);
      }
      out += ",";
      out.append(rest, rest_len);
      out += "}";
      ++r.events;
    }
  }
  out += "],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{\"gslice\":{\"version\":" +
         std::to_string(kTraceFormatVersion) + ",\"slice\":" + slice_json +
         ",\"started_unix_ns\":" + std::to_string(base_unix) + ",\"dropped_events\":" + std::to_string(r.dropped) +
         (r.aligned_parts > 0 ? ",\"clock_uncertainty_ns\":" + std::to_string(r.clock_uncertainty_ns) : std::string()) +
         ",\"processes\":[" + notes + "]}}}\n";
  if (result != nullptr) *result = r;
  return out;
}

bool ReadTraceParts(const std::string& dir, std::vector<std::string>* parts, std::string* error, int64_t owner) {
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) {
    *error = dir + ": " + strerror(errno);
    return false;
  }
  DIR* d = fdopendir(dfd);
  if (d == nullptr) {
    *error = dir + ": " + strerror(errno);
    close(dfd);
    return false;
  }
  int64_t total = 0;
  while (dirent* e = readdir(d)) {
    if (static_cast<int>(parts->size()) >= kTraceMaxParts || total >= kTraceMaxPartsBytes) break;
    const std::string name = e->d_name;
    if (name.size() < 6 || name.compare(name.size() - 5, 5, ".part") != 0) continue;
    const int fd = openat(dfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
        (owner >= 0 && static_cast<int64_t>(st.st_uid) != owner)) {
      close(fd);
      continue;
    }
    std::string text;
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
      total += n;
      if (total >= kTraceMaxPartsBytes) break;
    }
    close(fd);
    parts->push_back(std::move(text));
  }
  closedir(d);
  return true;
}

}  // namespace gslice
