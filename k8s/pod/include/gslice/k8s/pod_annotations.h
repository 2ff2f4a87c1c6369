// The gslice.io/ annotations a user sets on a pod, and the one reader of them: the node
// daemon (a running pod's slices follow them) and the kubelet plugins (a container's slice at
// Allocate) take their values from ReadPodAnnotations. The scheduler extender reads class and
// policy from labels as well (resources.h, ParsePodRequest).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace gslice::k8s {

// Pod annotations (or labels, for class and policy) that users set.
inline constexpr std::string_view kAnnotationClass = "gslice.io/class";    // guaranteed|opportunistic
inline constexpr std::string_view kAnnotationPolicy = "gslice.io/policy";  // binpack|spread
// Optional hard compute cap ("40%"): the slice never uses more, even on an idle GPU.
inline constexpr std::string_view kAnnotationComputeCap = "gslice.io/compute-cap";
// Optional protection level of a guaranteed pod's slices ("0.9" or "90%"): the fraction of
// their solo speed that opportunistic work on the same GPU must leave them (default 0.97).
inline constexpr std::string_view kAnnotationProtect = "gslice.io/protect";
// Optional memory limit per GPU ("16GiB", or "16GiB,8GiB" per GPU; a bare number is MiB, as
// gslice.io/gpu-memory): the node's gsliced resizes the pod's running slices to it, as
// `gslice set --memory` does. Changing it (and gslice.io/compute-cap, gslice.io/class) on a
// running pod resizes its slices in place (docs/kubernetes.md).
inline constexpr std::string_view kAnnotationMemory = "gslice.io/memory";
// Optional idle timeout of a pod's remote slices ("30m", "600s"): its worker is suspended to
// host memory after that long without GPU work, and resumed by the next call
// (GSLICE_IDLE_TIMEOUT, docs/remote.md).
inline constexpr std::string_view kAnnotationIdleTimeout = "gslice.io/idle-timeout";

// A pod's user-set annotations as written; empty: not set, or not a string. Each reader checks
// the values it acts on and says what is wrong in its own terms (gsliced logs and leaves the
// slice as it is; a kubelet plugin fails the container's allocation).
struct PodAnnotations {
  std::string slice_class;   // kAnnotationClass
  std::string policy;        // kAnnotationPolicy
  std::string compute_cap;   // kAnnotationComputeCap
  std::string protect;       // kAnnotationProtect
  std::string memory;        // kAnnotationMemory
  std::string idle_timeout;  // kAnnotationIdleTimeout

  bool operator==(const PodAnnotations&) const = default;
};

// The annotations of a v1.Pod (JSON): its metadata.annotations. Anything else (no metadata,
// not an object) reads as none set.
PodAnnotations ReadPodAnnotations(const nlohmann::json& pod);

}  // namespace gslice::k8s
