#include "gslice/k8s/resources.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include <nlohmann/json.hpp>

#include "gslice/units.h"

namespace gslice::k8s {

using nlohmann::json;

bool ParseProtectAnnotation(std::string_view value, SliceClass cls, uint32_t* permille, std::string* error) {
  const std::string what = std::string(kAnnotationProtect) + " '" + std::string(value) + "'";
  if (cls != SliceClass::kGuaranteed) {
    *error = what + ": only guaranteed pods have a protection level (the share of their solo speed kept against "
                    "opportunistic work); remove it, or set gslice.io/class: guaranteed";
    return false;
  }
  ParsedProtect p = gslice::ParseProtect(value);
  if (!p.ok) {
    *error = what + ": " + p.error;
    return false;
  }
  *permille = p.permille;
  return true;
}

std::string_view ToString(Policy p) { return p == Policy::kBinpack ? "binpack" : "spread"; }

std::optional<Policy> ParsePolicy(std::string_view text) {
  if (text == "binpack") return Policy::kBinpack;
  if (text == "spread") return Policy::kSpread;
  return std::nullopt;
}

ParsedQuantity ParseQuantity(std::string_view text) {
  ParsedQuantity out;
  std::string s(text);
  if (s.empty()) {
    out.error = "empty quantity";
    return out;
  }
  // Split the number from its suffix.
  size_t i = 0;
  if (s[i] == '+' || s[i] == '-') ++i;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  std::string number = s.substr(0, i);
  std::string suffix = s.substr(i);
  if (number.empty() || number == "+" || number == "-" || number == ".") {
    out.error = "'" + s + "' is not a quantity";
    return out;
  }
  long double scale = 1;
  static constexpr struct {
    const char* name;
    long double factor;
  } kSuffixes[] = {
      {"", 1},         {"Ki", 1024.0L},  {"Mi", 1048576.0L}, {"Gi", 1073741824.0L},
      {"Ti", 1099511627776.0L}, {"Pi", 1125899906842624.0L}, {"Ei", 1152921504606846976.0L},
      {"n", 1e-9L},    {"u", 1e-6L},     {"m", 1e-3L},       {"k", 1e3L},
      {"M", 1e6L},     {"G", 1e9L},      {"T", 1e12L},       {"P", 1e15L},
      {"E", 1e18L},
  };
  bool known = false;
  for (const auto& sfx : kSuffixes) {
    if (suffix == sfx.name) {
      scale = sfx.factor;
      known = true;
      break;
    }
  }
  if (!known && (suffix.size() >= 2 && (suffix[0] == 'e' || suffix[0] == 'E'))) {
    char* end = nullptr;
    long exp = std::strtol(suffix.c_str() + 1, &end, 10);
    if (end && *end == '\0' && exp >= -18 && exp <= 18) {
      scale = std::pow(10.0L, static_cast<long double>(exp));
      known = true;
    }
  }
  if (!known) {
    out.error = "'" + s + "': unknown suffix '" + suffix + "'";
    return out;
  }
  char* end = nullptr;
  long double v = std::strtold(number.c_str(), &end);
  if (!end || *end != '\0') {
    out.error = "'" + s + "' is not a quantity";
    return out;
  }
  v *= scale;
  if (v < 0) {
    out.error = "'" + s + "': must not be negative";
    return out;
  }
  if (v > static_cast<long double>(std::numeric_limits<int64_t>::max() / 2)) {
    out.error = "'" + s + "': too large";
    return out;
  }
  long double whole = std::floor(v + 0.5L);
  if (std::fabs(whole - v) > 1e-9L) {
    out.error = "'" + s + "': must be a whole number";
    return out;
  }
  out.value = static_cast<int64_t>(whole);
  return out;
}

int64_t PodRequest::total_gpus() const {
  int64_t n = 0;
  for (const auto& c : containers) n += c.gpus;
  return n;
}

namespace {

// Annotation first, then label: users reach for either.
std::optional<std::string> MetaValue(const json& pod, std::string_view key) {
  for (const char* field : {"annotations", "labels"}) {
    auto meta = pod.find("metadata");
    if (meta == pod.end() || !meta->is_object()) return std::nullopt;
    auto m = meta->find(field);
    if (m == meta->end() || !m->is_object()) continue;
    auto v = m->find(std::string(key));
    if (v != m->end() && v->is_string()) return v->get<std::string>();
  }
  return std::nullopt;
}

// The value of `name` in limits (preferred) or requests; nullopt if absent.
std::optional<json> ResourceValue(const json& container, std::string_view name) {
  auto res = container.find("resources");
  if (res == container.end() || !res->is_object()) return std::nullopt;
  for (const char* field : {"limits", "requests"}) {
    auto list = res->find(field);
    if (list == res->end() || !list->is_object()) continue;
    auto v = list->find(std::string(name));
    if (v != list->end()) return *v;
  }
  return std::nullopt;
}

bool QuantityOf(const json& v, int64_t* out, std::string* error) {
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    if (*out < 0) {
      *error = "must not be negative";
      return false;
    }
    return true;
  }
  if (!v.is_string()) {
    *error = "must be a quantity string";
    return false;
  }
  ParsedQuantity q = ParseQuantity(v.get<std::string>());
  if (!q.error.empty()) {
    *error = q.error;
    return false;
  }
  *out = q.value;
  return true;
}

std::string Str(const json& obj, const char* key) {
  auto it = obj.find(key);
  return (it != obj.end() && it->is_string()) ? it->get<std::string>() : std::string();
}

}  // namespace

