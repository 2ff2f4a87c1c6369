// What the gslice DRA driver publishes and reads, as pure functions on Kubernetes objects
// (resource.k8s.io/v1, JSON): the node's ResourceSlice, the DeviceClass, a claim's
// parameters, the slices a claim's allocation asks for, and the CDI spec that puts one of
// them into a container. No I/O here; dra_plugin.h serves and stores them.
//
// The model: each healthy GPU is one device of the node's pool that many claims may share
// (allowMultipleAllocations, KEP-5075 consumable capacity) with two capacities, "memory"
// (bytes) and "compute" (percent of the GPU's time). The scheduler itself subtracts what each
// allocated claim consumes, so it places fractional claims; the allocation result says how
// much a claim consumed of which GPU (consumedCapacity), and each request of a claim becomes
// one gslice slice on the node with that memory limit and compute share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gslice/k8s/device_plugin.h"
#include "gslice/k8s/resources.h"

namespace gslice::k8s {

// The driver name: ResourceSlices, the DeviceClass, opaque claim parameters and CDI kinds.
inline constexpr std::string_view kDraDriver = "gslice.io";
// The DeviceClass that selects this driver's devices.
inline constexpr std::string_view kDraDeviceClass = "gslice.io";
// Capacities of a device (a GPU): bytes of memory, percent of the GPU's time.
inline constexpr std::string_view kDraCapacityMemory = "memory";
inline constexpr std::string_view kDraCapacityCompute = "compute";
// Opaque parameters of a claim's config (spec.devices.config[].opaque.parameters).
inline constexpr std::string_view kDraParametersApiVersion = "gslice.io/v1alpha1";
inline constexpr std::string_view kDraParametersKind = "SliceParameters";
// The CDI kind of a prepared slice: a container gets "gslice.io/slice=<slice name>".
inline constexpr std::string_view kDraCdiKind = "gslice.io/slice";
// A request that names no memory gets this much (the capacity's requestPolicy default), and
// every request is a multiple of the step: gsliced refuses slices below 64 MiB.
inline constexpr int64_t kDraMemoryStepBytes = 64ll << 20;
inline constexpr int64_t kDraDefaultMemoryBytes = 1ll << 30;

// A claim's parameters, SliceParameters:
//   {"apiVersion": "gslice.io/v1alpha1", "kind": "SliceParameters",
//    "class": "guaranteed|opportunistic", "protect": "0.9" | 0.9 | "90%",
//    "idleTimeout": "10m" | "90s" | "1h" | seconds, "computeCap": "40%"}
// Every field is optional; a field not listed is refused, so a misspelling is never ignored.
struct ClaimParameters {
  SliceClass slice_class = SliceClass::kGuaranteed;
  std::string protect;       // as gslice.io/protect (ParseProtectAnnotation); empty: default
  uint32_t protect_permille = 0;
  int64_t idle_timeout_s = 0;  // 0: never suspended for idleness
  std::string compute_cap;     // as gslice.io/compute-cap; empty: none
};
// Merges one parameters object into *out; false with *error (which field, what is allowed).
bool ParseClaimParameters(const nlohmann::json& parameters, ClaimParameters* out, std::string* error);

// One request of an allocated claim on this node: the slice it becomes and the devices
// (pool, device) the allocation gave it.
struct ClaimSlice {
  std::string request;
  // namespace = claim's, pod_name = claim's name, container = request; run_as_user: the uid
  // of the containers that use the claim (-1: unknown, the slice stays root's)
  PendingContainer slice;
  std::vector<std::pair<std::string, std::string>> devices;  // (pool, device)
  int64_t idle_timeout_s = 0;
};

// Reads a ResourceClaim (resource.k8s.io/v1, JSON) allocated on `node` and the node's GPUs:
// one ClaimSlice per request with results of `driver` (device "gpu-<index>" of pool <node>;
// memory and compute from consumedCapacity, else the device's whole capacity), and the
// parameters of every opaque config of `driver` that applies to that request (class configs
// first, then the claim's own, later ones overriding earlier ones). nullopt with *error when
// the claim is not allocated, names an unknown or unhealthy GPU, or has bad parameters.
std::optional<std::vector<ClaimSlice>> PlanClaim(const nlohmann::json& claim, const std::string& driver,
                                                 const std::string& node, const std::vector<GpuInfo>& gpus,
                                                 std::string* error);

// The device name of a GPU in the node's pool.
std::string DraDeviceName(const GpuInfo& gpu);

// The node's ResourceSlice: one device per healthy GPU with its attributes (uuid, index,
// productName, memoryMiB, computeCapability when known) and capacities (memory in bytes,
// compute in percent, each with a request policy), shared by many claims. generation: the
// pool's generation (raise it on every change).
nlohmann::json BuildResourceSlice(const std::string& driver, const std::string& node,
                                  const std::vector<GpuInfo>& gpus, int64_t generation);
// The ResourceSlice's object name for a node.
std::string ResourceSliceName(const std::string& driver, const std::string& node);

// The DeviceClass that selects the driver's devices (deploy/kubernetes/dra/ holds the same).
nlohmann::json BuildDeviceClass(const std::string& driver);

// The CDI device ID a container gets for a slice.
std::string CdiDeviceId(const std::string& slice_name);
// A CDI spec (cdiVersion 0.6.0, kind gslice.io/slice) with one device per slice, whose
// container edits are exactly what the device plugin's Allocate gives a container
// (BuildContainerResponse): the environment, the shim, ledger, usage and suspend board
// mounts, and the GPUs' device nodes. usage_host_paths: each slice's usage file, in order.
nlohmann::json BuildCdiSpec(const DevicePluginConfig& container, const std::vector<ClaimSlice>& slices,
                            const std::vector<std::string>& usage_host_paths);

}  // namespace gslice::k8s
