#include "gslice/k8s/placement.h"

#include <algorithm>
#include <tuple>

namespace gslice::k8s {

namespace {

// The numbers of one GPU that placement works on (a cheap copy: no strings).
struct Slot {
  int64_t total = 0;
  int64_t used = 0;
  int guaranteed_compute = 0;
  int slices = 0;
  int index = 0;
  bool healthy = true;
  int64_t free_mib() const { return total - used; }
};

Slot SlotOf(const GpuUsage& g) {
  return Slot{g.info.memory_mib, g.used_mib, g.guaranteed_compute, g.slices, g.info.index, g.info.healthy};
}

int64_t NeedMib(const ContainerRequest& c, const Slot& g) {
  return c.memory_mib > 0 ? c.memory_mib : g.total;  // 0: the whole GPU
}

// Null when one more slice of `c` fits on `g`, else what is short.
const char* WhyNotFits(const ContainerRequest& c, SliceClass cls, const Slot& g, int slices_per_gpu) {
  if (!g.healthy) return "unhealthy";
  if (g.slices >= slices_per_gpu) return "no slice slot left";
  if (NeedMib(c, g) > g.free_mib()) return "not enough free memory";
  if (cls == SliceClass::kGuaranteed && g.guaranteed_compute + c.compute_percent > 100)
    return "not enough guaranteed compute";
  return nullptr;
}

bool IsFragment(const Slot& g, int slices_per_gpu, int64_t min_useful) {
  int64_t free = g.free_mib();
  if (free <= 0) return false;
  return free < min_useful || g.slices >= slices_per_gpu;
}

}  // namespace

void ClusterState::SetNode(const std::string& node, const std::vector<GpuInfo>& gpus,
                           int slices_per_gpu) {
  NodeGpus& n = nodes_[node];
  n.slices_per_gpu = slices_per_gpu > 0 ? slices_per_gpu : config_.slices_per_gpu;
  n.gpus.clear();
  for (const auto& g : gpus) n.gpus.push_back(GpuUsage{g, 0, 0, 0});
  std::sort(n.gpus.begin(), n.gpus.end(),
            [](const GpuUsage& a, const GpuUsage& b) { return a.info.index < b.info.index; });
  RecomputeNode(node);
}

void ClusterState::RemoveNode(const std::string& node) { nodes_.erase(node); }

std::vector<std::string> ClusterState::NodeNames() const {
  std::vector<std::string> names;
  for (const auto& [name, n] : nodes_) names.push_back(name);
  return names;
}

const NodeGpus* ClusterState::FindNode(const std::string& node) const {
  auto it = nodes_.find(node);
  return it == nodes_.end() ? nullptr : &it->second;
}

void ClusterState::RecomputeNode(const std::string& node) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  for (auto& g : it->second.gpus) {
    g.used_mib = 0;
    g.guaranteed_compute = 0;
    g.slices = 0;
  }
  for (const auto& [key, r] : reservations_) {
    if (r.assignment.node == node) Apply(r.assignment, +1);
  }
}

void ClusterState::Apply(const Assignment& a, int sign) {
  auto it = nodes_.find(a.node);
  if (it == nodes_.end()) return;
  for (const auto& c : a.containers) {
    for (const auto& grant : c.gpus) {
      for (auto& g : it->second.gpus) {
        if (g.info.uuid != grant.uuid) continue;
        g.used_mib += sign * grant.memory_mib;
        if (a.slice_class == SliceClass::kGuaranteed) g.guaranteed_compute += sign * grant.compute_percent;
        g.slices += sign;
      }
    }
  }
}

