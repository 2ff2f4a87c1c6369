// The gslice device plugin: kubelet's device plugin API v1beta1 over a unix socket.
//
// It advertises `slices_per_gpu` devices of resource gslice.io/gpu per GPU ("<uuid>::<n>");
// a container asking for gslice.io/gpu: 2 gets two of them. Which GPUs and what limits a
// container really gets was decided by the scheduler extender and written into its pod's
// gslice.io/assignment annotation: Allocate (which kubelet calls with device IDs only) finds
// the pod on this node that is waiting for exactly that many devices (bind-phase
// "allocating", oldest bind first, the next container in spec order), and returns
// CUDA_VISIBLE_DEVICES, the interposer (LD_PRELOAD and a read-only mount of its folder), the
// node ledger mount and the slice's limits as environment variables.
//
// Life cycle: serve <plugin_dir>/<socket_name>, register with <plugin_dir>/kubelet.sock,
// then poll: GPU health (ListAndWatch streams the new list on any change) and kubelet
// restarts (our socket removed or kubelet.sock replaced: serve again, register again).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api.grpc.pb.h"
#include "gslice/k8s/gpu_source.h"
#include "gslice/k8s/kube_client.h"
#include "gslice/k8s/kubelet_plugin.h"
#include "gslice/k8s/remote_credentials.h"
#include "gslice/k8s/resources.h"

namespace grpc {
class Server;
}