std::optional<PodRequest> ParsePodRequest(const json& pod, std::string* error) {
  if (!pod.is_object()) {
    *error = "pod is not a JSON object";
    return std::nullopt;
  }
  PodRequest req;
  if (auto meta = pod.find("metadata"); meta != pod.end() && meta->is_object()) {
    req.namespace_name = Str(*meta, "namespace");
    req.name = Str(*meta, "name");
    req.uid = Str(*meta, "uid");
  }
  if (req.namespace_name.empty()) req.namespace_name = "default";
  if (auto cls = MetaValue(pod, kAnnotationClass)) {
    auto parsed = ParseSliceClass(*cls);
    if (!parsed) {
      *error = std::string(kAnnotationClass) + " '" + *cls + "': must be guaranteed or opportunistic";
      return std::nullopt;
    }
    req.slice_class = *parsed;
  }
  // An annotation only: a label cannot hold "90%".
  if (auto meta = pod.find("metadata"); meta != pod.end() && meta->is_object()) {
    if (auto ann = meta->find("annotations"); ann != meta->end() && ann->is_object()) {
      if (auto v = ann->find(std::string(kAnnotationProtect)); v != ann->end()) {
        if (!v->is_string() ||
            !ParseProtectAnnotation(v->get<std::string>(), req.slice_class, &req.protect_permille, error)) {
          if (!v->is_string()) *error = std::string(kAnnotationProtect) + ": must be a string, e.g. \"0.9\"";
          return std::nullopt;
        }
      }
    }
  }
  if (auto pol = MetaValue(pod, kAnnotationPolicy)) {
    auto parsed = ParsePolicy(*pol);
    if (!parsed) {
      *error = std::string(kAnnotationPolicy) + " '" + *pol + "': must be binpack or spread";
      return std::nullopt;
    }
    req.policy = *parsed;
  }
  auto spec = pod.find("spec");
  if (spec == pod.end() || !spec->is_object()) return req;
  auto containers = spec->find("containers");
  if (containers == spec->end() || !containers->is_array()) return req;
  for (const auto& c : *containers) {
    if (!c.is_object()) continue;
    ContainerRequest cr;
    cr.name = Str(c, "name");
    auto fail = [&](std::string_view resource, const std::string& why) {
      *error = "container " + cr.name + ": " + std::string(resource) + " " + why;
      return std::nullopt;
    };
    int64_t gpus = 0, mem = 0, compute = 0, remote = 0, remote_mem = 0;
    std::string why;
    auto rg = ResourceValue(c, kResourceRemoteGpu);
    auto rm = ResourceValue(c, kResourceRemoteMemory);
    if (rg && !QuantityOf(*rg, &remote, &why)) return fail(kResourceRemoteGpu, why);
    if (rm && !QuantityOf(*rm, &remote_mem, &why)) return fail(kResourceRemoteMemory, why);
    if (remote != 0 || rm) {
      if (remote != 1) {
        return fail(kResourceRemoteGpu, std::to_string(remote) + ": must be 1 (one remote GPU per container), with " +
                                            std::string(kResourceRemoteMemory));
      }
      if (!rm || remote_mem < 64) {
        return fail(kResourceRemoteMemory, (rm ? std::to_string(remote_mem) : std::string("absent")) +
                                               ": must be at least 64 (MiB); a remote GPU needs its memory size");
      }
      if (ResourceValue(c, kResourceGpu) || ResourceValue(c, kResourceMemory)) {
        return fail(kResourceRemoteGpu, "and " + std::string(kResourceGpu) + " in one container: ask for one or the other");
      }
    }
    auto g = ResourceValue(c, kResourceGpu);
    auto m = ResourceValue(c, kResourceMemory);
    auto p = ResourceValue(c, kResourceCompute);
    if (g && !QuantityOf(*g, &gpus, &why)) return fail(kResourceGpu, why);
    if (m && !QuantityOf(*m, &mem, &why)) return fail(kResourceMemory, why);
    if (p && !QuantityOf(*p, &compute, &why)) return fail(kResourceCompute, why);
    if (remote == 1) {
      if (p && (compute < 1 || compute > 100))
        return fail(kResourceCompute, std::to_string(compute) + ": must be 1..100 (percent of one GPU)");
      cr.remote = true;
      cr.gpus = 1;
      cr.memory_mib = remote_mem;
      cr.compute_percent = static_cast<int>(compute);
      if (!req.containers.empty() && !req.containers.front().remote) {
        *error = "container " + cr.name + ": remote and local GPUs in one pod: ask for one or the other";
        return std::nullopt;
      }
      req.containers.push_back(std::move(cr));
      continue;
    }
    if (gpus == 0) {
      if (mem > 0 || compute > 0)
        return fail(mem > 0 ? kResourceMemory : kResourceCompute,
                    "needs " + std::string(kResourceGpu) + " (the number of GPUs) in the same container");
      continue;
    }
    if (gpus > 64) return fail(kResourceGpu, std::to_string(gpus) + ": at most 64 GPUs per container");
    if (m && mem < 64) return fail(kResourceMemory, std::to_string(mem) + ": must be at least 64 (MiB)");
    if (p && (compute < 1 || compute > 100))
      return fail(kResourceCompute, std::to_string(compute) + ": must be 1..100 (percent of one GPU)");
    if (req.remote()) {
      *error = "container " + cr.name + ": remote and local GPUs in one pod: ask for one or the other";
      return std::nullopt;
    }
    cr.gpus = static_cast<int>(gpus);
    cr.memory_mib = mem;
    cr.compute_percent = static_cast<int>(compute);
    req.containers.push_back(std::move(cr));
  }
  return req;
}

