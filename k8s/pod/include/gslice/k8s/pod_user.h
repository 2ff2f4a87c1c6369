// The user a pod's container runs as, as its spec says: the container's securityContext,
// else the pod's. The kubelet plugins make a container's slice (and its remote token) that
// user's; when the spec does not say, the user is the image's, which is not visible here.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace gslice::k8s {

// securityContext.runAsUser of obj (a container or a pod spec); -1 when it does not say, or
// says something that is not a uid (negative, 2^32-1 or above).
int64_t SecurityContextRunAsUser(const nlohmann::json& obj);

// The runAsUser of the container of pod_spec named `container`, else of the pod; -1 when
// neither says.
int64_t ContainerRunAsUser(const nlohmann::json& pod_spec, const std::string& container);

// securityContext.runAsNonRoot of the named container, else of the pod; false when neither says.
bool ContainerRunAsNonRoot(const nlohmann::json& pod_spec, const std::string& container);

}  // namespace gslice::k8s
