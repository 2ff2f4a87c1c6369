// Names the Kubernetes pod of each GPU process: /proc/<pid>/cgroup gives the pod's UID and
// the container's ID (k8s/pod/include/gslice/k8s/pod_identity.h), the API server's list of the
// pods on this node gives their names. gsliced needs the host's PID namespace to read the
// cgroups of other pods' processes (hostPID: true in its DaemonSet).
//
// The list is reloaded when a process's pod or container is not in it (at most every
// `retry_ms`) and every `refresh_ms` while processes run in pods. An API server that does
// not answer costs labels, never a sample: loads run on a thread of their own, the last
// list stays in use, and the failure is logged once until a load succeeds again.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config.h"
#include "gslice/k8s/pod_identity.h"
#include "model.h"

namespace gslice {

class PodResolver {
 public:
  struct Options {
    std::string node;  // for messages
    std::string proc_root = "/proc";
    int64_t retry_ms = 10000;
    int64_t refresh_ms = 60000;
    // Load on the caller's thread (tests) instead of a thread of the resolver's own.
    bool load_inline = false;
  };
  // Fills *dir with the pods of the node; false with *error when they cannot be read.
  using Loader = std::function<bool(k8s::PodDirectory* dir, std::string* error)>;
  // A steady clock in milliseconds; tests pass their own.
  using Clock = std::function<int64_t()>;

  PodResolver(Options options, Loader loader, Clock clock = {});
  ~PodResolver();
  PodResolver(const PodResolver&) = delete;
  PodResolver& operator=(const PodResolver&) = delete;

  // Sets pod, pod_namespace and container of each process whose pod is known; clears
  // them on the others. Never waits for the API server (unless load_inline).
  void Label(std::vector<ProcessUsage>* processes);

  // The annotations of pod namespace_name/name as the last load saw them (none set when it
  // has none or is not known). Never waits for the API server.
  k8s::PodAnnotations Annotations(const std::string& namespace_name, const std::string& name) const;

  // Loads attempted so far (for tests).
  int loads() const;

 private:
  void Load();  // REQUIRES: mu_ not held
  void Worker();

  const Options options_;
  const Loader loader_;
  const Clock clock_;

  mutable std::mutex mu_;  // guards everything below
  k8s::PodDirectory directory_;
  bool loaded_ = false;         // directory_ holds a successful load
  bool failing_ = false;        // the last load failed (logged once)
  bool attempted_ = false;
  int64_t last_attempt_ms_ = 0;  // when a load was last asked for
  int loads_ = 0;
  bool load_wanted_ = false;
  bool loading_ = false;
  bool stopping_ = false;
  std::condition_variable wake_;
  std::thread worker_;
};

// The resolver for gsliced's configuration, or nullptr when it is off (no node name known:
// neither kubernetes.node nor $NODE_NAME). *note says what was set up or why it is off.
std::unique_ptr<PodResolver> MakePodResolver(const DaemonConfig& config, std::string* note);

}  // namespace gslice
