#include "gslice/k8s/pod_user.h"

#include <optional>

#include <nlohmann/json.hpp>

namespace gslice::k8s {
namespace {

using nlohmann::json;

// The container of pod_spec named `name`; nullptr when there is none.
const json* FindContainer(const json& pod_spec, const std::string& name) {
  if (!pod_spec.is_object()) return nullptr;
  auto cs = pod_spec.find("containers");
  if (cs == pod_spec.end() || !cs->is_array()) return nullptr;
  for (const json& c : *cs) {
    if (!c.is_object()) continue;
    auto n = c.find("name");
    if (n != c.end() && n->is_string() && n->get<std::string>() == name) return &c;
  }
  return nullptr;
}

// securityContext.<key> of obj when it is a boolean.
std::optional<bool> SecurityContextFlag(const json& obj, const char* key) {
  if (!obj.is_object()) return std::nullopt;
  auto sc = obj.find("securityContext");
  if (sc == obj.end() || !sc->is_object()) return std::nullopt;
  auto f = sc->find(key);
  if (f == sc->end() || !f->is_boolean()) return std::nullopt;
  return f->get<bool>();
}

}  // namespace

int64_t SecurityContextRunAsUser(const json& obj) {
  if (!obj.is_object()) return -1;
  auto sc = obj.find("securityContext");
  if (sc == obj.end() || !sc->is_object()) return -1;
  auto u = sc->find("runAsUser");
  if (u == sc->end() || !u->is_number_integer()) return -1;
  const int64_t v = u->get<int64_t>();
  return v >= 0 && v < 0xffffffffLL ? v : -1;
}

int64_t ContainerRunAsUser(const json& pod_spec, const std::string& container) {
  if (const json* c = FindContainer(pod_spec, container)) {
    if (const int64_t u = SecurityContextRunAsUser(*c); u >= 0) return u;
  }
  return SecurityContextRunAsUser(pod_spec);
}

bool ContainerRunAsNonRoot(const json& pod_spec, const std::string& container) {
  if (const json* c = FindContainer(pod_spec, container)) {
    if (auto f = SecurityContextFlag(*c, "runAsNonRoot")) return *f;
  }
  return SecurityContextFlag(pod_spec, "runAsNonRoot").value_or(false);
}

}  // namespace gslice::k8s
