// Registry::RecordTrace (registry.h): gslice trace, POST /v1/slices/NAME/trace. The slice's
// processes record while the slice's trace request word in the node ledger is set; each
// writes its part into the request's folder once it is cleared; gsliced merges them.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "gslice/atomic_file.h"
#include "gslice/trace_format.h"
#include "registry.h"
#include "trace_files.h"

namespace gslice {
namespace {

// After the request ends, processes write their parts within their recorder's next tick
// (100 ms) plus the time a write takes: wait until every process that was in the slice has
// written, at most this long.
constexpr auto kPartsWait = std::chrono::seconds(3);

// The parts written so far, counting to `enough` at most: the folder is the slice owner's,
// and however many names it holds, no more than a bounded number are looked at.
int CountParts(const std::string& folder, int enough) {
  std::error_code ec;
  int n = 0, looked_at = 0;
  for (auto it = std::filesystem::directory_iterator(folder, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    if (n >= enough || ++looked_at > 64 * kTraceMaxParts) break;
    const std::string name = it->path().filename().string();
    if (name.size() > 5 && name[0] != '.' && name.compare(name.size() - 5, 5, ".part") == 0) ++n;
  }
  return n;
}

void Log(const std::string& line) { std::fprintf(stderr, "gsliced: %s\n", line.c_str()); }

// What the merge's bounds held back, for the log.
std::string BoundsNote(const TraceMergeResult& r) {
  std::string note;
  auto add = [&](const std::string& what) { note += (note.empty() ? "" : "; ") + what; };
  if (r.parts_left_out > 0) {
    add(std::to_string(r.parts_left_out) + " part file(s) left out (past the first " + std::to_string(kTraceMaxParts) +
        ", or not regular, single-linked files of the slice's owner)");
  }
  if (r.read_cut) add("read only the first " + std::to_string(kTraceMaxPartsBytes >> 20) + " MiB of the parts");
  if (r.long_lines > 0) {
    add(std::to_string(r.long_lines) + " line(s) longer than " + std::to_string(kTraceMaxLineBytes >> 10) +
        " KiB skipped");
  }
  if (r.cut_events > 0) {
    add(std::to_string(r.cut_events) + " event(s) left out to keep the trace within the " +
        std::to_string(kMaxServedTraceBytes >> 20) + " MiB gsliced serves (otherData.gslice.cut_events)");
  }
  return note;
}

// Merges the parts in folder (the slice's processes' files, those of uid owner) into the
// kept trace at path (mode 0640 whatever gsliced's umask), streaming them under
// TraceMergeLimits' bounds: the file is no larger than what gsliced serves.
Status KeepTrace(const std::string& folder, const std::string& slice, int64_t owner, const std::string& path,
                 TraceMergeResult* merged) {
  std::string error;
  AtomicFile file;
  if (!file.Open(path, 0640, &error)) return Status::Internal(error);
  if (fchmod(file.fd(), 0640) != 0) return Status::Internal("cannot write " + path + ": " + strerror(errno));
  const TraceMergeLimits limits{.max_output_bytes = static_cast<int64_t>(kMaxServedTraceBytes)};
  std::string write_error;
  const bool ok = MergeTracePartsInFolder(
      folder, slice, owner, limits,
      [&](std::string_view piece) {
        if (file.Write(piece)) return true;
        write_error = "cannot write " + path + ": " + strerror(errno);
        return false;
      },
      merged, &error);
  if (!ok) return Status::Internal(write_error.empty() ? "reading the processes' parts: " + error : write_error);
  if (!file.Commit(&error)) return Status::Internal(error);
  return Status::Ok();
}

}  // namespace

Result<Registry::TraceRecording> Registry::RecordTrace(const std::string& name, int seconds,
                                                       const std::string& trace_dir, const Caller& caller) {
  if (seconds < 1 || seconds > 300) {
    return Status::BadRequest("seconds: " + std::to_string(seconds) + " is out of range: record 1 to 300 seconds");
  }
  if (trace_dir.empty()) return Status::Unavailable("this gsliced keeps no traces (it has no state folder)");
  int64_t owner = -1;
  {
    std::lock_guard lock(mu_);
    Slice* slice = FindSlice(name);
    if (slice == nullptr) return Status::NotFound("no slice named '" + name + "': `gslice ls` lists the slices");
    if (Status s = MayChange(*slice, caller); !s.ok()) {
      return Status::Forbidden("recording a timeline of slice '" + name + "' is for its owner or an admin: " +
                               s.message());
    }
    if (tracing_.count(name) != 0) {
      return Status::Conflict("slice '" + name + "' is being recorded already: wait for that recording to end");
    }
    tracing_.insert(name);
    owner = slice->owner_uid;
  }
  struct Done {
    Registry* r;
    const std::string& name;
    ~Done() {
      std::lock_guard lock(r->mu_);
      r->tracing_.erase(name);
    }
  } done{this, name};

  std::random_device rd;
  uint32_t request = 0;
  while (request == 0) request = rd();
  auto target = ledger_->StartTrace(name, request);
  if (!target.ok()) return target.status();
  {
    std::lock_guard lock(mu_);
    store_->RecordEvent(name, "trace", "recording " + std::to_string(seconds) + " s");
  }
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  (void)ledger_->StopTrace(name);
  const auto deadline = std::chrono::steady_clock::now() + kPartsWait;
  while (CountParts(target->folder, target->processes) < target->processes &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (mkdir(trace_dir.c_str(), 0750) != 0 && errno != EEXIST) {
    return Status::Internal("cannot make " + trace_dir + ": " + strerror(errno));
  }
  TraceRecording out;
  out.path = trace_dir + "/" + name + ".json";
  TraceMergeResult merged;
  const Status kept = KeepTrace(target->folder, name, owner, out.path, &merged);
  std::error_code ec;
  std::filesystem::remove_all(target->folder, ec);
  if (!kept.ok()) return kept;
  if (merged.read_cut || merged.parts_left_out > 0 || merged.long_lines > 0 || merged.cut_events > 0) {
    Log("trace of slice " + name + ": its processes' parts went past gsliced's bounds: " + BoundsNote(merged));
  }
  out.processes = merged.parts;
  out.events = merged.events;
  out.dropped = merged.dropped;
  // The answer: the kept file, read back whole (it is within what gsliced serves).
  Result<std::string> trace = ReadTraceFile(out.path);
  if (!trace.ok()) return trace.status();
  out.trace = std::move(trace.value());
  {
    std::lock_guard lock(mu_);
    store_->RecordEvent(name, "trace",
                        std::to_string(out.events) + " events from " + std::to_string(out.processes) + " process(es)");
  }
  generation_++;
  return out;
}

}  // namespace gslice
