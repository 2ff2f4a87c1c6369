#include "gslice/k8s/device_plugin.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <thread>
#include <tuple>

#include <grpcpp/grpcpp.h>

#include "gslice/k8s/pod_annotations.h"
#include "gslice/k8s/pod_user.h"
#include "gslice/ledger.h"
#include "gslice/mps_client.h"
#include "gslice/options.h"
#include "gslice/suspend_board.h"
#include "gslice/units.h"

namespace gslice::k8s {

using nlohmann::json;

namespace {

constexpr const char* kHealthy = "Healthy";
constexpr const char* kUnhealthy = "Unhealthy";
constexpr const char* kApiVersion = "v1beta1";

std::string Str(const json& obj, const char* key) {
  if (!obj.is_object()) return {};
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

const json& Annotations(const json& pod) {
  static const json kEmpty = json::object();
  auto meta = pod.find("metadata");
  if (meta == pod.end() || !meta->is_object()) return kEmpty;
  auto ann = meta->find("annotations");
  return ann != meta->end() && ann->is_object() ? *ann : kEmpty;
}

int64_t ToInt(const std::string& s, int64_t fallback) {
  if (s.empty()) return fallback;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  return *end == '\0' ? v : fallback;
}

std::string CsvOf(const ContainerAssignment& c) {
  std::string out;
  for (const auto& g : c.gpus) out += (out.empty() ? "" : ",") + g.uuid;
  return out;
}

void Log(const std::string& msg) { std::fprintf(stderr, "gslice-device-plugin: %s\n", msg.c_str()); }

// gsliced adopts ledger slices whose names pass its ValidateName: 1-63 characters of
// [a-z0-9._-], the first a letter or digit.
bool IsSliceName(const std::string& name) {
  if (name.empty() || name.size() >= static_cast<size_t>(kLedgerNameSize)) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return name[0] != '.' && name[0] != '_' && name[0] != '-';
}

// Namespaces and container names are DNS-1123 labels ([a-z0-9-]); pod names are DNS-1123
// subdomains ([a-z0-9.-]): only they may hold dots.
bool IsDnsName(const std::string& s, bool dots) {
  if (s.empty()) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || (dots && c == '.'))) return false;
  return true;
}

}  // namespace

std::string GpuOfDeviceId(const std::string& id) {
  size_t sep = id.rfind("::");
  if (sep == std::string::npos || sep == 0) return {};
  return id.substr(0, sep);
}

std::string SliceNameFor(const PendingContainer& p) {
  // Namespace and container hold no dot, so the first and last dots split the name back
  // into its three parts even when the pod's name has dots.
  std::string name = p.namespace_name + "." + p.pod_name + "." + p.container.name;
  if (IsDnsName(p.namespace_name, false) && IsDnsName(p.pod_name, true) &&
      IsDnsName(p.container.name, false) && IsSliceName(name))
    return name;
  // Too long (or not a Kubernetes name): the pod's UID and the container's index. '_' never
  // occurs in a Kubernetes name, so this form cannot meet the one above.
  std::string uid;
  for (char c : p.pod_uid) {
    char l = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    uid += ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '-') ? l : '-';
  }
  const std::string suffix = "_" + std::to_string(p.index);
  const size_t room = static_cast<size_t>(kLedgerNameSize) - 1 - 4 - suffix.size();
  return "pod_" + uid.substr(0, room) + suffix;
}

std::string SuspendPartitionFor(const PendingContainer& p) { return "k8s-" + SliceNameFor(p); }

namespace {
// The pods of a PodList: UID -> namespace.
std::map<std::string, std::string> PodNamespaces(const json& pods) {
  std::map<std::string, std::string> found;
  if (auto items = pods.find("items"); items != pods.end() && items->is_array())
    for (const auto& pod : *items)
      if (pod.is_object() && pod.contains("metadata"))
        found[Str(pod["metadata"], "uid")] = Str(pod["metadata"], "namespace");
  return found;
}
}  // namespace

