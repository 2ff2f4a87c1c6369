// Fills a PodDirectory (pod_identity.h) from the API server: the pods of one node with their
// containers' IDs, so the node daemon can name the pod of any GPU process.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "gslice/k8s/kube_client.h"
#include "gslice/k8s/pod_identity.h"

namespace gslice::k8s {

// Adds every pod of a PodList (JSON) with its containers (status.containerStatuses and
// initContainerStatuses) and its annotations (ReadPodAnnotations). Returns the number of pods added.
size_t FillPodDirectory(const nlohmann::json& pod_list, PodDirectory* dir);

// Replaces *dir with the pods on `node`. False with *error when the API server cannot be read
// (*dir is left as it was).
bool LoadPodDirectory(const KubeClient& kube, const std::string& node, PodDirectory* dir,
                      std::string* error);

}  // namespace gslice::k8s
