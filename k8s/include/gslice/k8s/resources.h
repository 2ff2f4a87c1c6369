// The Kubernetes names gslice owns (resources, annotations, labels) and the translation of a
// pod's spec into what it asks of the GPUs. One source of truth for every gslice.io/ name (the
// annotations users set are pod_annotations.h's): the device plugin, the scheduler extender,
// the docs and the manifests all use these.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gslice/k8s/pod_annotations.h"  // the annotations users set
#include "gslice/slice_class.h"

namespace gslice::k8s {

// Extended resources a container puts in resources.limits.
inline constexpr std::string_view kResourceGpu = "gslice.io/gpu";             // GPUs (count)
inline constexpr std::string_view kResourceMemory = "gslice.io/gpu-memory";   // MiB per GPU
inline constexpr std::string_view kResourceCompute = "gslice.io/gpu-compute"; // percent per GPU
// A remote GPU for a pod on a node without GPUs (docs/kubernetes.md, "Remote GPUs"):
// gslice.io/remote-gpu: 1 (advertised by the device plugin in --remote-client mode on the
// client nodes, which sets the container up at Allocate) and gslice.io/remote-memory (MiB,
// the extender's alone, like gslice.io/gpu-memory). gslice.io/gpu-compute applies to it too.
inline constexpr std::string_view kResourceRemoteGpu = "gslice.io/remote-gpu";       // 1
inline constexpr std::string_view kResourceRemoteMemory = "gslice.io/remote-memory"; // MiB

// Pod annotations the extender writes at bind time and the device plugin consumes.
inline constexpr std::string_view kAnnotationAssignment = "gslice.io/assignment";  // JSON
inline constexpr std::string_view kAnnotationBindPhase = "gslice.io/bind-phase";   // allocating|allocated
inline constexpr std::string_view kAnnotationBindTime = "gslice.io/bind-time";     // ns since epoch
inline constexpr std::string_view kAnnotationAllocated = "gslice.io/allocated-containers";  // count

// Node annotations the device plugin publishes.
inline constexpr std::string_view kAnnotationNodeGpus = "gslice.io/gpus";  // JSON inventory
inline constexpr std::string_view kAnnotationNodeSlicesPerGpu = "gslice.io/slices-per-gpu";
// Where the node's gslice-remoted serves remote GPUs ("tls://10.0.0.7:7070"); absent: the
// node serves none. The extender places remote slices only on nodes that have it.
inline constexpr std::string_view kAnnotationNodeRemoteAddress = "gslice.io/remote-address";

// A kAnnotationProtect value for a pod of class cls, in thousandths of solo speed (the
// ledger's protect_permille). False with *error (a message a user can act on) when it is
// malformed, out of 0.5..1, or set on an opportunistic pod, which has no level.
bool ParseProtectAnnotation(std::string_view value, SliceClass cls, uint32_t* permille, std::string* error);

using gslice::SliceClass;  // one definition for every layer (gslice/slice_class.h)

enum class Policy { kBinpack, kSpread };
std::string_view ToString(Policy p);
std::optional<Policy> ParsePolicy(std::string_view text);

// A Kubernetes quantity ("8192", "8Ki", "1e3", "500m") as an integer. Extended resources are
// integers, so a fractional value ("500m", "0.5") is refused. Empty error means success.
struct ParsedQuantity {
  int64_t value = 0;
  std::string error;
};
ParsedQuantity ParseQuantity(std::string_view text);

// What one container asks for: `gpus` distinct GPUs, each giving it `memory_mib` (0: the
// whole GPU) and `compute_percent` (0: no reserved share).
struct ContainerRequest {
  std::string name;
  int gpus = 0;
  int64_t memory_mib = 0;
  int compute_percent = 0;
  bool remote = false;  // gslice.io/remote-gpu: one GPU of another node, through gslice-remoted
};

struct PodRequest {
  std::string namespace_name;
  std::string name;
  std::string uid;
  SliceClass slice_class = SliceClass::kGuaranteed;
  uint32_t protect_permille = 0;  // kAnnotationProtect; 0: not set (the default level)
  std::optional<Policy> policy;  // per-pod override of the extender's policy
  // Only the containers that ask for gslice.io/gpu, in spec order (the order in which the
  // kubelet allocates them).
  std::vector<ContainerRequest> containers;

  bool wants_gpus() const { return !containers.empty(); }
  // Its containers ask for remote GPUs (all of them: a pod is local or remote, not both).
  bool remote() const { return !containers.empty() && containers.front().remote; }
  int64_t total_gpus() const;
};

// Reads a v1.Pod (JSON). On bad input returns nullopt and sets *error to a message a user can
// act on ("container main: gslice.io/gpu-compute 150: must be 1..100").
std::optional<PodRequest> ParsePodRequest(const nlohmann::json& pod, std::string* error);

// One GPU's share given to one container.
struct GpuGrant {
  std::string uuid;
  int index = 0;
  int64_t memory_mib = 0;  // resolved: never 0
  int compute_percent = 0;
};

struct ContainerAssignment {
  std::string name;
  std::vector<GpuGrant> gpus;
};

// The extender's decision for a pod; stored as the kAnnotationAssignment annotation.
struct Assignment {
  // The node whose GPUs hold the slices (for a remote pod: the GPU node serving it, not the
  // node the pod runs on).
  std::string node;
  // A remote pod: the GPU node's gslice-remoted (kAnnotationNodeRemoteAddress), which the
  // pod's containers get as GSLICE_REMOTE. Empty: a local pod.
  std::string remote_address;
  SliceClass slice_class = SliceClass::kGuaranteed;
  std::vector<ContainerAssignment> containers;
};

std::string EncodeAssignment(const Assignment& a);
std::optional<Assignment> DecodeAssignment(std::string_view text, std::string* error);

// One GPU of a node, as the device plugin publishes it in kAnnotationNodeGpus.
struct GpuInfo {
  std::string uuid;
  int index = 0;
  int64_t memory_mib = 0;
  std::string model;
  bool healthy = true;
  std::string compute_capability = {};  // "9.0"; empty when NVML does not say (not in the annotation)
};

std::string EncodeGpuInventory(const std::vector<GpuInfo>& gpus);
std::optional<std::vector<GpuInfo>> DecodeGpuInventory(std::string_view text, std::string* error);

}  // namespace gslice::k8s