std::optional<PendingContainer> FindPendingContainer(const json& pod_list, const std::string& node,
                                                     size_t device_count,
                                                     const std::set<std::string>& requested_uuids,
                                                     std::string* why, bool remote) {
  std::optional<PendingContainer> best;
  std::pair<int, int64_t> best_key{0, 0};  // (uuids differ, bind time): lower is better
  int waiting = 0;
  auto items = pod_list.find("items");
  if (items != pod_list.end() && items->is_array()) {
    for (const auto& pod : *items) {
      const json& ann = Annotations(pod);
      if (Str(ann, std::string(kAnnotationBindPhase).c_str()) != "allocating") continue;
      auto spec = pod.find("spec");
      if (spec == pod.end() || Str(*spec, "nodeName") != node) continue;
      std::string phase = pod.contains("status") ? Str(pod["status"], "phase") : "";
      if (phase == "Succeeded" || phase == "Failed") continue;
      std::string err;
      auto a = DecodeAssignment(Str(ann, std::string(kAnnotationAssignment).c_str()), &err);
      if (!a || a->remote_address.empty() == remote) continue;
      if (!remote && a->node != node) continue;  // a remote pod's slices are on another node
      ++waiting;
      int64_t index = ToInt(Str(ann, std::string(kAnnotationAllocated).c_str()), 0);
      if (index < 0 || index >= static_cast<int64_t>(a->containers.size())) continue;
      const ContainerAssignment& c = a->containers[static_cast<size_t>(index)];
      if (c.gpus.size() != device_count) continue;
      std::set<std::string> uuids;
      for (const auto& g : c.gpus) uuids.insert(g.uuid);
      std::pair<int, int64_t> key{uuids == requested_uuids ? 0 : 1,
                                  ToInt(Str(ann, std::string(kAnnotationBindTime).c_str()), 0)};
      if (best && !(key < best_key)) continue;
      PendingContainer p;
      const json& meta = pod["metadata"];
      p.namespace_name = Str(meta, "namespace");
      p.pod_name = Str(meta, "name");
      p.pod_uid = Str(meta, "uid");
      p.index = static_cast<size_t>(index);
      p.total = a->containers.size();
      p.slice_class = a->slice_class;
      p.container = c;
      const PodAnnotations user = ReadPodAnnotations(pod);
      p.compute_cap = user.compute_cap;
      p.protect = user.protect;
      p.remote_address = a->remote_address;
      p.idle_timeout = user.idle_timeout;
      p.run_as_user = ContainerRunAsUser(*spec, c.name);
      p.run_as_non_root = ContainerRunAsNonRoot(*spec, c.name);
      p.host_ipc = spec->contains("hostIPC") && (*spec)["hostIPC"].is_boolean() && (*spec)["hostIPC"].get<bool>();
      best = std::move(p);
      best_key = key;
    }
  }
  if (!best) {
    *why = "no pod on node " + node + " is waiting for a container with " + std::to_string(device_count) +
           " " + std::string(remote ? kResourceRemoteGpu : kResourceGpu) + " (" + std::to_string(waiting) +
           " pods waiting): gslice pods must be scheduled by gslice-scheduler-extender "
           "(schedulerName in the pod spec; see docs/kubernetes.md)";
  }
  return best;
}

std::string PrepareContainerSlice(const DevicePluginConfig& config, const PendingContainer& p, std::string* why) {
  Ledger ledger;
  if (LedgerError e = ledger.Open(config.ledger_host_path.c_str()); e != LedgerError::kOk) {
    *why = "node ledger " + config.ledger_host_path + ": " + LedgerErrorString(e) + ": " + ledger.detail();
    return "";
  }
  const std::string name = SliceNameFor(p);
  const uint32_t owner = p.run_as_user >= 0 ? static_cast<uint32_t>(p.run_as_user) : 0u;
  const gslice::SliceClass cls =
      p.slice_class == SliceClass::kOpportunistic ? gslice::SliceClass::kOpportunistic : gslice::SliceClass::kGuaranteed;
  // The extender refused a malformed level at bind time; an annotation changed since is
  // refused here, before anything is written.
  uint32_t protect = 0;
  if (!p.protect.empty() && !ParseProtectAnnotation(p.protect, p.slice_class, &protect, why)) return "";
  int slice = -1;
  // Ephemeral: the entry is free again once the pod's processes are gone (gsliced adopts it
  // meanwhile).
  LedgerError e = ledger.FindOrCreateSlice(name.c_str(), cls, kSliceEphemeral, &slice, owner, protect);
  if (e == LedgerError::kOk) {
    const LedgerSlice& s = ledger.limits()->slices[slice];
    e = ledger.UpdateSlice(slice, cls, s.flags, owner, protect);
  }
  for (const auto& g : p.container.gpus) {
    if (e != LedgerError::kOk) break;
    uint8_t uuid[16];
    if (!ParseGpuUuid(g.uuid.c_str(), uuid)) {
      *why = "GPU UUID " + g.uuid + " is malformed";
      return "";
    }
    int gpu = -1;
    const int64_t limit = g.memory_mib * 1024 * 1024;
    e = ledger.FindOrAddGpu(slice, uuid, limit, &gpu);
    if (e == LedgerError::kOk && ledger.Limit(slice, gpu) != limit) ledger.SetLimit(slice, gpu, limit);
  }
  if (e != LedgerError::kOk) {
    *why = "node ledger " + config.ledger_host_path + ": slice " + name + ": " + LedgerErrorString(e) + ": " +
           ledger.detail();
    return "";
  }
  return config.ledger_host_path + "/slice-" + std::to_string(slice);
}

