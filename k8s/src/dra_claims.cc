#include "gslice/k8s/dra_claims.h"

#include <algorithm>
#include <map>

#include "gslice/k8s/kube_client.h"
#include "gslice/units.h"

namespace gslice::k8s {

using nlohmann::json;

namespace {

constexpr int64_t kMaxIdleTimeoutS = 366ll * 24 * 3600;  // gsliced's bound

std::string Str(const json& obj, const char* key) {
  if (!obj.is_object()) return {};
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

const json& Field(const json& obj, const char* key) {
  static const json kNull;
  if (!obj.is_object()) return kNull;
  auto it = obj.find(key);
  return it != obj.end() ? *it : kNull;
}

// "90s", "10m", "1h30m" (Go durations of whole s/m/h), or a number of seconds.
bool ParseDurationSeconds(const json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    *out = static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), kMaxIdleTimeoutS + 1));
    return true;
  }
  if (!v.is_string()) return false;
  const std::string s = v.get<std::string>();
  if (s == "0") return *out = 0, true;
  int64_t total = 0;
  size_t i = 0;
  if (s.empty()) return false;
  while (i < s.size()) {
    size_t j = i;
    int64_t n = 0;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9' && n <= kMaxIdleTimeoutS) n = n * 10 + (s[j++] - '0');
    if (j == i || j >= s.size()) return false;
    const char unit = s[j];
    const int64_t scale = unit == 's' ? 1 : unit == 'm' ? 60 : unit == 'h' ? 3600 : 0;
    if (scale == 0) return false;
    total += n * scale;
    if (total > kMaxIdleTimeoutS) total = kMaxIdleTimeoutS + 1;
    i = j + 1;
  }
  *out = total;
  return true;
}

// A quantity of a consumedCapacity or capacity map, as an integer; -1 when absent or bad.
int64_t QuantityOf(const json& map, std::string_view name) {
  const json& v = Field(map, std::string(name).c_str());
  if (v.is_number_unsigned()) return static_cast<int64_t>(v.get<uint64_t>());
  if (!v.is_string()) return -1;
  ParsedQuantity q = ParseQuantity(v.get<std::string>());
  return q.error.empty() && q.value >= 0 ? q.value : -1;
}

}  // namespace

bool ParseClaimParameters(const json& p, ClaimParameters* out, std::string* error) {
  const std::string kind = std::string(kDraParametersApiVersion) + " " + std::string(kDraParametersKind);
  if (!p.is_object()) {
    *error = "parameters: expected an object (" + kind + ")";
    return false;
  }
  ClaimParameters r = *out;
  for (const auto& [key, v] : p.items()) {
    if (key == "apiVersion") {
      if (v != std::string(kDraParametersApiVersion)) {
        *error = "parameters: apiVersion " + v.dump() + ": expected " + std::string(kDraParametersApiVersion);
        return false;
      }
    } else if (key == "kind") {
      if (v != std::string(kDraParametersKind)) {
        *error = "parameters: kind " + v.dump() + ": expected " + std::string(kDraParametersKind);
        return false;
      }
    } else if (key == "class") {
      auto c = v.is_string() ? ParseSliceClass(v.get<std::string>()) : std::nullopt;
      if (!c) {
        *error = "parameters: class " + v.dump() + ": expected \"guaranteed\" or \"opportunistic\"";
        return false;
      }
      r.slice_class = *c;
    } else if (key == "protect") {
      if (v.is_number()) r.protect = v.dump();
      else if (v.is_string()) r.protect = v.get<std::string>();
      else {
        *error = "parameters: protect " + v.dump() + ": expected a fraction of solo speed such as \"0.9\"";
        return false;
      }
    } else if (key == "idleTimeout") {
      int64_t s = 0;
      if (!ParseDurationSeconds(v, &s) || s > kMaxIdleTimeoutS) {
        *error = "parameters: idleTimeout " + v.dump() +
                 ": expected a duration such as \"10m\", \"90s\" or \"2h\" (at most 366 days; \"0\": never)";
        return false;
      }
      r.idle_timeout_s = s;
    } else if (key == "computeCap") {
      ParsedPercent pct = v.is_string() ? ParsePercent(v.get<std::string>()) : ParsedPercent{};
      if (!pct.ok) {
        *error = "parameters: computeCap " + v.dump() + ": expected a percentage such as \"40%\"" +
                 (pct.error ? std::string(" (") + pct.error + ")" : "");
        return false;
      }
      r.compute_cap = v.get<std::string>();
    } else {
      *error = "parameters: unknown field \"" + key +
               "\" (known: apiVersion, kind, class, protect, idleTimeout, computeCap)";
      return false;
    }
  }
  // The protection level is a guaranteed slice's only: checked once the class is known.
  r.protect_permille = 0;
  if (!r.protect.empty() && !ParseProtectAnnotation(r.protect, r.slice_class, &r.protect_permille, error)) {
    *error = "parameters: protect: " + *error;
    return false;
  }
  *out = r;
  return true;
}

