#include "gslice/k8s/extender.h"

#include <algorithm>
#include <cctype>
#include <set>

#include <httplib.h>

namespace gslice::k8s {

using nlohmann::json;

namespace {

bool EqualsNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

// obj[name], matching the key case-insensitively (Go's encoding/json does); null if absent.
const json* Field(const json& obj, std::string_view name) {
  if (!obj.is_object()) return nullptr;
  if (auto it = obj.find(std::string(name)); it != obj.end()) return &*it;
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (EqualsNoCase(it.key(), name)) return &it.value();
  return nullptr;
}

std::string StringField(const json& obj, std::string_view name) {
  const json* v = Field(obj, name);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

std::string NodeName(const json& node) {
  if (const json* meta = Field(node, "metadata")) return StringField(*meta, "name");
  return {};
}

std::string Annotation(const json& obj, std::string_view key) {
  const json* meta = Field(obj, "metadata");
  if (!meta) return {};
  const json* ann = Field(*meta, "annotations");
  if (!ann || !ann->is_object()) return {};
  auto it = ann->find(std::string(key));
  return it != ann->end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The candidate node names of ExtenderArgs, from NodeNames or Nodes.items.
std::vector<std::string> CandidateNames(const json& args) {
  std::vector<std::string> names;
  if (const json* nn = Field(args, "NodeNames"); nn && nn->is_array()) {
    for (const auto& n : *nn)
      if (n.is_string()) names.push_back(n.get<std::string>());
  }
  if (const json* nodes = Field(args, "Nodes")) {
    if (const json* items = Field(*nodes, "items"); items && items->is_array())
      for (const auto& n : *items) names.push_back(NodeName(n));
  }
  return names;
}

int SlicesPerGpu(const json& node) {
  std::string v = Annotation(node, kAnnotationNodeSlicesPerGpu);
  ParsedQuantity q = ParseQuantity(v);
  return v.empty() || !q.error.empty() ? 0 : static_cast<int>(q.value);
}

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string PodKey(const std::string& uid, const std::string& ns, const std::string& name) {
  return uid.empty() ? ns + "/" + name : uid;
}

std::optional<std::map<std::string, NamespaceQuota>> ParseQuotas(const std::string& text,
                                                                 std::string* error) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    *error = "quota file: expected a JSON object {\"<namespace>\": {\"gpus\": N, \"memoryMiB\": N, \"computePercent\": N}}";
    return std::nullopt;
  }
  std::map<std::string, NamespaceQuota> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it->is_object()) {
      *error = "quota file: namespace " + it.key() + ": expected an object";
      return std::nullopt;
    }
    NamespaceQuota q;
    for (auto f = it->begin(); f != it->end(); ++f) {
      if (!f->is_number_integer() || f->get<int64_t>() < 0) {
        *error = "quota file: " + it.key() + "." + f.key() + ": expected a non-negative integer";
        return std::nullopt;
      }
      int64_t v = f->get<int64_t>();
      if (f.key() == "gpus") q.gpus = v;
      else if (f.key() == "memoryMiB") q.memory_mib = v;
      else if (f.key() == "computePercent") q.compute_percent = v;
      else {
        *error = "quota file: " + it.key() + ": unknown field '" + f.key() +
                 "' (known: gpus, memoryMiB, computePercent)";
        return std::nullopt;
      }
    }
    out[it.key()] = q;
  }
  return out;
}

Extender::Extender(ExtenderOptions options, const KubeClient* kube)
    : options_(std::move(options)), kube_(kube), state_(options_.placement) {}

std::optional<PodRequest> Extender::PodFromArgs(const json& args, std::string* error) const {
  const json* pod = Field(args, "Pod");
  if (!pod || !pod->is_object()) {
    *error = "ExtenderArgs without a Pod";
    return std::nullopt;
  }
  return ParsePodRequest(*pod, error);
}

void Extender::LearnNodes(const json& args) {
  const json* nodes = Field(args, "Nodes");
  if (!nodes) return;
  const json* items = Field(*nodes, "items");
  if (!items || !items->is_array()) return;
  for (const auto& n : *items) {
    std::string inv = Annotation(n, kAnnotationNodeGpus);
    if (inv.empty()) continue;
    std::string err;
    auto gpus = DecodeGpuInventory(inv, &err);
    if (!gpus) continue;
    state_.SetNode(NodeName(n), *gpus, SlicesPerGpu(n));
    if (std::string remote = Annotation(n, kAnnotationNodeRemoteAddress); !remote.empty()) {
      remote_addresses_[NodeName(n)] = remote;
    }
  }
}