MpsPlacement PlaceOnMps(const DevicePluginConfig& config, const PendingContainer& p) {
  if (config.mps_directory.empty()) return {.why = "this plugin gives no MPS (--mps-directory \"\")"};
  if (p.container.gpus.size() != 1) {
    return {.why = "a program reaches one MPS control daemon and gsliced runs one per GPU: time-sliced on each"};
  }
  const GpuGrant& gpu = p.container.gpus.front();
  const MpsTenant tenant = ReadMpsTenant(config.mps_directory, gpu.uuid);
  if (!tenant.serving) return {.why = "gsliced serves no MPS on GPU " + gpu.uuid + " (gslice ls says why)"};
  if (p.run_as_user < 0) {
    return {.why = "the pod spec does not say the container's runAsUser, and an MPS server serves one uid"};
  }
  if (tenant.uid >= 0 && tenant.uid != p.run_as_user) {
    return {.why = "GPU " + gpu.uuid + "'s MPS serves uid " + std::to_string(tenant.uid) + ", not the container's " +
                   std::to_string(p.run_as_user) + ": time-sliced beside it"};
  }
  // One class per server (gsliced's mps_classes "one"): a fatal fault of any client ends every
  // client of the server, so the classes of one uid never share it.
  const std::string cls(ToString(p.slice_class));
  if (tenant.one_class && !tenant.slice_class) {
    return {.why = "GPU " + gpu.uuid + "'s MPS serves one class of its uid at a time and which one is not settled " +
                   (tenant.uid < 0 ? "(it is given to no one yet)" : "yet") +
                   ": time-sliced, so that no fault of the other class's programs can end this one's "
                   "(docs/compute.md, Faults)"};
  }
  if (tenant.uid >= 0 && !MpsTakes(tenant, p.run_as_user, p.slice_class)) {
    const bool guaranteed = p.slice_class == SliceClass::kGuaranteed;
    return {.why = "GPU " + gpu.uuid + "'s MPS serves the " + std::string(MpsClassName(tenant.slice_class)) +
                   " slices of uid " + std::to_string(tenant.uid) + ", and this one is " + cls + ": " +
                   (guaranteed ? "a fault of theirs would end its work" : "its faults would end the guaranteed work") +
                   " on that server (docs/compute.md, Faults): time-sliced"};
  }
  if (!p.host_ipc) {
    return {.why = "an MPS client shares memory with its server in the host's IPC namespace, and the pod has no "
                   "hostIPC: true"};
  }
  const std::string dir = config.mps_directory + "/" + gpu.uuid;
  return {.mps = true,
          .why = "on GPU " + gpu.uuid + "'s MPS server of uid " + std::to_string(p.run_as_user) +
                 (tenant.one_class ? " for its " + cls + " slices" : std::string()),
          .pipe_directory = dir + "/pipe",
          .log_directory = dir + "/log"};
}