std::string DraDeviceName(const GpuInfo& gpu) { return "gpu-" + std::to_string(gpu.index); }

std::optional<std::vector<ClaimSlice>> PlanClaim(const json& claim, const std::string& driver,
                                                 const std::string& node, const std::vector<GpuInfo>& gpus,
                                                 std::string* error) {
  const json& meta = Field(claim, "metadata");
  const std::string ns = Str(meta, "namespace"), name = Str(meta, "name");
  const json& allocation = Field(Field(claim, "status"), "allocation");
  const json& results = Field(Field(allocation, "devices"), "results");
  if (!results.is_array()) {
    *error = "claim " + ns + "/" + name + " is not allocated (no status.allocation.devices.results)";
    return std::nullopt;
  }
  // Parameters per request: class configs, then the claim's, in order (a config without
  // requests applies to every request).
  std::vector<const json*> configs;
  const json& alloc_configs = Field(Field(allocation, "devices"), "config");
  for (const char* source : {"FromClass", "FromClaim"}) {
    if (!alloc_configs.is_array()) break;
    for (const json& c : alloc_configs)
      if (Str(c, "source") == source) configs.push_back(&c);
  }
  std::vector<ClaimSlice> out;
  std::map<std::string, size_t> by_request;
  for (const json& r : results) {
    if (Str(r, "driver") != driver) continue;
    const std::string request = Str(r, "request"), pool = Str(r, "pool"), device = Str(r, "device");
    if (pool != node) {
      *error = "claim " + ns + "/" + name + ": request " + request + " was allocated on pool " + pool +
               ", not on this node (" + node + ")";
      return std::nullopt;
    }
    auto gpu = std::find_if(gpus.begin(), gpus.end(), [&](const GpuInfo& g) { return DraDeviceName(g) == device; });
    if (gpu == gpus.end()) {
      *error = "claim " + ns + "/" + name + ": device " + device + " is not a GPU of this node";
      return std::nullopt;
    }
    if (!gpu->healthy) {
      *error = "claim " + ns + "/" + name + ": GPU " + gpu->uuid + " (" + device + ") is unhealthy";
      return std::nullopt;
    }
    const json& consumed = Field(r, "consumedCapacity");
    int64_t memory = QuantityOf(consumed, kDraCapacityMemory);
    if (memory < 0) memory = gpu->memory_mib << 20;  // the whole device: not shared
    int64_t compute = QuantityOf(consumed, kDraCapacityCompute);
    if (compute < 0) compute = consumed.is_object() ? 0 : 100;
    if (memory < kDraMemoryStepBytes || compute > 100) {
      *error = "claim " + ns + "/" + name + ": request " + request + " consumes " + std::to_string(memory) +
               " bytes and " + std::to_string(compute) + "% of " + device +
               ": a slice needs at least 64 MiB and at most 100% of a GPU";
      return std::nullopt;
    }
    auto [it, added] = by_request.emplace(request, out.size());
    if (added) {
      ClaimSlice s;
      s.request = request;
      s.slice.namespace_name = ns;
      s.slice.pod_name = name;
      s.slice.pod_uid = Str(meta, "uid");
      s.slice.index = out.size();
      s.slice.container.name = request;
      ClaimParameters params;
      for (const json* c : configs) {
        const json& reqs = Field(*c, "requests");
        bool applies = !reqs.is_array() || reqs.empty() ||
                       std::find(reqs.begin(), reqs.end(), json(request)) != reqs.end();
        const json& opaque = Field(*c, "opaque");
        if (!applies || Str(opaque, "driver") != driver) continue;
        std::string why;
        if (!ParseClaimParameters(Field(opaque, "parameters"), &params, &why)) {
          *error = "claim " + ns + "/" + name + ": request " + request + ": " + why;
          return std::nullopt;
        }
      }
      s.slice.slice_class = params.slice_class;
      s.slice.protect = params.protect;
      s.slice.compute_cap = params.compute_cap;
      s.idle_timeout_s = params.idle_timeout_s;
      out.push_back(std::move(s));
    }
    ClaimSlice& s = out[it->second];
    if (std::any_of(s.slice.container.gpus.begin(), s.slice.container.gpus.end(),
                    [&](const GpuGrant& g) { return g.uuid == gpu->uuid; })) {
      *error = "claim " + ns + "/" + name + ": request " + request + " holds " + device + " twice";
      return std::nullopt;
    }
    s.slice.container.gpus.push_back(
        {gpu->uuid, gpu->index, memory >> 20, static_cast<int>(compute)});
    s.devices.emplace_back(pool, device);
  }
  if (out.empty()) {
    *error = "claim " + ns + "/" + name + " has no device of driver " + driver;
    return std::nullopt;
  }
  for (auto& s : out) s.slice.total = out.size();
  return out;
}