std::string EncodeAssignment(const Assignment& a) {
  json j;
  j["node"] = a.node;
  if (!a.remote_address.empty()) j["remoteAddress"] = a.remote_address;
  j["class"] = ToString(a.slice_class);
  j["containers"] = json::array();
  for (const auto& c : a.containers) {
    json jc;
    jc["name"] = c.name;
    jc["gpus"] = json::array();
    for (const auto& g : c.gpus) {
      jc["gpus"].push_back({{"uuid", g.uuid},
                            {"index", g.index},
                            {"memoryMiB", g.memory_mib},
                            {"computePercent", g.compute_percent}});
    }
    j["containers"].push_back(std::move(jc));
  }
  return j.dump();
}

std::optional<Assignment> DecodeAssignment(std::string_view text, std::string* error) try {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    *error = "assignment is not a JSON object";
    return std::nullopt;
  }
  Assignment a;
  a.node = Str(j, "node");
  a.remote_address = Str(j, "remoteAddress");
  auto cls = ParseSliceClass(Str(j, "class"));
  if (!cls) {
    *error = "assignment: bad class";
    return std::nullopt;
  }
  a.slice_class = *cls;
  auto cs = j.find("containers");
  if (cs == j.end() || !cs->is_array()) {
    *error = "assignment: no containers";
    return std::nullopt;
  }
  for (const auto& jc : *cs) {
    if (!jc.is_object()) continue;
    ContainerAssignment c;
    c.name = Str(jc, "name");
    auto gs = jc.find("gpus");
    if (gs == jc.end() || !gs->is_array()) {
      *error = "assignment: container without gpus";
      return std::nullopt;
    }
    for (const auto& jg : *gs) {
      if (!jg.is_object()) continue;
      GpuGrant g;
      g.uuid = Str(jg, "uuid");
      g.index = jg.value("index", 0);
      g.memory_mib = jg.value("memoryMiB", int64_t{0});
      g.compute_percent = jg.value("computePercent", 0);
      if (g.uuid.empty() || g.memory_mib <= 0) {
        *error = "assignment: GPU grant without uuid or memory";
        return std::nullopt;
      }
      c.gpus.push_back(std::move(g));
    }
    a.containers.push_back(std::move(c));
  }
  return a;
} catch (const json::exception& e) {
  *error = std::string("assignment: ") + e.what();
  return std::nullopt;
}

std::string EncodeGpuInventory(const std::vector<GpuInfo>& gpus) {
  json j = json::array();
  for (const auto& g : gpus) {
    j.push_back({{"uuid", g.uuid},
                 {"index", g.index},
                 {"memoryMiB", g.memory_mib},
                 {"model", g.model},
                 {"healthy", g.healthy}});
  }
  return j.dump();
}

std::optional<std::vector<GpuInfo>> DecodeGpuInventory(std::string_view text, std::string* error) try {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    *error = "GPU inventory is not a JSON array";
    return std::nullopt;
  }
  std::vector<GpuInfo> out;
  for (const auto& jg : j) {
    if (!jg.is_object()) {
      *error = "GPU inventory: entry is not an object";
      return std::nullopt;
    }
    GpuInfo g;
    g.uuid = Str(jg, "uuid");
    g.index = jg.value("index", 0);
    g.memory_mib = jg.value("memoryMiB", int64_t{0});
    g.model = Str(jg, "model");
    g.healthy = jg.value("healthy", true);
    if (g.uuid.empty() || g.memory_mib <= 0) {
      *error = "GPU inventory: entry without uuid or memoryMiB";
      return std::nullopt;
    }
    out.push_back(std::move(g));
  }
  return out;
} catch (const json::exception& e) {
  *error = std::string("GPU inventory: ") + e.what();
  return std::nullopt;
}

}  // namespace gslice::k8s
