// Where slices go: the cluster's GPUs, what is reserved on each, and the choice of node and
// GPU for a pod under the binpack or spread policy. Pure logic (no I/O): the scheduler
// extender wraps it in HTTP, the benchmark drives it directly.
//
// Accounting: a slice reserves its memory on its GPU whatever its class (a GPU never holds
// more reserved memory than it has); a guaranteed slice also reserves its compute share (the
// guaranteed shares on a GPU sum to at most 100%), an opportunistic one takes what is left.
// A GPU also holds at most `slices_per_gpu` slices (the device plugin advertises that many
// gslice.io/gpu devices per GPU).
//
// Fragmentation: free memory on a GPU is an unusable fragment when it is smaller than
// `min_useful_mib` or when the GPU has no slice slot left. Both policies avoid creating one.
//
// REQUIRES: external synchronization (the extender holds one mutex around it).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gslice/k8s/resources.h"

namespace gslice::k8s {

struct PlacementConfig {
  Policy policy = Policy::kBinpack;
  int64_t min_useful_mib = 2048;
  int slices_per_gpu = 16;  // default when a node does not publish its own
};

struct GpuUsage {
  GpuInfo info;
  int64_t used_mib = 0;
  int guaranteed_compute = 0;  // percent
  int slices = 0;

  int64_t free_mib() const { return info.memory_mib - used_mib; }
};

struct NodeGpus {
  std::vector<GpuUsage> gpus;
  int slices_per_gpu = 16;
};

// A candidate node for a pod: the assignment it would get and how good it is (0..100).
struct NodeFit {
  Assignment assignment;
  int score = 0;
};

struct FragmentStats {
  int64_t total_mib = 0;       // memory of healthy GPUs
  int64_t free_mib = 0;        // not reserved
  int64_t unusable_mib = 0;    // free but in unusable fragments
  int gpus = 0;
  int gpus_in_use = 0;
  double unusable_fraction() const {
    return total_mib ? static_cast<double>(unusable_mib) / static_cast<double>(total_mib) : 0;
  }
};

struct NamespaceUsage {
  int64_t gpus = 0;
  int64_t memory_mib = 0;
  int64_t compute_percent = 0;
};

class ClusterState {
 public:
  explicit ClusterState(PlacementConfig config = {}) : config_(config) {}

  const PlacementConfig& config() const { return config_; }
  void set_config(const PlacementConfig& c) { config_ = c; }

  // Sets (or replaces) a node's GPUs; usage is recomputed from the reservations on it.
  // slices_per_gpu <= 0 means the config's default.
  void SetNode(const std::string& node, const std::vector<GpuInfo>& gpus, int slices_per_gpu = 0);
  void RemoveNode(const std::string& node);
  bool HasNode(const std::string& node) const { return nodes_.count(node) != 0; }
  const NodeGpus* FindNode(const std::string& node) const;
  size_t node_count() const { return nodes_.size(); }
  std::vector<std::string> NodeNames() const;

  // Where on `node` the pod would go under `policy`; nullopt with *why when it does not fit.
  std::optional<NodeFit> Fit(const PodRequest& pod, const std::string& node, Policy policy,
                             std::string* why) const;

  // Books an assignment under `key` (pod UID). Unless `trusted` (state recovered from the API
  // server, which is the truth even if it over-books), every grant is checked against what
  // is free now; on failure nothing is booked. A key can hold one assignment.
  bool Reserve(const std::string& key, const std::string& namespace_name, const Assignment& a,
               bool trusted, std::string* why);
  bool Release(const std::string& key);
  bool IsReserved(const std::string& key) const { return reservations_.count(key) != 0; }
  const Assignment* FindReservation(const std::string& key) const;
  size_t reservation_count() const { return reservations_.size(); }
  std::vector<std::string> ReservationKeys() const;

  NamespaceUsage UsageOf(const std::string& namespace_name) const;
  FragmentStats Fragmentation() const;

 private:
  struct Reservation {
    std::string namespace_name;
    Assignment assignment;
  };
  void Apply(const Assignment& a, int sign);
  void RecomputeNode(const std::string& node);

  PlacementConfig config_;
  std::map<std::string, NodeGpus> nodes_;
  std::map<std::string, Reservation> reservations_;
};

}  // namespace gslice::k8s
