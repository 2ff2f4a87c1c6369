// Which Kubernetes pod a process belongs to, read from its cgroup path. Works for cgroup v1
// and v2 and for both kubelet cgroup drivers:
//   cgroupfs: /kubepods/burstable/pod<uid>/<container-id>
//   systemd:  /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/
//             cri-containerd-<container-id>.scope   (also docker-, crio-, cri-o-)
// The node daemon uses it to label per-process metrics with pod and namespace: the cgroup
// gives the pod UID and container ID, a PodDirectory (filled from the API server's pod list
// for this node, pod_directory_loader.h) turns them into names and annotations.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "gslice/k8s/pod_annotations.h"

namespace gslice::k8s {

struct PodCgroup {
  std::string pod_uid;       // with dashes, as in metadata.uid
  std::string container_id;  // bare hex ID; empty for the pod's own cgroup (pause, etc.)
  std::string qos;           // guaranteed | burstable | besteffort
};

// Parses the contents of /proc/<pid>/cgroup (all lines); nullopt when the process is not in
// a pod (a host process, or a cgroup namespace that hides the path).
std::optional<PodCgroup> ParsePodCgroup(std::string_view proc_cgroup);

// Reads <proc_root>/<pid>/cgroup. proc_root is "/proc" except in tests.
std::optional<PodCgroup> PodCgroupOfPid(int pid, const std::string& proc_root = "/proc");

struct PodName {
  std::string namespace_name;
  std::string name;
  std::string container;  // empty when unknown
};

// UID -> names of the pods on this node, with their containers' IDs.
class PodDirectory {
 public:
  void AddPod(const std::string& uid, const std::string& namespace_name, const std::string& name);
  // container_id may carry a runtime prefix ("containerd://abc"): it is stripped.
  void AddContainer(const std::string& uid, const std::string& container_id,
                    const std::string& container_name);
  std::optional<PodName> Lookup(const PodCgroup& cg) const;
  // The pod's annotations that the node acts on, as the last load saw them.
  void SetAnnotations(const std::string& uid, PodAnnotations annotations);
  // Those of the pod named namespace_name/name; none set when it has none or is not here.
  PodAnnotations Annotations(const std::string& namespace_name, const std::string& name) const;
  void Clear() { pods_.clear(); }
  size_t size() const { return pods_.size(); }

 private:
  struct Entry {
    std::string namespace_name, name;
    std::map<std::string, std::string> containers;  // id -> name
    PodAnnotations annotations;
  };
  std::map<std::string, Entry> pods_;
};

}  // namespace gslice::k8s