void BuildContainerResponse(const DevicePluginConfig& config, const PendingContainer& p,
                            const std::string& usage_host_path, v1beta1::ContainerAllocateResponse* out) {
  auto& envs = *out->mutable_envs();
  std::string uuids, memory;
  bool same_memory = true;
  for (const auto& g : p.container.gpus) {
    if (!uuids.empty()) uuids += ",";
    uuids += g.uuid;
    if (!memory.empty()) memory += ",";
    memory += std::to_string(g.memory_mib) + "MiB";
    same_memory = same_memory && g.memory_mib == p.container.gpus.front().memory_mib;
  }
  if (same_memory && !p.container.gpus.empty())
    memory = std::to_string(p.container.gpus.front().memory_mib) + "MiB";
  envs["CUDA_VISIBLE_DEVICES"] = uuids;
  envs["NVIDIA_VISIBLE_DEVICES"] = uuids;  // for the NVIDIA container runtime, when present
  envs[OptionEnv(Option::Slice)] = SliceNameFor(p);
  envs[OptionEnv(Option::Memory)] = memory;
  envs[OptionEnv(Option::Class)] = std::string(ToString(p.slice_class));
  envs[OptionEnv(Option::Ledger)] = config.ledger_container_path;
  envs[OptionEnv(Option::LedgerUsage)] = config.usage_container_path;
  envs[OptionEnv(Option::SuspendBoard)] = config.board_container_path;
  envs[OptionEnv(Option::SuspendPartition)] = SuspendPartitionFor(p);
  int share = p.container.gpus.empty() ? 0 : p.container.gpus.front().compute_percent;
  if (share > 0) envs[OptionEnv(Option::Share)] = std::to_string(share) + "%";
  if (!p.compute_cap.empty()) envs[OptionEnv(Option::Compute)] = p.compute_cap;
  envs["LD_PRELOAD"] = config.shim_container_dir + "/libcuda.so.1 " + config.shim_container_dir +
                       "/libnvidia-ml.so.1";

  auto* shim = out->add_mounts();
  shim->set_host_path(config.shim_host_dir);
  shim->set_container_path(config.shim_container_dir);
  shim->set_read_only(true);
  // The node's ledger read-only (every slice's limits, the compute entries the gates share),
  // and the container's own usage file read-write at a path of its own: a read-only bind
  // mount refuses writes whatever the files' modes, so no other slice's state is writable.
  auto* ledger = out->add_mounts();
  ledger->set_host_path(config.ledger_host_path);
  ledger->set_container_path(config.ledger_container_path);
  ledger->set_read_only(true);
  auto* usage = out->add_mounts();
  usage->set_host_path(usage_host_path);
  usage->set_container_path(config.usage_container_path);
  usage->set_read_only(false);
  // The suspend board (suspend_board.h): the service's header and the container's own gates
  // read-only, its own partition writable; nothing of other containers.
  const std::string part = SuspendPartitionFor(p);
  for (auto [host, container, read_only] :
       {std::tuple<std::string, std::string, bool>{"/service", "/service", true},
        {"/pods/" + part, "/shim/" + part, false}, {"/gates/" + part, "/gates/" + part, true}}) {
    auto* board = out->add_mounts();
    board->set_host_path(config.board_host_path + host);
    board->set_container_path(config.board_container_path + container);
    board->set_read_only(read_only);
  }

  std::vector<std::string> nodes;
  for (const auto& g : p.container.gpus) nodes.push_back("nvidia" + std::to_string(g.index));
  for (const char* n : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}) nodes.push_back(n);
  for (const auto& n : nodes) {
    std::string host = config.dev_root + "/" + n;
    if (access(host.c_str(), F_OK) != 0) continue;
    auto* d = out->add_devices();
    d->set_host_path(host);
    d->set_container_path("/dev/" + n);
    d->set_permissions("rw");
  }
  // MPS where gsliced gives this GPU's to the container's uid and class (or, under mps_classes
  // "mixed", to no one yet: gsliced then gives it when it adopts the slice, if still free; a
  // program that starts before gets no access and runs time-sliced, never waiting).
  const MpsPlacement mps = PlaceOnMps(config, p);
  if (mps.mps) {
    const MpsClientSetting setting{.pipe_directory = mps.pipe_directory,
                                   .log_directory = mps.log_directory,
                                   .opportunistic = p.slice_class == SliceClass::kOpportunistic,
                                   .compute_cap = p.compute_cap.empty() ? 0 : ParsePercent(p.compute_cap).fraction};
    for (const auto& [key, value] : MpsClientEnvironment(setting)) envs[key] = value;
    for (const std::string& dir : {mps.pipe_directory, mps.log_directory}) {
      auto* m = out->add_mounts();
      m->set_host_path(dir);
      m->set_container_path(dir);
      m->set_read_only(true);
    }
  }
  (*out->mutable_annotations())["gslice.io/sharing"] = (mps.mps ? "mps: " : "time-sliced: ") + mps.why;
  (*out->mutable_annotations())["gslice.io/slice"] = SliceNameFor(p);
}

bool RemoteTokenOwner(const PendingContainer& p, uint32_t* owner, std::string* why) {
  if (p.run_as_user >= 0) {
    *owner = static_cast<uint32_t>(p.run_as_user);
    return true;
  }
  if (p.run_as_non_root) {
    *why = "pod " + p.namespace_name + "/" + p.pod_name + ", container " + p.container.name +
           ": runAsNonRoot without runAsUser: the remote GPU's token file is readable by one user only, "
           "and the image's user is not known here; set securityContext.runAsUser (docs/kubernetes.md)";
    return false;
  }
  *owner = 0;  // the spec names no user: the image's, root unless its USER says otherwise
  return true;
}