std::string ResourceSliceName(const std::string& driver, const std::string& node) {
  std::string d = driver;
  std::replace(d.begin(), d.end(), '.', '-');
  return node + "-" + d;
}

json BuildResourceSlice(const std::string& driver, const std::string& node, const std::vector<GpuInfo>& gpus,
                        int64_t generation) {
  json devices = json::array();
  for (const GpuInfo& g : gpus) {
    if (!g.healthy) continue;  // not offered: the scheduler places nothing new on it
    json attributes = {{"uuid", {{"string", g.uuid}}},
                       {"index", {{"int", g.index}}},
                       {"productName", {{"string", g.model}}},
                       {"memoryMiB", {{"int", g.memory_mib}}}};
    if (!g.compute_capability.empty())
      attributes["computeCapability"] = {{"version", g.compute_capability + ".0"}};
    const int64_t bytes = g.memory_mib << 20;
    json capacity = {
        {std::string(kDraCapacityMemory),
         {{"value", std::to_string(bytes)},
          {"requestPolicy",
           {{"default", std::to_string(std::min(kDraDefaultMemoryBytes, bytes))},
            {"validRange", {{"min", std::to_string(kDraMemoryStepBytes)}, {"step", std::to_string(kDraMemoryStepBytes)}}}}}}},
        {std::string(kDraCapacityCompute),
         {{"value", "100"},
          {"requestPolicy", {{"default", "0"}, {"validRange", {{"min", "0"}, {"max", "100"}, {"step", "1"}}}}}}}};
    devices.push_back({{"name", DraDeviceName(g)},
                       {"allowMultipleAllocations", true},
                       {"attributes", attributes},
                       {"capacity", capacity}});
  }
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceSlice"},
          {"metadata", {{"name", ResourceSliceName(driver, node)}}},
          {"spec",
           {{"driver", driver},
            {"nodeName", node},
            {"pool", {{"name", node}, {"generation", generation}, {"resourceSliceCount", 1}}},
            {"devices", devices}}}};
}

json BuildDeviceClass(const std::string& driver) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "DeviceClass"},
          {"metadata", {{"name", driver}}},
          {"spec", {{"selectors", json::array({{{"cel", {{"expression", "device.driver == \"" + driver + "\""}}}}})}}}};
}

std::string CdiDeviceId(const std::string& slice_name) { return std::string(kDraCdiKind) + "=" + slice_name; }

json BuildCdiSpec(const DevicePluginConfig& container, const std::vector<ClaimSlice>& slices,
                  const std::vector<std::string>& usage_host_paths) {
  json devices = json::array();
  for (size_t i = 0; i < slices.size(); ++i) {
    v1beta1::ContainerAllocateResponse r;
    BuildContainerResponse(container, slices[i].slice, i < usage_host_paths.size() ? usage_host_paths[i] : "", &r);
    // Sorted, so that the same claim always gives the same file.
    std::map<std::string, std::string> envs(r.envs().begin(), r.envs().end());
    json env = json::array();
    for (const auto& [k, v] : envs) env.push_back(k + "=" + v);
    json mounts = json::array();
    for (const auto& m : r.mounts()) {
      mounts.push_back({{"hostPath", m.host_path()},
                        {"containerPath", m.container_path()},
                        {"options", json::array({m.read_only() ? "ro" : "rw", "nosuid", "nodev", "bind"})}});
    }
    json nodes = json::array();
    for (const auto& d : r.devices())
      nodes.push_back({{"path", d.container_path()}, {"hostPath", d.host_path()}, {"permissions", d.permissions()}});
    json edits = {{"env", env}, {"mounts", mounts}};
    if (!nodes.empty()) edits["deviceNodes"] = nodes;
    devices.push_back({{"name", SliceNameFor(slices[i].slice)}, {"containerEdits", edits}});
  }
  return {{"cdiVersion", "0.6.0"}, {"kind", std::string(kDraCdiKind)}, {"devices", devices}};
}

}  // namespace gslice::k8s