std::optional<NodeFit> ClusterState::Fit(const PodRequest& pod, const std::string& node,
                                         Policy policy, std::string* why) const {
  const NodeGpus* n = FindNode(node);
  if (!n) {
    *why = "no gslice GPUs on this node (is the gslice device plugin running?)";
    return std::nullopt;
  }
  if (n->gpus.empty()) {
    *why = "node has no GPUs";
    return std::nullopt;
  }
  std::vector<Slot> scratch;  // small: a node has a handful of GPUs
  scratch.reserve(n->gpus.size());
  for (const auto& g : n->gpus) scratch.push_back(SlotOf(g));
  const int64_t min_useful = config_.min_useful_mib;
  const int spg = n->slices_per_gpu;
  int fragments_before = 0;
  for (const auto& g : scratch) fragments_before += IsFragment(g, spg, min_useful) && g.healthy;
  int exact_fits = 0;

  NodeFit fit;
  fit.assignment.node = node;
  fit.assignment.slice_class = pod.slice_class;
  for (const auto& c : pod.containers) {
    ContainerAssignment ca;
    ca.name = c.name;
    std::vector<bool> taken(scratch.size(), false);
    for (int k = 0; k < c.gpus; ++k) {
      // Lower key is better. Binpack: avoid creating a fragment, then the tightest fit (best
      // fit). Spread: avoid a fragment, then the emptiest GPU (fewest slices on a tie).
      std::optional<size_t> best;
      std::tuple<int, int64_t, int, int> best_key{};
      const char* last_why = "no GPU";
      for (size_t i = 0; i < scratch.size(); ++i) {
        if (taken[i]) continue;
        if (const char* w = WhyNotFits(c, pod.slice_class, scratch[i], spg)) {
          last_why = w;
          continue;
        }
        int64_t leftover = scratch[i].free_mib() - NeedMib(c, scratch[i]);
        bool last_slot = scratch[i].slices + 1 >= spg;
        bool frag = leftover > 0 && (leftover < min_useful || last_slot);
        std::tuple<int, int64_t, int, int> key =
            policy == Policy::kBinpack
                ? std::make_tuple(frag ? 1 : 0, leftover, -scratch[i].slices, scratch[i].index)
                : std::make_tuple(frag ? 1 : 0, -leftover, scratch[i].slices, scratch[i].index);
        if (!best || key < best_key) {
          best = i;
          best_key = key;
        }
      }
      if (!best) {
        *why = "container " + c.name + ": needs " + std::to_string(c.gpus) + " GPU(s) with " +
               (c.memory_mib ? std::to_string(c.memory_mib) + " MiB" : std::string("a whole GPU")) +
               (c.compute_percent ? " and " + std::to_string(c.compute_percent) + "% compute" : "") +
               "; found " + std::to_string(k) + " (" + std::string(last_why) + ")";
        return std::nullopt;
      }
      Slot& g = scratch[*best];
      taken[*best] = true;
      GpuGrant grant{n->gpus[*best].info.uuid, g.index, NeedMib(c, g), c.compute_percent};
      if (g.free_mib() == grant.memory_mib) ++exact_fits;
      g.used += grant.memory_mib;
      if (pod.slice_class == SliceClass::kGuaranteed) g.guaranteed_compute += c.compute_percent;
      g.slices += 1;
      ca.gpus.push_back(std::move(grant));
    }
    fit.assignment.containers.push_back(std::move(ca));
  }

  // Node score: how full the node is after placement (binpack wants full, spread empty),
  // minus a penalty for each unusable fragment the placement creates.
  int64_t total = 0, used = 0;
  int fragments_after = 0;
  for (const auto& g : scratch) {
    if (!g.healthy) continue;
    total += g.total;
    used += g.used;
    fragments_after += IsFragment(g, spg, min_useful);
  }
  double util = total ? static_cast<double>(used) / static_cast<double>(total) : 1.0;
  double score = policy == Policy::kBinpack ? 20 + 70 * util + (exact_fits ? 10 : 0)
                                            : 20 + 80 * (1 - util);
  score -= 20.0 * std::max(0, fragments_after - fragments_before);
  fit.score = static_cast<int>(std::clamp(score, 0.0, 100.0));
  return fit;
}

bool ClusterState::Reserve(const std::string& key, const std::string& namespace_name,
                           const Assignment& a, bool trusted, std::string* why) {
  if (reservations_.count(key)) {
    *why = "already reserved";
    return false;
  }
  if (!trusted) {
    const NodeGpus* n = FindNode(a.node);
    if (!n) {
      *why = "node " + a.node + " has no gslice GPUs";
      return false;
    }
    // Check the whole assignment against what is free now, counting grants on the same GPU.
    std::vector<Slot> scratch;
    for (const auto& g : n->gpus) scratch.push_back(SlotOf(g));
    for (const auto& c : a.containers) {
      for (const auto& grant : c.gpus) {
        size_t i = 0;
        while (i < n->gpus.size() && n->gpus[i].info.uuid != grant.uuid) ++i;
        if (i == n->gpus.size()) {
          *why = "GPU " + grant.uuid + " is not on node " + a.node;
          return false;
        }
        Slot* g = &scratch[i];
        ContainerRequest probe{c.name, 1, grant.memory_mib, grant.compute_percent};
        if (const char* w = WhyNotFits(probe, a.slice_class, *g, n->slices_per_gpu)) {
          *why = "GPU " + grant.uuid + ": " + w;
          return false;
        }
        g->used += grant.memory_mib;
        if (a.slice_class == SliceClass::kGuaranteed) g->guaranteed_compute += grant.compute_percent;
        g->slices += 1;
      }
    }
  }
  reservations_[key] = Reservation{namespace_name, a};
  Apply(a, +1);
  return true;
}

bool ClusterState::Release(const std::string& key) {
  auto it = reservations_.find(key);
  if (it == reservations_.end()) return false;
  Apply(it->second.assignment, -1);
  reservations_.erase(it);
  return true;
}

const Assignment* ClusterState::FindReservation(const std::string& key) const {
  auto it = reservations_.find(key);
  return it == reservations_.end() ? nullptr : &it->second.assignment;
}

std::vector<std::string> ClusterState::ReservationKeys() const {
  std::vector<std::string> keys;
  keys.reserve(reservations_.size());
  for (const auto& [k, r] : reservations_) keys.push_back(k);
  return keys;
}

NamespaceUsage ClusterState::UsageOf(const std::string& namespace_name) const {
  NamespaceUsage u;
  for (const auto& [k, r] : reservations_) {
    if (r.namespace_name != namespace_name) continue;
    for (const auto& c : r.assignment.containers) {
      for (const auto& g : c.gpus) {
        u.gpus += 1;
        u.memory_mib += g.memory_mib;
        u.compute_percent += g.compute_percent;
      }
    }
  }
  return u;
}

FragmentStats ClusterState::Fragmentation() const {
  FragmentStats s;
  for (const auto& [name, n] : nodes_) {
    for (const auto& g : n.gpus) {
      if (!g.info.healthy) continue;
      s.gpus += 1;
      s.gpus_in_use += g.slices > 0;
      s.total_mib += g.info.memory_mib;
      int64_t free = std::max<int64_t>(0, g.free_mib());
      s.free_mib += free;
      if (IsFragment(SlotOf(g), n.slices_per_gpu, config_.min_useful_mib)) s.unusable_mib += free;
    }
  }
  return s;
}

}  // namespace gslice::k8s
