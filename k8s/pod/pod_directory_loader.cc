#include "gslice/k8s/pod_directory_loader.h"

#include <nlohmann/json.hpp>

#include "gslice/k8s/pod_annotations.h"

namespace gslice::k8s {

using nlohmann::json;

namespace {
std::string Str(const json& obj, const char* key) {
  if (!obj.is_object()) return {};
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}
}  // namespace

size_t FillPodDirectory(const json& pod_list, PodDirectory* dir) {
  size_t added = 0;
  auto items = pod_list.find("items");
  if (items == pod_list.end() || !items->is_array()) return 0;
  for (const auto& pod : *items) {
    if (!pod.is_object() || !pod.contains("metadata")) continue;
    const json& meta = pod["metadata"];
    std::string uid = Str(meta, "uid");
    if (uid.empty()) continue;
    dir->AddPod(uid, Str(meta, "namespace"), Str(meta, "name"));
    ++added;
    dir->SetAnnotations(uid, ReadPodAnnotations(pod));
    auto status = pod.find("status");
    if (status == pod.end() || !status->is_object()) continue;
    for (const char* field : {"containerStatuses", "initContainerStatuses"}) {
      auto list = status->find(field);
      if (list == status->end() || !list->is_array()) continue;
      for (const auto& c : *list) {
        std::string id = Str(c, "containerID");
        if (!id.empty()) dir->AddContainer(uid, id, Str(c, "name"));
      }
    }
  }
  return added;
}

bool LoadPodDirectory(const KubeClient& kube, const std::string& node, PodDirectory* dir,
                      std::string* error) {
  KubeResult r = kube.ListPods("spec.nodeName=" + node);
  if (!r.ok()) {
    *error = r.error;
    return false;
  }
  PodDirectory fresh;
  FillPodDirectory(r.body, &fresh);
  *dir = std::move(fresh);
  return true;
}

}  // namespace gslice::k8s
