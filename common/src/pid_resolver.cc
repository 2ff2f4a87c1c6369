#include <dirent.h>

#include "gslice/clock.h"
#include "gslice/pid_namespace.h"

namespace gslice {
namespace {

bool ParsePid(const char* s, uint32_t* out) {
  uint64_t v = 0;
  if (*s == '\0') return false;
  for (; *s != '\0'; ++s) {
    if (*s < '0' || *s > '9') return false;
    v = v * 10 + static_cast<uint64_t>(*s - '0');
    if (v > UINT32_MAX) return false;
  }
  *out = static_cast<uint32_t>(v);
  return v != 0;
}

}  // namespace

PidResolver::PidResolver(std::string proc_root, int64_t min_rescan_ns)
    : root_(std::move(proc_root)), min_rescan_ns_(min_rescan_ns) {
  own_ns_ = PidNamespaceAt((root_ + "/self/ns/pid").c_str());
}

bool PidResolver::StartTimeIs(uint32_t outer_pid, uint64_t start_time) const {
  char state = 0;
  uint64_t st = 0;
  std::string path = root_ + "/" + std::to_string(outer_pid) + "/stat";
  if (!ReadProcStat(path.c_str(), &state, &st)) return false;
  if (state == 'Z' || state == 'X' || state == 'x') return false;
  return start_time == 0 || st == start_time;
}

void PidResolver::Rescan() {
  index_.clear();
  DIR* dir = opendir(root_.c_str());
  if (dir == nullptr) return;
  while (dirent* d = readdir(dir)) {
    uint32_t outer = 0;
    if (!ParsePid(d->d_name, &outer)) continue;
    const std::string base = root_ + "/" + d->d_name;
    const uint64_t ns = PidNamespaceAt((base + "/ns/pid").c_str());
    if (ns == 0 || ns == own_ns_) continue;  // same namespace: resolved without a scan
    uint32_t inner = 0;
    if (!ReadInnermostPid((base + "/status").c_str(), &inner)) continue;
    char state = 0;
    uint64_t start = 0;
    if (!ReadProcStat((base + "/stat").c_str(), &state, &start)) continue;
    if (state == 'Z' || state == 'X' || state == 'x') continue;  // dead, not yet waited for
    index_[{ns, inner}] = Seen{outer, start};
  }
  closedir(dir);
}

uint32_t PidResolver::Resolve(uint64_t pid_ns, uint32_t pid, uint64_t start_time) {
  if (pid == 0) return 0;
  if (pid_ns != 0 && pid_ns == own_ns_) return StartTimeIs(pid, start_time) ? pid : 0;
  if (pid_ns == 0) return 0;  // an unknown namespace cannot be matched
  auto hit = index_.find({pid_ns, pid});
  if (hit != index_.end() && (start_time == 0 || hit->second.start_time == start_time) &&
      StartTimeIs(hit->second.outer_pid, hit->second.start_time)) {
    return hit->second.outer_pid;
  }
  const int64_t now = MonotonicNs();
  if (scanned_ && now - last_scan_ns_ < min_rescan_ns_) return 0;
  scanned_ = true;
  last_scan_ns_ = now;
  Rescan();
  hit = index_.find({pid_ns, pid});
  if (hit == index_.end() || (start_time != 0 && hit->second.start_time != start_time)) return 0;
  return hit->second.outer_pid;
}

bool IdentifyPid(const std::string& proc_root, uint32_t pid, PidIdentity* out) {
  if (pid == 0) return false;
  const std::string base = proc_root + "/" + std::to_string(pid);
  char state = 0;
  uint64_t start = 0;
  if (!ReadProcStat((base + "/stat").c_str(), &state, &start)) return false;
  if (state == 'Z' || state == 'X' || state == 'x') return false;
  const uint64_t ns = PidNamespaceAt((base + "/ns/pid").c_str());
  if (ns == 0) return false;
  uint32_t inner = 0;
  if (!ReadInnermostPid((base + "/status").c_str(), &inner)) {
    if (ns != PidNamespaceAt((proc_root + "/self/ns/pid").c_str())) return false;
    inner = pid;  // no NSpid line (old kernel): only our own namespace's pids are known
  }
  out->pid_ns = ns;
  out->pid = inner;
  out->start_time = start;
  return true;
}

}  // namespace gslice