void BuildRemoteContainerResponse(const DevicePluginConfig& config, const PendingContainer& p,
                                  v1beta1::ContainerAllocateResponse* out, const std::string& credentials_host_dir) {
  auto& envs = *out->mutable_envs();
  envs[OptionEnv(Option::Remote)] = p.remote_address;
  const GpuGrant* g = p.container.gpus.empty() ? nullptr : &p.container.gpus.front();
  envs[OptionEnv(Option::Memory)] = std::to_string(g != nullptr ? g->memory_mib : 0) + "MiB";
  envs[OptionEnv(Option::Class)] = std::string(ToString(p.slice_class));
  if (g != nullptr && g->compute_percent > 0) envs[OptionEnv(Option::Share)] = std::to_string(g->compute_percent) + "%";
  if (!p.compute_cap.empty()) envs[OptionEnv(Option::Compute)] = p.compute_cap;
  if (!p.idle_timeout.empty()) envs[OptionEnv(Option::IdleTimeout)] = p.idle_timeout;
  // The forwarding libcuda.so.1 is found first by the dynamic loader; it needs no driver,
  // no GPU and no /dev/nvidia* here. An image's own LD_LIBRARY_PATH is replaced, as an
  // image's LD_PRELOAD is for local pods.
  envs["LD_LIBRARY_PATH"] = config.remote_lib_container_dir;
  auto* lib = out->add_mounts();
  lib->set_host_path(config.remote_lib_host_dir);
  lib->set_container_path(config.remote_lib_container_dir);
  lib->set_read_only(true);
  if (!credentials_host_dir.empty()) {
    const std::string dir = config.remote_credentials_container_dir;
    envs[OptionEnv(Option::RemoteTokenFile)] = dir + "/" + kRemoteTokenName;
    if (!config.remote_credentials.ca_file.empty()) envs[OptionEnv(Option::RemoteCa)] = dir + "/" + kRemoteCaName;
    auto* creds = out->add_mounts();
    creds->set_host_path(credentials_host_dir);
    creds->set_container_path(dir);
    creds->set_read_only(true);
  }
  (*out->mutable_annotations())["gslice.io/remote"] = p.remote_address;
}

DevicePluginService::DevicePluginService(DevicePluginConfig config, const KubeClient* kube)
    : config_(std::move(config)), kube_(kube) {}

bool DevicePluginService::SetGpus(const std::vector<GpuInfo>& gpus) {
  std::lock_guard<std::mutex> lock(mu_);
  int n = std::max<int>(1, static_cast<int>(gpus.size()));
  int spg = std::clamp(std::min(config_.slices_per_gpu, kLedgerMaxSlices / n), 1, 1024);
  bool changed = spg != slices_per_gpu_ || gpus.size() != gpus_.size();
  for (size_t i = 0; !changed && i < gpus.size(); ++i)
    changed = gpus[i].uuid != gpus_[i].uuid || gpus[i].healthy != gpus_[i].healthy ||
              gpus[i].memory_mib != gpus_[i].memory_mib;
  if (!changed) return false;
  gpus_ = gpus;
  slices_per_gpu_ = spg;
  ++version_;
  changed_.notify_all();
  return true;
}

std::vector<GpuInfo> DevicePluginService::gpus() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gpus_;
}

int DevicePluginService::slices_per_gpu() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slices_per_gpu_;
}

void DevicePluginService::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  changed_.notify_all();
}

v1beta1::ListAndWatchResponse DevicePluginService::DeviceList() const {
  v1beta1::ListAndWatchResponse list;
  if (config_.remote_client) {
    for (int r = 0; r < config_.slices_per_gpu; ++r) {
      auto* d = list.add_devices();
      d->set_id("remote::" + std::to_string(r));
      d->set_health(kHealthy);
    }
    return list;
  }
  for (const auto& g : gpus_) {
    for (int r = 0; r < slices_per_gpu_; ++r) {
      auto* d = list.add_devices();
      d->set_id(g.uuid + "::" + std::to_string(r));
      d->set_health(g.healthy ? kHealthy : kUnhealthy);
    }
  }
  return list;
}