std::optional<Assignment> Extender::RemotePlace(const PodRequest& pod, std::string* why) const {
  std::optional<NodeFit> best;
  std::string best_node, reasons;
  for (const auto& [node, address] : remote_addresses_) {
    std::string no;
    auto fit = state_.Fit(pod, node, PolicyFor(pod), &no);
    if (!fit) {
      if (reasons.size() < 512) reasons += (reasons.empty() ? "" : "; ") + node + ": " + no;
      continue;
    }
    if (!best || fit->score > best->score) {
      best = fit;
      best_node = node;
    }
  }
  if (!best) {
    *why = remote_addresses_.empty()
               ? "no node serves remote GPUs (a GPU node needs gslice-remoted and the " +
                     std::string(kAnnotationNodeRemoteAddress) + " annotation: docs/kubernetes.md)"
               : "no node serving remote GPUs has room: " + reasons;
    return std::nullopt;
  }
  Assignment a = best->assignment;
  a.node = best_node;
  a.remote_address = remote_addresses_.at(best_node);
  return a;
}

Policy Extender::PolicyFor(const PodRequest& pod) const {
  return pod.policy.value_or(options_.placement.policy);
}

std::string Extender::QuotaProblem(const PodRequest& pod, const Assignment* placed) const {
  auto q = options_.quotas.find(pod.namespace_name);
  if (q == options_.quotas.end()) return {};
  NamespaceUsage used = state_.UsageOf(pod.namespace_name);
  NamespaceUsage want;
  if (placed) {  // exact: whole-GPU requests count the memory of the GPU they got
    for (const auto& c : placed->containers)
      for (const auto& g : c.gpus) {
        want.gpus += 1;
        want.memory_mib += g.memory_mib;
        want.compute_percent += g.compute_percent;
      }
  } else {  // before placement a whole-GPU request counts no memory; bind checks exactly
    for (const auto& c : pod.containers) {
      want.gpus += c.gpus;
      want.memory_mib += c.gpus * c.memory_mib;
      want.compute_percent += c.gpus * c.compute_percent;
    }
  }
  auto over = [&](const char* what, int64_t limit, int64_t have, int64_t add) {
    return "namespace " + pod.namespace_name + " quota: " + what + " " + std::to_string(have) +
           " in use + " + std::to_string(add) + " requested > " + std::to_string(limit);
  };
  const NamespaceQuota& lim = q->second;
  if (lim.gpus >= 0 && used.gpus + want.gpus > lim.gpus) return over("gpus", lim.gpus, used.gpus, want.gpus);
  if (lim.memory_mib >= 0 && used.memory_mib + want.memory_mib > lim.memory_mib)
    return over("memoryMiB", lim.memory_mib, used.memory_mib, want.memory_mib);
  if (lim.compute_percent >= 0 && used.compute_percent + want.compute_percent > lim.compute_percent)
    return over("computePercent", lim.compute_percent, used.compute_percent, want.compute_percent);
  return {};
}

json Extender::Filter(const json& args) {
  json result = json::object();
  json failed = json::object();
  json unresolvable = json::object();
  std::vector<std::string> names = CandidateNames(args);
  std::string err;
  auto pod = PodFromArgs(args, &err);
  std::set<std::string> pass;
  if (!pod) {
    for (const auto& n : names) unresolvable[n] = "gslice: " + err;
  } else if (!pod->wants_gpus()) {
    pass.insert(names.begin(), names.end());
  } else {
    std::lock_guard<std::mutex> lock(mu_);
    LearnNodes(args);
    std::string key = PodKey(pod->uid, pod->namespace_name, pod->name);
    if (recent_pods_.size() > 4096) recent_pods_.clear();
    recent_pods_[key] = *pod;
    std::string quota = QuotaProblem(*pod, nullptr);
    // A remote pod runs on any node (kube-scheduler checks gslice.io/remote-gpu there); its
    // slice goes wherever a GPU node serving remote GPUs has room.
    std::string remote_why;
    const bool remote_fits = pod->remote() && quota.empty() && RemotePlace(*pod, &remote_why).has_value();
    for (const auto& n : names) {
      if (!quota.empty()) {
        unresolvable[n] = "gslice: " + quota;
        continue;
      }
      if (pod->remote()) {
        if (remote_fits) pass.insert(n);
        else failed[n] = "gslice: remote GPU: " + remote_why;
        continue;
      }
      std::string why;
      if (state_.Fit(*pod, n, PolicyFor(*pod), &why)) pass.insert(n);
      else failed[n] = "gslice: " + why;
    }
  }
  if (const json* nn = Field(args, "NodeNames"); nn && nn->is_array()) {
    json out = json::array();
    for (const auto& n : *nn)
      if (n.is_string() && pass.count(n.get<std::string>())) out.push_back(n);
    result["NodeNames"] = out;
  }
  if (const json* nodes = Field(args, "Nodes")) {
    json items = json::array();
    if (const json* in = Field(*nodes, "items"); in && in->is_array())
      for (const auto& n : *in)
        if (pass.count(NodeName(n))) items.push_back(n);
    result["Nodes"] = {{"apiVersion", "v1"}, {"kind", "NodeList"}, {"items", items}};
  }
  result["FailedNodes"] = failed;
  result["FailedAndUnresolvableNodes"] = unresolvable;
  result["Error"] = "";
  return result;
}

