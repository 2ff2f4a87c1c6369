// Registry::RecordTrace (registry.h): gslice trace, POST /v1/slices/NAME/trace. The slice's
// processes record while the slice's trace request word in the node ledger is set; each
// writes its part into the request's folder once it is cleared; gsliced merges them.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "gslice/atomic_file.h"
#include "gslice/trace_format.h"
#include "registry.h"

namespace gslice {
namespace {

// After the request ends, processes write their parts within their recorder's next tick
// (100 ms) plus the time a write takes: wait until every process that was in the slice has
// written, at most this long.
constexpr auto kPartsWait = std::chrono::seconds(3);

int CountParts(const std::string& folder) {
  std::error_code ec;
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(folder, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 5 && name[0] != '.' && name.compare(name.size() - 5, 5, ".part") == 0) ++n;
  }
  return n;
}

// Writes text to path whole (AtomicFile), mode 0640 whatever gsliced's umask.
Status WriteWhole(const std::string& path, const std::string& text) {
  AtomicFile file;
  std::string error;
  if (!file.Open(path, 0640, &error)) return Status::Internal(error);
  if (fchmod(file.fd(), 0640) != 0 || !file.Write(text)) {
    return Status::Internal("cannot write " + path + ": " + strerror(errno));
  }
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
  while (CountParts(target->folder) < target->processes && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::vector<std::string> parts;
  std::string error;
  const bool read = ReadTraceParts(target->folder, &parts, &error, owner);
  std::error_code ec;
  std::filesystem::remove_all(target->folder, ec);
  if (!read) return Status::Internal("reading the processes' parts: " + error);

  TraceMergeResult merged;
  TraceRecording out;
  out.trace = MergeTraceParts(parts, name, &merged);
  out.processes = merged.parts;
  out.events = merged.events;
  out.dropped = merged.dropped;
  if (mkdir(trace_dir.c_str(), 0750) != 0 && errno != EEXIST) {
    return Status::Internal("cannot make " + trace_dir + ": " + strerror(errno));
  }
  out.path = trace_dir + "/" + name + ".json";
  if (Status s = WriteWhole(out.path, out.trace); !s.ok()) return s;
  {
    std::lock_guard lock(mu_);
    store_->RecordEvent(name, "trace",
                        std::to_string(out.events) + " events from " + std::to_string(out.processes) + " process(es)");
  }
  generation_++;
  return out;
}

}  // namespace gslice