grpc::Status DevicePluginService::GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                                         v1beta1::DevicePluginOptions* out) {
  out->set_pre_start_required(true);
  out->set_get_preferred_allocation_available(true);
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::ListAndWatch(grpc::ServerContext* ctx, const v1beta1::Empty*,
                                               grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) {
  std::unique_lock<std::mutex> lock(mu_);
  bool first = true;
  uint64_t sent = 0;
  while (!stopping_ && !ctx->IsCancelled()) {
    if (first || sent != version_) {
      v1beta1::ListAndWatchResponse list = DeviceList();
      sent = version_;
      first = false;
      lock.unlock();
      bool ok = writer->Write(list);
      lock.lock();
      if (!ok) break;
      continue;
    }
    changed_.wait_for(lock, std::chrono::milliseconds(200));
  }
  return grpc::Status::OK;
}

bool DevicePluginService::ListPendingPods(json* pods, std::string* error) const {
  if (!kube_) {
    *error = "no API server configured: cannot find the pod this allocation is for";
    return false;
  }
  KubeResult r = kube_->ListPods("spec.nodeName=" + config_.node_name);
  if (!r.ok()) {
    *error = r.error;
    return false;
  }
  *pods = std::move(r.body);
  return true;
}

grpc::Status DevicePluginService::GetPreferredAllocation(grpc::ServerContext*,
                                                         const v1beta1::PreferredAllocationRequest* req,
                                                         v1beta1::PreferredAllocationResponse* out) {
  json pods;
  std::string err;
  bool have_pods = ListPendingPods(&pods, &err);
  for (const auto& creq : req->container_requests()) {
    auto* resp = out->add_container_responses();
    size_t want = static_cast<size_t>(std::max(0, creq.allocation_size()));
    std::vector<std::string> chosen(creq.must_include_deviceids().begin(), creq.must_include_deviceids().end());
    std::set<std::string> used_gpus;
    for (const auto& id : chosen) used_gpus.insert(GpuOfDeviceId(id));
    auto take = [&](const std::string& gpu) {  // one available device of `gpu`
      for (const auto& id : creq.available_deviceids()) {
        if (chosen.size() >= want) return;
        if (GpuOfDeviceId(id) != gpu || std::find(chosen.begin(), chosen.end(), id) != chosen.end()) continue;
        chosen.push_back(id);
        used_gpus.insert(gpu);
        return;
      }
    };
    // The GPUs the extender assigned to the pod waiting for this many devices.
    std::string why;
    if (have_pods) {
      if (auto p = FindPendingContainer(pods, config_.node_name, want, {}, &why))
        for (const auto& g : p->container.gpus)
          if (!used_gpus.count(g.uuid)) take(g.uuid);
    }
    // Otherwise distinct GPUs, then anything.
    for (const auto& id : creq.available_deviceids())
      if (!used_gpus.count(GpuOfDeviceId(id))) take(GpuOfDeviceId(id));
    for (const auto& id : creq.available_deviceids()) {
      if (chosen.size() >= want) break;
      if (std::find(chosen.begin(), chosen.end(), id) == chosen.end()) chosen.push_back(id);
    }
    for (const auto& id : chosen) resp->add_deviceids(id);
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* req,
                                           v1beta1::AllocateResponse* out) {
  std::lock_guard<std::mutex> alloc_lock(allocate_mu_);
  std::set<std::string> known;
  for (const auto& g : gpus()) known.insert(g.uuid);
  json pods;
  std::string err;
  if (!ListPendingPods(&pods, &err)) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "gslice: " + err);
  if (config_.remote_client) {
    if (std::string e = TidyRemoteCredentials(pods); !e.empty()) Log("remote credentials: " + e);
  }
  for (const auto& creq : req->container_requests()) {
    if (config_.remote_client) {
      std::string why;
      auto pending = FindPendingContainer(pods, config_.node_name, static_cast<size_t>(creq.devices_ids_size()), {},
                                          &why, /*remote=*/true);
      if (!pending) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "gslice: " + why);
      if (grpc::Status st = AllocateRemote(*pending, out->add_container_responses()); !st.ok()) return st;
      std::map<std::string, std::string> ann{{std::string(kAnnotationAllocated), std::to_string(pending->index + 1)}};
      if (pending->index + 1 == pending->total) ann[std::string(kAnnotationBindPhase)] = "allocated";
      KubeResult patched = kube_->PatchPodAnnotations(pending->namespace_name, pending->pod_name, ann);
      if (!patched.ok()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "gslice: " + patched.error);
      for (auto& pod : pods["items"]) {
        if (Str(pod["metadata"], "uid") == pending->pod_uid && Str(pod["metadata"], "name") == pending->pod_name)
          for (const auto& [k, v] : ann) pod["metadata"]["annotations"][k] = v;
      }
      Log("allocated a remote GPU for " + pending->namespace_name + "/" + pending->pod_name + " at " +
          pending->remote_address);
      continue;
    }
    std::set<std::string> uuids;
    for (const auto& id : creq.devices_ids()) {
      std::string gpu = GpuOfDeviceId(id);
      if (!known.count(gpu))
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "gslice: unknown device " + id);
      uuids.insert(gpu);
    }
    std::string why;
    auto pending = FindPendingContainer(pods, config_.node_name, static_cast<size_t>(creq.devices_ids_size()), uuids, &why);
    if (!pending) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "gslice: " + why);
    for (const auto& g : pending->container.gpus)
      if (!known.count(g.uuid))
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                            "gslice: assigned GPU " + g.uuid + " is not on this node");
    std::string board_error;
    if (!CreatePodPartition(config_.board_host_path.c_str(), SuspendPartitionFor(*pending).c_str(), &board_error))
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "gslice: suspend board: " + board_error);
    std::string usage = PrepareContainerSlice(config_, *pending, &why);
    if (usage.empty()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "gslice: " + why);
    BuildContainerResponse(config_, *pending, usage, out->add_container_responses());
    // Consume the container: on the API server (the truth across plugin restarts) and in
    // the local copy (for the next container of this same request).
    std::map<std::string, std::string> ann{{std::string(kAnnotationAllocated), std::to_string(pending->index + 1)}};
    if (pending->index + 1 == pending->total) ann[std::string(kAnnotationBindPhase)] = "allocated";
    KubeResult patched = kube_->PatchPodAnnotations(pending->namespace_name, pending->pod_name, ann);
    if (!patched.ok()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "gslice: " + patched.error);
    for (auto& pod : pods["items"]) {
      if (Str(pod["metadata"], "uid") == pending->pod_uid && Str(pod["metadata"], "name") == pending->pod_name)
        for (const auto& [k, v] : ann) pod["metadata"]["annotations"][k] = v;
    }
    Log("allocated " + SliceNameFor(*pending) + " on " + CsvOf(pending->container));
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::AllocateRemote(const PendingContainer& p, v1beta1::ContainerAllocateResponse* out) {
  // Only a tls:// GPU node wants the token and CA; unix: and loopback tcp:// serve their own
  // node, where no client of this plugin runs.
  if (p.remote_address.rfind("tls://", 0) != 0) {
    BuildRemoteContainerResponse(config_, p, out);
    return grpc::Status::OK;
  }
  const RemoteCredentials& creds = config_.remote_credentials;
  if (!creds.has_tokens())
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "gslice: pod " + p.namespace_name + "/" + p.pod_name + " uses the remote GPU at " +
                            p.remote_address + ", which wants a token: start the device plugin with "
                            "--remote-token-dir (or --remote-token-file) and --remote-ca (docs/kubernetes.md, "
                            "\"Remote GPUs\")");
  uint32_t owner = 0;
  std::string why;
  if (!RemoteTokenOwner(p, &owner, &why)) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "gslice: " + why);
  const std::string dir = WriteContainerCredentials(creds, p.pod_uid, p.namespace_name, p.index, owner, &why);
  if (dir.empty())
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "gslice: pod " + p.namespace_name + "/" + p.pod_name + ": remote GPU credentials: " + why);
  BuildRemoteContainerResponse(config_, p, out, dir);
  return grpc::Status::OK;
}