namespace gslice::k8s {

struct DevicePluginConfig {
  std::string resource_name = std::string(kResourceGpu);
  std::string plugin_dir = "/var/lib/kubelet/device-plugins";
  std::string socket_name = "gslice.sock";
  std::string node_name;
  int slices_per_gpu = 16;  // capped so that all slices of the node fit in the node ledger
  std::string shim_host_dir = "/usr/lib/gslice";
  std::string shim_container_dir = "/usr/lib/gslice";
  // The node ledger directory (docs/ledger.md), mounted read-only into every container, and
  // where each container's own slice usage file (writable) is mounted.
  std::string ledger_host_path = "/dev/shm/gslice";
  std::string ledger_container_path = "/dev/shm/gslice";
  std::string usage_container_path = "/dev/shm/gslice-usage";
  // The suspend board directory (docs/suspend.md): a container gets its service header and
  // its own gates read-only and its own partition writable, so gsliced's suspend service sees
  // the container's processes (by their pid namespaces) and they see it.
  std::string board_host_path = "/dev/shm/gslice-suspend";
  std::string board_container_path = "/dev/shm/gslice-suspend";
  std::string dev_root = "/dev";  // where /dev/nvidia* device nodes are looked for
  // gsliced's MPS folders (its mps_directory; the same path on the host and here; "": never
  // MPS): a container of one GPU whose MPS gsliced gives to the container's uid, or to no one
  // yet (gslice/mps_client.h: the GPU's tenant file), gets the GPU's pipe and log folders
  // mounted read-only at the same paths and the MPS client environment; see MpsPlacement.
  std::string mps_directory = "/run/gsliced/mps";
  // Where this node's gslice-remoted serves remote GPUs ("tls://10.0.0.7:7070"), published
  // as kAnnotationNodeRemoteAddress with the inventory; empty: it serves none.
  std::string remote_address;
  // --remote-client: this node runs pods that use remote GPUs (docs/kubernetes.md, "Remote
  // GPUs"). The plugin then advertises `slices_per_gpu` devices "remote::<n>" of resource
  // gslice.io/remote-gpu, no GPUs, and sets each container up with the forwarding client
  // (remote_lib_host_dir mounted read-only at remote_lib_container_dir, first on
  // LD_LIBRARY_PATH) and GSLICE_REMOTE = its assignment's remoteAddress.
  bool remote_client = false;
  std::string remote_lib_host_dir = "/usr/lib/gslice/remote";
  std::string remote_lib_container_dir = "/usr/lib/gslice/remote";
  // A remote client's TLS trust and token (--remote-ca, --remote-token-file): a container
  // whose GPU node serves tls:// gets its own copies (remote_credentials.h) mounted read-only
  // at remote_credentials_container_dir, named by GSLICE_REMOTE_CA and
  // GSLICE_REMOTE_TOKEN_FILE. Without a token file such containers are refused.
  RemoteCredentials remote_credentials{.host_dir = "/run/gslice/remote-pods"};
  std::string remote_credentials_container_dir = "/etc/gslice/remote";
  // How often copies of pods that are gone are removed and the others refreshed from the
  // node's files (each Allocate does it too).
  std::chrono::milliseconds remote_credentials_tidy{60000};
  std::chrono::milliseconds poll{1000};
};

// The container of a pending pod that an Allocate call is for.
struct PendingContainer {
  std::string namespace_name, pod_name, pod_uid;
  size_t index = 0;  // among the pod's gslice containers
  size_t total = 0;
  SliceClass slice_class = SliceClass::kGuaranteed;
  ContainerAssignment container;
  std::string compute_cap;  // gslice.io/compute-cap, may be empty
  std::string protect;      // gslice.io/protect, may be empty (ParseProtectAnnotation)
  std::string remote_address;  // a remote pod: its GPU node's gslice-remoted (Assignment)
  std::string idle_timeout;    // gslice.io/idle-timeout, may be empty
  // The uid the container runs as (securityContext.runAsUser of the container, else of the
  // pod); -1 when the pod spec does not say (the image's USER is not visible here).
  int64_t run_as_user = -1;
  // securityContext.runAsNonRoot of the container, else of the pod.
  bool run_as_non_root = false;
  // spec.hostIPC of the pod: an MPS client shares memory with its server, which runs in the
  // host's IPC namespace.
  bool host_ipc = false;
};

// Whether a container goes on its GPU's MPS (docs/kubernetes.md, "MPS"): one GPU, gsliced's
// MPS serving it (`mps_directory`'s tenant file) for the container's runAsUser and its slice's
// class (or, under gsliced's mps_classes "mixed", for no one yet), and the pod in the host's
// IPC namespace. `why` says what decided.
struct MpsPlacement {
  bool mps = false;
  std::string why;
  std::string pipe_directory = {}, log_directory = {};
};
MpsPlacement PlaceOnMps(const DevicePluginConfig& config, const PendingContainer& pending);

// Picks from a PodList (JSON) the pod on `node` waiting for a container of `device_count`
// GPUs: bind-phase allocating, oldest bind-time first; among equals, the one whose assigned
// GPUs are `requested_uuids`. `remote`: only pods of remote GPUs (their assignment names the
// GPU node serving them, not `node`); otherwise only local ones. nullopt with *why when none is.
std::optional<PendingContainer> FindPendingContainer(const nlohmann::json& pod_list,
                                                     const std::string& node, size_t device_count,
                                                     const std::set<std::string>& requested_uuids,
                                                     std::string* why, bool remote = false);

// The uid that must own a remote container's token copy: its runAsUser, else root. False with
// *why when the spec says runAsNonRoot without a runAsUser: the user is then the image's,
// which the plugin cannot see, and a copy it cannot read would fail only at the first GPU call.
bool RemoteTokenOwner(const PendingContainer& pending, uint32_t* owner, std::string* why);

// A remote container's answer: the forwarding client and where it forwards to, its slice's
// size and class; no GPU, ledger or board (they are on the GPU node). credentials_host_dir:
// the container's copies of the node's CA and token (WriteContainerCredentials), mounted
// read-only and named by GSLICE_REMOTE_CA and GSLICE_REMOTE_TOKEN_FILE; "" for none.
void BuildRemoteContainerResponse(const DevicePluginConfig& config, const PendingContainer& pending,
                                  v1beta1::ContainerAllocateResponse* out,
                                  const std::string& credentials_host_dir = "");

// Creates (or finds) the container's slice in the node ledger with its GPUs' limits, its
// usage file owned by the uid the container runs as (root when the pod spec does not say).
// Returns the usage file's host path; "" with *why on failure.
std::string PrepareContainerSlice(const DevicePluginConfig& config, const PendingContainer& pending,
                                  std::string* why);

// Fills the kubelet's answer for one container: the ledger directory read-only, and its own
// usage file (usage_host_path) read-write; nothing of another slice's is writable there.
void BuildContainerResponse(const DevicePluginConfig& config, const PendingContainer& pending,
                            const std::string& usage_host_path, v1beta1::ContainerAllocateResponse* out);

// "<uuid>::<n>" -> "<uuid>"; empty if malformed.
std::string GpuOfDeviceId(const std::string& id);

// The name of the ledger slice of a container, one gsliced adopts (1-63 characters of
// [a-z0-9._-]): "<namespace>.<pod>.<container>", or "pod_<pod uid>_<container index>" when
// that is longer than 63 characters. Stable for a container and unique on the node: the
// first form splits back at its first and last dots (namespaces and container names have
// none), the second holds a '_', which no Kubernetes name does.
std::string SliceNameFor(const PendingContainer& p);
// The container's partition of the suspend board: "k8s-" + its slice name (host file
// <board>/pods/<it>, seen in the container as <board>/shim/<it>).
std::string SuspendPartitionFor(const PendingContainer& p);

class DevicePluginService final : public v1beta1::DevicePlugin::Service {
 public:
  DevicePluginService(DevicePluginConfig config, const KubeClient* kube);