json Extender::Prioritize(const json& args) {
  json list = json::array();
  std::vector<std::string> names = CandidateNames(args);
  std::string err;
  auto pod = PodFromArgs(args, &err);
  std::lock_guard<std::mutex> lock(mu_);
  if (pod) LearnNodes(args);
  for (const auto& n : names) {
    int64_t score = 0;
    std::string why;
    if (pod && pod->wants_gpus() && !pod->remote()) {
      if (auto fit = state_.Fit(*pod, n, PolicyFor(*pod), &why)) score = (fit->score + 5) / 10;  // 0..10
    }
    list.push_back({{"Host", n}, {"Score", score}});
  }
  return list;
}

json Extender::Bind(const json& args) {
  std::string name = StringField(args, "PodName");
  std::string ns = StringField(args, "PodNamespace");
  std::string uid = StringField(args, "PodUID");
  std::string node = StringField(args, "Node");
  if (name.empty() || node.empty()) return {{"Error", "ExtenderBindingArgs needs PodName and Node"}};
  if (ns.empty()) ns = "default";
  const std::string key = PodKey(uid, ns, name);

  std::optional<PodRequest> pod;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = recent_pods_.find(key); it != recent_pods_.end()) pod = it->second;
  }
  if (!pod) {
    if (!kube_) return {{"Error", "gslice: pod " + ns + "/" + name + " was never filtered here"}};
    KubeResult got = kube_->GetPod(ns, name);
    if (!got.ok()) return {{"Error", "gslice: " + got.error}};
    std::string err;
    pod = ParsePodRequest(got.body, &err);
    if (!pod) return {{"Error", "gslice: " + err}};
  }

  Assignment assignment;
  {
    std::lock_guard<std::mutex> lock(mu_);
    state_.Release(key);  // a retried bind replaces its earlier booking
    booked_at_.erase(key);
    if (pod->wants_gpus()) {
      std::string why;
      std::optional<Assignment> placed;
      if (pod->remote()) {
        // The pod runs on `node`; its slice on the GPU node chosen here, recorded in the
        // assignment (node, remoteAddress) for the device plugin of the pod's node.
        placed = RemotePlace(*pod, &why);
        if (!placed) return {{"Error", "gslice: pod " + ns + "/" + name + ": remote GPU: " + why}};
      } else {
        auto fit = state_.Fit(*pod, node, PolicyFor(*pod), &why);
        if (!fit) return {{"Error", "gslice: pod " + ns + "/" + name + " no longer fits on " + node + ": " + why}};
        placed = fit->assignment;
      }
      std::string quota = QuotaProblem(*pod, &*placed);
      if (!quota.empty()) return {{"Error", "gslice: " + quota}};
      if (!state_.Reserve(key, ns, *placed, false, &why))
        return {{"Error", "gslice: " + why}};
      // In flight until the binding is written: no resync may drop it meanwhile.
      booked_at_[key] = std::chrono::steady_clock::time_point::max();
      assignment = *placed;
    }
    recent_pods_.erase(key);
  }
  if (!kube_) return {{"Error", ""}};

  auto undo = [&](const std::string& error) {
    std::lock_guard<std::mutex> lock(mu_);
    state_.Release(key);
    booked_at_.erase(key);
    return json{{"Error", "gslice: " + error}};
  };
  if (pod->wants_gpus()) {
    KubeResult patched = kube_->PatchPodAnnotations(
        ns, name,
        {{std::string(kAnnotationAssignment), EncodeAssignment(assignment)},
         {std::string(kAnnotationBindPhase), "allocating"},
         {std::string(kAnnotationBindTime), std::to_string(NowNanos())},
         {std::string(kAnnotationAllocated), "0"}});
    if (!patched.ok()) return undo(patched.error);
  }
  KubeResult bound = kube_->BindPod(ns, name, uid, node);
  if (!bound.ok()) return undo(bound.error);
  {
    // A resync whose pod list was read before this moment may not show the binding yet.
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = booked_at_.find(key); it != booked_at_.end()) it->second = std::chrono::steady_clock::now();
  }
  return {{"Error", ""}};
}