std::string DevicePluginService::TidyRemoteCredentials(const json& pods) {
  if (!config_.remote_credentials.has_tokens()) return "";
  return TidyContainerCredentials(config_.remote_credentials, PodNamespaces(pods));
}

bool DevicePluginService::TidyRemoteCredentials(std::string* error) {
  std::lock_guard<std::mutex> alloc_lock(allocate_mu_);
  json pods;
  if (!ListPendingPods(&pods, error)) return false;
  *error = TidyRemoteCredentials(pods);
  return error->empty();
}

grpc::Status DevicePluginService::PreStartContainer(grpc::ServerContext*,
                                                    const v1beta1::PreStartContainerRequest* req,
                                                    v1beta1::PreStartContainerResponse*) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& id : req->devices_ids()) {
    std::string gpu = GpuOfDeviceId(id);
    auto g = std::find_if(gpus_.begin(), gpus_.end(), [&](const GpuInfo& x) { return x.uuid == gpu; });
    if (g == gpus_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "gslice: unknown device " + id);
    if (!g->healthy) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "gslice: GPU " + gpu + " is unhealthy");
  }
  return grpc::Status::OK;
}

DevicePluginRunner::DevicePluginRunner(DevicePluginConfig config, GpuSource* source, const KubeClient* kube)
    : config_(std::move(config)), source_(source), kube_(kube),
      service_(std::make_unique<DevicePluginService>(config_, kube)) {}

DevicePluginRunner::~DevicePluginRunner() { Stop(); }

