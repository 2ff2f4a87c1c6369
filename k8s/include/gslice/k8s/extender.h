// The scheduler extender: kube-scheduler calls filter and prioritize for every pod that asks
// for a gslice.io resource and delegates the bind to it. The wire format is kube-scheduler's
// extender API (k8s.io/kube-scheduler/extender/v1): ExtenderArgs in, ExtenderFilterResult /
// HostPriorityList out for filter / prioritize; ExtenderBindingArgs in, ExtenderBindingResult
// out for bind. Field names are matched case-insensitively, as Go's decoder does.
//
// No double booking: every bind re-runs the placement against the current reservations
// under one mutex and books the result before any API call; a failed API call releases it.
// Restart-safe: the truth is the API server (the gslice.io/assignment annotation of each live
// pod), reloaded at start and every resync period.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "gslice/k8s/kube_client.h"
#include "gslice/k8s/placement.h"

namespace httplib {
class Server;
}

namespace gslice::k8s {

// Per-namespace ceilings; a negative value means no limit.
struct NamespaceQuota {
  int64_t gpus = -1;             // number of GPU slices
  int64_t memory_mib = -1;       // sum of gslice.io/gpu-memory over slices
  int64_t compute_percent = -1;  // sum of gslice.io/gpu-compute over slices
};

// Parses {"team-a": {"gpus": 8, "memoryMiB": 81920, "computePercent": 400}, ...}.
std::optional<std::map<std::string, NamespaceQuota>> ParseQuotas(const std::string& text,
                                                                 std::string* error);

struct ExtenderOptions {
  PlacementConfig placement;
  std::map<std::string, NamespaceQuota> quotas;
};

class Extender {
 public:
  // `kube` may be null (no API server: bind only books; used by tests and the benchmark).
  Extender(ExtenderOptions options, const KubeClient* kube);

  nlohmann::json Filter(const nlohmann::json& args);
  nlohmann::json Prioritize(const nlohmann::json& args);
  nlohmann::json Bind(const nlohmann::json& args);

  // Reloads nodes and live pods from the API server. Reservations booked after the pod list
  // was requested are kept (their annotations may not be in it yet).
  bool Resync(std::string* error);

  // Routes POST /filter, /prioritize, /bind and GET /healthz, /state on `server`.
  void Route(httplib::Server& server);

  // For tests, the benchmark and /state.
  nlohmann::json StateJson() const;
  FragmentStats Fragmentation() const;
  size_t reservation_count() const;

 private:
  std::optional<PodRequest> PodFromArgs(const nlohmann::json& args, std::string* error) const;
  void LearnNodes(const nlohmann::json& args);
  // REQUIRES: mu_ held. Empty when within quota, else why not. `placed`: the exact
  // assignment (at bind); null: the request (at filter).
  std::string QuotaProblem(const PodRequest& pod, const Assignment* placed) const;
  Policy PolicyFor(const PodRequest& pod) const;
  // REQUIRES: mu_ held. A remote pod's place: the best fit among the nodes that serve remote
  // GPUs (kAnnotationNodeRemoteAddress), its assignment naming that node and its address;
  // nullopt with *why when none has room.
  std::optional<Assignment> RemotePlace(const PodRequest& pod, std::string* why) const;

  ExtenderOptions options_;
  const KubeClient* kube_;
  mutable std::mutex mu_;
  ClusterState state_;
  // Nodes whose gslice-remoted serves remote GPUs, and where (kAnnotationNodeRemoteAddress).
  std::map<std::string, std::string> remote_addresses_;
  // When each bind here completed (steady clock; max() while its API calls are in flight),
  // so that Resync keeps bookings its pod list may predate.
  std::map<std::string, std::chrono::steady_clock::time_point> booked_at_;
  // Pods seen by filter, by key, so bind need not fetch them again.
  std::map<std::string, PodRequest> recent_pods_;
};

// The key a pod's reservation is stored under: its UID, else namespace/name.
std::string PodKey(const std::string& uid, const std::string& ns, const std::string& name);

}  // namespace gslice::k8s
