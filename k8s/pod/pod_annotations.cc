#include "gslice/k8s/pod_annotations.h"

#include <nlohmann/json.hpp>

namespace gslice::k8s {

PodAnnotations ReadPodAnnotations(const nlohmann::json& pod) {
  PodAnnotations out;
  if (!pod.is_object()) return out;
  auto meta = pod.find("metadata");
  if (meta == pod.end() || !meta->is_object()) return out;
  auto ann = meta->find("annotations");
  if (ann == meta->end() || !ann->is_object()) return out;
  auto read = [&](std::string_view key, std::string* value) {
    auto it = ann->find(std::string(key));
    if (it != ann->end() && it->is_string()) *value = it->get<std::string>();
  };
  read(kAnnotationClass, &out.slice_class);
  read(kAnnotationPolicy, &out.policy);
  read(kAnnotationComputeCap, &out.compute_cap);
  read(kAnnotationProtect, &out.protect);
  read(kAnnotationMemory, &out.memory);
  read(kAnnotationIdleTimeout, &out.idle_timeout);
  return out;
}

}  // namespace gslice::k8s