bool DevicePluginRunner::Start(std::string* error) {
  if (config_.remote_client) {
    if (!CheckRemoteCredentials(config_.remote_credentials, error)) return false;
    if (!config_.remote_credentials.has_tokens())
      Log("no --remote-token-dir or --remote-token-file: pods whose GPU node serves tls:// will be refused at Allocate");
  }
  std::vector<GpuInfo> gpus;
  if (!source_->Discover(&gpus, error)) return false;
  service_->SetGpus(gpus);
  if (!Serve(error)) return false;
  PublishNode();
  RunOnce();  // registers when kubelet is there
  return true;
}

bool DevicePluginRunner::Serve(std::string* error) {
  if (socket_.serving()) {
    service_->Stop();
    socket_.Shutdown();
  }
  // A fresh service per server: the old one's streams are over; carry the GPU list over.
  auto fresh = std::make_unique<DevicePluginService>(config_, kube_);
  fresh->SetGpus(service_->gpus());
  service_ = std::move(fresh);
  if (!socket_.Serve(config_.plugin_dir + "/" + config_.socket_name, service_.get(), "the device plugin", error)) {
    return false;
  }
  registered_ = false;
  return true;
}

bool DevicePluginRunner::Register(std::string* error) {
  auto channel = grpc::CreateChannel("unix://" + config_.plugin_dir + "/kubelet.sock",
                                     grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1beta1::RegisterRequest req;
  req.set_version(kApiVersion);
  req.set_endpoint(config_.socket_name);
  req.set_resource_name(config_.resource_name);
  req.mutable_options()->set_pre_start_required(true);
  req.mutable_options()->set_get_preferred_allocation_available(true);
  v1beta1::Empty resp;
  grpc::Status st = stub->Register(&ctx, req, &resp);
  if (!st.ok()) {
    *error = "register with kubelet: " + st.error_message();
    return false;
  }
  ++registrations_;
  return true;
}

void DevicePluginRunner::PublishNode() {
  // A client node has no GPUs to publish: the extender must not count it as a GPU node.
  if (!kube_ || config_.node_name.empty() || config_.remote_client) return;
  std::string inv = EncodeGpuInventory(service_->gpus());
  std::string spg = std::to_string(service_->slices_per_gpu());
  if (inv + "|" + spg + "|" + config_.remote_address == published_) return;
  std::map<std::string, std::string> annotations = {{std::string(kAnnotationNodeGpus), inv},
                                                    {std::string(kAnnotationNodeSlicesPerGpu), spg}};
  if (!config_.remote_address.empty()) annotations[std::string(kAnnotationNodeRemoteAddress)] = config_.remote_address;
  KubeResult r = kube_->PatchNodeAnnotations(config_.node_name, annotations);
  if (!r.ok()) {
    Log("publishing the GPU inventory on node " + config_.node_name + ": " + r.error);
    return;
  }
  published_ = inv + "|" + spg + "|" + config_.remote_address;
}

void DevicePluginRunner::RunOnce() {
  std::vector<GpuInfo> gpus;
  std::string err;
  if (!source_->Discover(&gpus, &err)) {
    Log("GPU discovery: " + err + "; marking all GPUs unhealthy");
    gpus = service_->gpus();
    for (auto& g : gpus) g.healthy = false;
  }
  if (service_->SetGpus(gpus)) Log("device list changed; streaming it to kubelet");
  PublishNode();
  if (config_.remote_client && config_.remote_credentials.has_tokens() &&
      std::chrono::steady_clock::now() >= next_tidy_) {
    next_tidy_ = std::chrono::steady_clock::now() + config_.remote_credentials_tidy;
    if (!service_->TidyRemoteCredentials(&err)) Log("remote credentials: " + err);
  }

  if (socket_.Gone()) {
    Log("plugin socket " + config_.plugin_dir + "/" + config_.socket_name + " is gone (kubelet restarted?): serving again");
    if (!Serve(&err)) {
      Log(err);
      return;
    }
  }
  std::string kubelet = FileIdentity(config_.plugin_dir + "/kubelet.sock");
  if (kubelet.empty()) return;  // kubelet not (yet) there
  if (registered_ && kubelet == kubelet_id_) return;
  if (!Register(&err)) {
    Log(err);
    return;
  }
  Log("registered " + config_.resource_name + " with kubelet");
  registered_ = true;
  kubelet_id_ = kubelet;
}

void DevicePluginRunner::Run(const std::atomic<bool>& stop) { RunPollLoop(config_.poll, stop, [this] { RunOnce(); }); }

void DevicePluginRunner::Stop() {
  if (!socket_.serving()) return;
  service_->Stop();
  socket_.Shutdown();
  unlink((config_.plugin_dir + "/" + config_.socket_name).c_str());
}

}  // namespace gslice::k8s