bool Extender::Resync(std::string* error) {
  if (!kube_) return true;
  auto started = std::chrono::steady_clock::now();
  KubeResult nodes = kube_->ListNodes();
  if (!nodes.ok()) {
    *error = nodes.error;
    return false;
  }
  KubeResult pods = kube_->ListPods();
  if (!pods.ok()) {
    *error = pods.error;
    return false;
  }
  struct Live {
    std::string ns;
    Assignment assignment;
  };
  std::map<std::string, Live> live;
  if (const json* items = Field(pods.body, "items"); items && items->is_array()) {
    for (const auto& p : *items) {
      std::string text = Annotation(p, kAnnotationAssignment);
      if (text.empty()) continue;
      const json* status = Field(p, "status");
      std::string phase = status ? StringField(*status, "phase") : "";
      if (phase == "Succeeded" || phase == "Failed") continue;  // its GPUs are free again
      const json* spec = Field(p, "spec");
      if (!spec || StringField(*spec, "nodeName").empty()) continue;  // bind never completed
      std::string err;
      auto a = DecodeAssignment(text, &err);
      if (!a) continue;
      const json* meta = Field(p, "metadata");
      std::string ns = meta ? StringField(*meta, "namespace") : "";
      std::string nm = meta ? StringField(*meta, "name") : "";
      live[PodKey(meta ? StringField(*meta, "uid") : "", ns, nm)] = Live{ns, *a};
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> seen;
  remote_addresses_.clear();
  if (const json* items = Field(nodes.body, "items"); items && items->is_array()) {
    for (const auto& n : *items) {
      std::string inv = Annotation(n, kAnnotationNodeGpus);
      if (inv.empty()) continue;
      std::string err;
      auto gpus = DecodeGpuInventory(inv, &err);
      if (!gpus) continue;
      std::string name = NodeName(n);
      state_.SetNode(name, *gpus, SlicesPerGpu(n));
      seen.insert(name);
      if (std::string remote = Annotation(n, kAnnotationNodeRemoteAddress); !remote.empty()) {
        remote_addresses_[name] = remote;
      }
    }
  }
  // Nodes that left the cluster (or lost their inventory) take no more pods.
  for (const auto& name : state_.NodeNames())
    if (!seen.count(name)) state_.RemoveNode(name);
  for (const auto& key : state_.ReservationKeys()) {
    auto it = live.find(key);
    auto booked = booked_at_.find(key);
    bool fresh = booked != booked_at_.end() && booked->second >= started;
    if (it == live.end()) {
      if (!fresh) {
        state_.Release(key);
        booked_at_.erase(key);
      }
      continue;
    }
    const Assignment* mine = state_.FindReservation(key);
    if (mine && EncodeAssignment(*mine) != EncodeAssignment(it->second.assignment) && !fresh) {
      state_.Release(key);
      booked_at_.erase(key);
    }
  }
  for (const auto& [key, l] : live) {
    if (state_.IsReserved(key)) continue;
    std::string why;
    state_.Reserve(key, l.ns, l.assignment, true, &why);
  }
  return true;
}

json Extender::StateJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  json j;
  FragmentStats f = state_.Fragmentation();
  j["policy"] = ToString(options_.placement.policy);
  j["nodes"] = state_.node_count();
  j["reservations"] = state_.reservation_count();
  j["gpus"] = f.gpus;
  j["gpusInUse"] = f.gpus_in_use;
  j["totalMiB"] = f.total_mib;
  j["freeMiB"] = f.free_mib;
  j["unusableMiB"] = f.unusable_mib;
  json pods = json::object();
  for (const auto& key : state_.ReservationKeys())
    pods[key] = json::parse(EncodeAssignment(*state_.FindReservation(key)));
  j["pods"] = pods;
  return j;
}

FragmentStats Extender::Fragmentation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.Fragmentation();
}

size_t Extender::reservation_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_.reservation_count();
}

void Extender::Route(httplib::Server& server) {
  auto handle = [](const httplib::Request& req, httplib::Response& res,
                   const std::function<json(const json&)>& fn) {
    json args = json::parse(req.body, nullptr, false);
    if (args.is_discarded() || !args.is_object()) {
      res.status = 400;
      res.set_content(json{{"Error", "gslice: request body is not a JSON object"}}.dump(), "application/json");
      return;
    }
    res.set_content(fn(args).dump(), "application/json");
  };
  server.Post("/filter", [this, handle](const httplib::Request& q, httplib::Response& r) {
    handle(q, r, [this](const json& a) { return Filter(a); });
  });
  server.Post("/prioritize", [this, handle](const httplib::Request& q, httplib::Response& r) {
    handle(q, r, [this](const json& a) { return Prioritize(a); });
  });
  server.Post("/bind", [this, handle](const httplib::Request& q, httplib::Response& r) {
    handle(q, r, [this](const json& a) { return Bind(a); });
  });
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& r) { r.set_content("ok\n", "text/plain"); });
  server.Get("/state", [this](const httplib::Request&, httplib::Response& r) {
    r.set_content(StateJson().dump(2), "application/json");
  });
}

}  // namespace gslice::k8s
