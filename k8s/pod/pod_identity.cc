#include "gslice/k8s/pod_identity.h"

#include <cctype>
#include <fstream>
#include <sstream>
#include <vector>

namespace gslice::k8s {

namespace {

bool IsUidChar(char c) { return std::isxdigit(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }

// "pod1234abcd_..." or "kubepods-burstable-pod1234_abcd.slice" -> "1234-abcd"; empty if none.
std::string UidFromSegment(std::string_view seg) {
  if (seg.size() > 6 && seg.substr(seg.size() - 6) == ".slice") seg.remove_suffix(6);
  size_t pos = seg.rfind("pod");
  if (pos == std::string_view::npos) return {};
  // "pod" must start the segment or follow a '-' (kubepods-besteffort-pod<uid>).
  if (pos != 0 && seg[pos - 1] != '-') return {};
  std::string_view uid = seg.substr(pos + 3);
  if (uid.size() < 32) return {};
  for (char c : uid)
    if (!IsUidChar(c)) return {};
  std::string out(uid);
  for (char& c : out)
    if (c == '_') c = '-';
  return out;
}

// "cri-containerd-<id>.scope", "docker-<id>.scope", "crio-<id>.scope", or a bare 64-hex ID.
std::string ContainerFromSegment(std::string_view seg) {
  if (seg.size() > 6 && seg.substr(seg.size() - 6) == ".scope") {
    seg.remove_suffix(6);
    size_t dash = seg.rfind('-');
    if (dash == std::string_view::npos) return {};
    seg = seg.substr(dash + 1);
  }
  if (seg.size() < 12) return {};
  for (char c : seg)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return {};
  return std::string(seg);
}

std::optional<PodCgroup> ParsePath(std::string_view path) {
  std::vector<std::string_view> segs;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    if (slash > start) segs.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  bool in_kubepods = false;
  PodCgroup out;
  out.qos = "guaranteed";
  for (size_t i = 0; i < segs.size(); ++i) {
    std::string_view s = segs[i];
    if (s.find("kubepods") != std::string_view::npos) in_kubepods = true;
    if (!in_kubepods) continue;
    if (s == "burstable" || s.find("kubepods-burstable") == 0) out.qos = "burstable";
    if (s == "besteffort" || s.find("kubepods-besteffort") == 0) out.qos = "besteffort";
    std::string uid = UidFromSegment(s);
    if (uid.empty()) continue;
    out.pod_uid = uid;
    if (i + 1 < segs.size()) out.container_id = ContainerFromSegment(segs[i + 1]);
    return out;
  }
  return std::nullopt;
}

}  // namespace

std::optional<PodCgroup> ParsePodCgroup(std::string_view proc_cgroup) {
  // Prefer the v2 line ("0::<path>"), then any v1 controller line that names a pod.
  std::optional<PodCgroup> found;
  size_t start = 0;
  while (start < proc_cgroup.size()) {
    size_t nl = proc_cgroup.find('\n', start);
    if (nl == std::string_view::npos) nl = proc_cgroup.size();
    std::string_view line = proc_cgroup.substr(start, nl - start);
    start = nl + 1;
    size_t c1 = line.find(':');
    if (c1 == std::string_view::npos) continue;
    size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    auto parsed = ParsePath(line.substr(c2 + 1));
    if (!parsed) continue;
    if (!found || (parsed->container_id.size() > found->container_id.size())) found = parsed;
  }
  return found;
}

std::optional<PodCgroup> PodCgroupOfPid(int pid, const std::string& proc_root) {
  std::ifstream in(proc_root + "/" + std::to_string(pid) + "/cgroup");
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ParsePodCgroup(ss.str());
}

void PodDirectory::AddPod(const std::string& uid, const std::string& namespace_name,
                          const std::string& name) {
  Entry& e = pods_[uid];
  e.namespace_name = namespace_name;
  e.name = name;
}

void PodDirectory::AddContainer(const std::string& uid, const std::string& container_id,
                                const std::string& container_name) {
  std::string id = container_id;
  if (size_t p = id.find("://"); p != std::string::npos) id = id.substr(p + 3);
  pods_[uid].containers[id] = container_name;
}

void PodDirectory::SetAnnotations(const std::string& uid, PodAnnotations annotations) {
  pods_[uid].annotations = std::move(annotations);
}

PodAnnotations PodDirectory::Annotations(const std::string& namespace_name, const std::string& name) const {
  for (const auto& [uid, e] : pods_) {
    if (e.namespace_name == namespace_name && e.name == name) return e.annotations;
  }
  return {};
}

std::optional<PodName> PodDirectory::Lookup(const PodCgroup& cg) const {
  auto it = pods_.find(cg.pod_uid);
  if (it == pods_.end()) return std::nullopt;
  PodName out{it->second.namespace_name, it->second.name, {}};
  if (!cg.container_id.empty()) {
    auto c = it->second.containers.find(cg.container_id);
    if (c != it->second.containers.end()) out.container = c->second;
  }
  return out;
}

}  // namespace gslice::k8s