  // Replaces the device list; wakes ListAndWatch streams when anything changed.
  // Returns true when it changed.
  bool SetGpus(const std::vector<GpuInfo>& gpus);
  std::vector<GpuInfo> gpus() const;
  int slices_per_gpu() const;
  // Ends every ListAndWatch stream (before the server shuts down).
  void Stop();

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* out) override;
  grpc::Status ListAndWatch(grpc::ServerContext* ctx, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override;
  grpc::Status GetPreferredAllocation(grpc::ServerContext*, const v1beta1::PreferredAllocationRequest* req,
                                      v1beta1::PreferredAllocationResponse* out) override;
  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* req,
                        v1beta1::AllocateResponse* out) override;
  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest* req,
                                 v1beta1::PreStartContainerResponse*) override;

  // Removes the remote credential copies of pods no longer on this node and refreshes the
  // others (remote_credentials.h). False with *error when the pods cannot be listed or a copy
  // cannot be written or removed.
  bool TidyRemoteCredentials(std::string* error);

 private:
  v1beta1::ListAndWatchResponse DeviceList() const;  // REQUIRES: mu_ held
  bool ListPendingPods(nlohmann::json* pods, std::string* error) const;
  // REQUIRES: allocate_mu_ held; `pods` lists every pod of this node.
  std::string TidyRemoteCredentials(const nlohmann::json& pods);
  // A remote container's answer, its credentials written first. REQUIRES: allocate_mu_ held.
  grpc::Status AllocateRemote(const PendingContainer& pending, v1beta1::ContainerAllocateResponse* out);

  const DevicePluginConfig config_;
  const KubeClient* kube_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<GpuInfo> gpus_;
  int slices_per_gpu_ = 1;
  uint64_t version_ = 0;
  bool stopping_ = false;
  std::mutex allocate_mu_;  // one Allocate at a time: each consumes a pending container
};

// Serves the plugin, registers it, and keeps it registered and its devices' health current.
class DevicePluginRunner {
 public:
  DevicePluginRunner(DevicePluginConfig config, GpuSource* source, const KubeClient* kube);
  ~DevicePluginRunner();

  // First discovery, serve, register. False with *error if the GPUs cannot be read or the
  // socket cannot be served; a kubelet that is not there yet is not an error (RunOnce
  // registers once it appears).
  bool Start(std::string* error);
  // One poll: health, node annotation, kubelet restart. Called every config.poll by Run.
  void RunOnce();
  void Run(const std::atomic<bool>& stop);
  void Stop();

  int registrations() const { return registrations_; }
  DevicePluginService* service() { return service_.get(); }

 private:
  bool Serve(std::string* error);
  bool Register(std::string* error);
  void PublishNode();

  DevicePluginConfig config_;
  GpuSource* source_;
  const KubeClient* kube_;
  std::unique_ptr<DevicePluginService> service_;
  PluginSocket socket_;  // declared after service_: destroyed (shut down) before it
  std::atomic<int> registrations_{0};
  bool registered_ = false;
  std::string kubelet_id_;  // identity of the kubelet.sock we registered with
  std::string published_;
  std::chrono::steady_clock::time_point next_tidy_{};
};

}  // namespace gslice::k8s
