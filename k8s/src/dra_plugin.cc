#include "gslice/k8s/dra_plugin.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "gslice/k8s/pod_user.h"
#include "gslice/suspend_board.h"

namespace gslice::k8s {

using nlohmann::json;

namespace {

constexpr const char* kRegistrationType = "DRAPlugin";
constexpr const char* kServiceVersion = "v1.DRAPlugin";

void Log(const std::string& msg) { std::fprintf(stderr, "gslice-dra-plugin: %s\n", msg.c_str()); }

// Writes path whole or not at all: a temporary file beside it, fsync, rename.
bool WriteFileAtomically(const std::string& path, const std::string& text, mode_t mode, std::string* error) {
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) {
    *error = "cannot write " + tmp + ": " + std::strerror(errno);
    return false;
  }
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const bool ok = done == text.size() && fchmod(fd, mode) == 0 && fsync(fd) == 0;
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    *error = "cannot write " + path + ": " + std::strerror(errno);
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

json ToJson(const PreparedClaim& c) {
  json devices = json::array();
  for (const auto& d : c.devices)
    devices.push_back({{"request", d.request}, {"pool", d.pool}, {"device", d.device}, {"cdiId", d.cdi_id}});
  return {{"uid", c.uid}, {"namespace", c.namespace_name}, {"name", c.name}, {"slices", c.slices}, {"devices", devices}};
}

bool FromJson(const json& j, PreparedClaim* c) {
  try {
    c->uid = j.at("uid").get<std::string>();
    c->namespace_name = j.at("namespace").get<std::string>();
    c->name = j.at("name").get<std::string>();
    c->slices = j.at("slices").get<std::vector<std::string>>();
    for (const json& d : j.at("devices"))
      c->devices.push_back({d.at("request").get<std::string>(), d.at("pool").get<std::string>(),
                            d.at("device").get<std::string>(), d.at("cdiId").get<std::string>()});
    return !c->uid.empty();
  } catch (const json::exception&) {
    return false;
  }
}

void Answer(const PreparedClaim& c, drapb::NodePrepareResourceResponse* out) {
  for (const auto& d : c.devices) {
    auto* dev = out->add_devices();
    dev->add_request_names(d.request);
    dev->set_pool_name(d.pool);
    dev->set_device_name(d.device);
    if (!d.cdi_id.empty()) dev->add_cdi_device_ids(d.cdi_id);
  }
}

// The uid the containers of the pods that reserved a claim run as (a container's
// securityContext.runAsUser, else its pod's): -1 unless every container says and all agree
// (then the slice stays root's; the image's USER is not visible here).
int64_t ClaimRunAsUser(const KubeClient& kube, const json& claim) {
  const json* reserved = nullptr;
  if (claim.contains("status") && claim["status"].is_object() && claim["status"].contains("reservedFor"))
    reserved = &claim["status"]["reservedFor"];
  if (!reserved || !reserved->is_array() || reserved->empty()) return -1;
  const std::string ns = claim["metadata"].value("namespace", "");
  int64_t uid = -2;
  for (const json& r : *reserved) {
    if (!r.is_object() || r.value("resource", "") != "pods") return -1;
    KubeResult pod = kube.GetPod(ns, r.value("name", ""));
    if (!pod.ok() || !pod.body.is_object() || !pod.body.contains("spec")) return -1;
    const json& spec = pod.body["spec"];
    const int64_t pod_uid = SecurityContextRunAsUser(spec);
    if (!spec.contains("containers") || !spec["containers"].is_array()) return -1;
    for (const json& c : spec["containers"]) {
      int64_t u = SecurityContextRunAsUser(c);
      if (u < 0) u = pod_uid;
      if (u < 0 || (uid != -2 && u != uid)) return -1;
      uid = u;
    }
  }
  return uid >= 0 ? uid : -1;
}

// Whether every pod the claim is reserved for runs in the host's IPC namespace (spec.hostIPC),
// as an MPS client must (PlaceOnMps); false when any does not, or cannot be read.
bool ClaimHostIpc(const KubeClient& kube, const json& claim) {
  if (!claim.contains("status") || !claim["status"].is_object() || !claim["status"].contains("reservedFor")) return false;
  const json& reserved = claim["status"]["reservedFor"];
  if (!reserved.is_array() || reserved.empty()) return false;
  const std::string ns = claim["metadata"].value("namespace", "");
  for (const json& r : reserved) {
    if (!r.is_object() || r.value("resource", "") != "pods") return false;
    KubeResult pod = kube.GetPod(ns, r.value("name", ""));
    if (!pod.ok() || !pod.body.is_object() || !pod.body.contains("spec") || !pod.body["spec"].is_object()) return false;
    const json& spec = pod.body["spec"];
    if (!spec.contains("hostIPC") || !spec["hostIPC"].is_boolean() || !spec["hostIPC"].get<bool>()) return false;
  }
  return true;
}

}  // namespace

// ---- DraNodeService ------------------------------------------------------------------------

DraNodeService::DraNodeService(DraPluginConfig config, const KubeClient* kube, SliceStore* store)
    : config_(std::move(config)), kube_(kube), store_(store) {}

std::string DraNodeService::CdiSpecPath(const std::string& claim_uid) const {
  return config_.cdi_dir + "/" + config_.driver + "-" + claim_uid + ".json";
}

std::string DraNodeService::RecordPath() const { return config_.plugin_dir + "/claims.json"; }

bool DraNodeService::Load(std::string* error) {
  std::lock_guard<std::mutex> lock(mu_);
  std::ifstream in(RecordPath());
  if (!in) return true;  // nothing prepared yet
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("claims") || !j["claims"].is_array()) {
    *error = RecordPath() + " is not a record of prepared claims: move it away to start afresh "
             "(the claims it held must then be unprepared by hand: gslice delete <slice>)";
    return false;
  }
  for (const json& c : j["claims"]) {
    PreparedClaim p;
    if (!FromJson(c, &p)) {
      *error = RecordPath() + ": a malformed entry " + c.dump();
      return false;
    }
    prepared_[p.uid] = std::move(p);
  }
  return true;
}

bool DraNodeService::Save(std::string* error) const {
  json claims = json::array();
  for (const auto& [uid, c] : prepared_) claims.push_back(ToJson(c));
  return WriteFileAtomically(RecordPath(), json{{"claims", claims}}.dump(1) + "\n", 0600, error);
}

void DraNodeService::SetGpus(const std::vector<GpuInfo>& gpus) {
  std::lock_guard<std::mutex> lock(mu_);
  gpus_ = gpus;
}

std::map<std::string, PreparedClaim> DraNodeService::prepared() const {
  std::lock_guard<std::mutex> lock(mu_);
  return prepared_;
}

std::string DraNodeService::Prepare(const drapb::Claim& claim, PreparedClaim* out) {
  if (auto it = prepared_.find(claim.uid()); it != prepared_.end()) {
    *out = it->second;
    return "";
  }
  if (!kube_) return "no API server configured: cannot read the claim";
  const std::string path = "/apis/resource.k8s.io/v1/namespaces/" + claim.namespace_() + "/resourceclaims/" + claim.name();
  KubeResult r = kube_->Call("GET", path);
  if (!r.ok()) return "reading the claim: " + r.error;
  std::string uid;
  if (r.body.is_object() && r.body.contains("metadata") && r.body["metadata"].is_object())
    uid = r.body["metadata"].value("uid", "");
  if (uid != claim.uid())
    return "claim " + claim.namespace_() + "/" + claim.name() + " has UID " + uid + ", not " + claim.uid() +
           " (deleted and made again?)";
  std::string why;
  auto slices = PlanClaim(r.body, config_.driver, config_.node_name, gpus_, &why);
  if (!slices) return why;
  const int64_t owner = ClaimRunAsUser(*kube_, r.body);
  const bool host_ipc = ClaimHostIpc(*kube_, r.body);
  for (ClaimSlice& s : *slices) {
    s.slice.run_as_user = owner;
    s.slice.host_ipc = host_ipc;
  }

  PreparedClaim p{claim.uid(), claim.namespace_(), claim.name(), {}, {}};
  std::vector<std::string> usage;
  auto undo = [&] {
    for (const auto& name : p.slices) {
      std::string e;
      if (!store_->Delete(name, &e)) Log("claim " + claim.name() + ": cannot delete slice " + name + ": " + e);
    }
  };
  for (const ClaimSlice& s : *slices) {
    const std::string name = SliceNameFor(s.slice);
    std::string e;
    if (!CreatePodPartition(config_.container.board_host_path.c_str(), SuspendPartitionFor(s.slice).c_str(), &e)) {
      undo();
      return "suspend board: " + e;
    }
    std::string u = store_->Create(s, &e);
    if (u.empty()) {
      undo();
      return "slice " + name + ": " + e;
    }
    p.slices.push_back(name);
    usage.push_back(u);
    bool first = true;
    for (const auto& [pool, device] : s.devices) {
      // One CDI device per slice: the first of the request's devices carries it.
      p.devices.push_back({s.request, pool, device, first ? CdiDeviceId(name) : ""});
      first = false;
    }
  }
  std::string e;
  std::error_code ec;
  std::filesystem::create_directories(config_.cdi_dir, ec);
  if (!WriteFileAtomically(CdiSpecPath(claim.uid()), BuildCdiSpec(config_.container, *slices, usage).dump(2) + "\n",
                           0644, &e)) {
    undo();
    return "CDI spec: " + e;
  }
  prepared_[p.uid] = p;
  if (!Save(&e)) {
    prepared_.erase(p.uid);
    unlink(CdiSpecPath(claim.uid()).c_str());
    undo();
    return "recording the claim: " + e;
  }
  *out = std::move(p);
  return "";
}

std::string DraNodeService::Unprepare(const PreparedClaim& claim) {
  std::string failed;
  for (const auto& name : claim.slices) {
    std::string e;
    if (!store_->Delete(name, &e)) failed += (failed.empty() ? "" : "; ") + ("slice " + name + ": " + e);
  }
  if (!failed.empty()) return failed;  // kept: kubelet asks again
  unlink(CdiSpecPath(claim.uid).c_str());
  return "";
}

grpc::Status DraNodeService::NodePrepareResources(grpc::ServerContext*, const drapb::NodePrepareResourcesRequest* req,
                                                  drapb::NodePrepareResourcesResponse* out) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& claim : req->claims()) {
    auto& answer = (*out->mutable_claims())[claim.uid()];
    PreparedClaim p;
    std::string error = Prepare(claim, &p);
    if (!error.empty()) {
      Log("prepare " + claim.namespace_() + "/" + claim.name() + ": " + error);
      answer.set_error("gslice: " + error);
      continue;
    }
    Answer(p, &answer);
    std::string names;
    for (const auto& s : p.slices) names += (names.empty() ? "" : ", ") + s;
    Log("prepared " + claim.namespace_() + "/" + claim.name() + " as " + names);
  }
  return grpc::Status::OK;
}

grpc::Status DraNodeService::NodeUnprepareResources(grpc::ServerContext*,
                                                    const drapb::NodeUnprepareResourcesRequest* req,
                                                    drapb::NodeUnprepareResourcesResponse* out) {
  std::lock_guard<std::mutex> lock(mu_);
  bool changed = false;
  for (const auto& claim : req->claims()) {
    auto& answer = (*out->mutable_claims())[claim.uid()];
    auto it = prepared_.find(claim.uid());
    if (it == prepared_.end()) continue;  // never prepared here, or unprepared already
    std::string error = Unprepare(it->second);
    if (!error.empty()) {
      Log("unprepare " + claim.namespace_() + "/" + claim.name() + ": " + error);
      answer.set_error("gslice: " + error);
      continue;
    }
    prepared_.erase(it);
    changed = true;
    Log("unprepared " + claim.namespace_() + "/" + claim.name());
  }
  std::string e;
  if (changed && !Save(&e)) {
    // The slices are gone; a stale record only makes a later unprepare find nothing to do.
    Log("recording unprepared claims: " + e);
  }
  return grpc::Status::OK;
}

// ---- DraRegistrationService ----------------------------------------------------------------

grpc::Status DraRegistrationService::GetInfo(grpc::ServerContext*, const ::pluginregistration::InfoRequest*,
                                             ::pluginregistration::PluginInfo* out) {
  out->set_type(kRegistrationType);
  out->set_name(driver_);
  out->set_endpoint(endpoint_);
  out->add_supported_versions(kServiceVersion);
  return grpc::Status::OK;
}

grpc::Status DraRegistrationService::NotifyRegistrationStatus(grpc::ServerContext*,
                                                              const ::pluginregistration::RegistrationStatus* status,
                                                              ::pluginregistration::RegistrationStatusResponse*) {
  if (status->plugin_registered()) {
    ++registrations_;
    Log("registered with kubelet as DRA driver " + driver_);
  } else {
    Log("kubelet refused the registration: " + status->error());
  }
  return grpc::Status::OK;
}

// ---- DraPluginRunner -----------------------------------------------------------------------

DraPluginRunner::DraPluginRunner(DraPluginConfig config, GpuSource* source, const KubeClient* kube, SliceStore* store)
    : config_(std::move(config)), source_(source), kube_(kube), store_(store) {}

DraPluginRunner::~DraPluginRunner() { Stop(); }

bool DraPluginRunner::Start(std::string* error) {
  if (!source_->Discover(&gpus_, error)) return false;
  std::error_code ec;
  std::filesystem::create_directories(config_.plugin_dir, ec);
  if (ec) {
    *error = "cannot create " + config_.plugin_dir + ": " + ec.message();
    return false;
  }
  if (!Serve(error)) return false;
  std::string why;
  if (!Publish(&why)) Log("publishing the ResourceSlice: " + why + " (retried)");
  return true;
}

bool DraPluginRunner::Serve(std::string* error) {
  dra_.Shutdown();
  registration_socket_.Shutdown();
  // A fresh service per server (a service is registered with one server for its life); the
  // prepared claims come back from their record.
  auto fresh = std::make_unique<DraNodeService>(config_, kube_, store_);
  fresh->SetGpus(gpus_);
  if (!fresh->Load(error)) return false;
  service_ = std::move(fresh);
  // The DRA service first: kubelet calls it as soon as it sees the registration socket.
  if (!dra_.Serve(dra_socket(), service_.get(), "the DRA service", error)) return false;
  registration_ = std::make_unique<DraRegistrationService>(config_.driver, dra_socket());
  return registration_socket_.Serve(registration_socket(), registration_.get(), "plugin registration", error);
}

bool DraPluginRunner::Publish(std::string* error) {
  if (!kube_ || config_.node_name.empty()) return true;
  const std::string devices = BuildResourceSlice(config_.driver, config_.node_name, gpus_, 0)["spec"]["devices"].dump();
  if (devices == published_) return true;
  const std::string name = ResourceSliceName(config_.driver, config_.node_name);
  const std::string path = "/apis/resource.k8s.io/v1/resourceslices";
  KubeResult got = kube_->Call("GET", path + "/" + name);
  KubeResult r;
  if (got.status == 404) {
    r = kube_->Call("POST", path, BuildResourceSlice(config_.driver, config_.node_name, gpus_, 1));
    if (r.ok()) generation_ = 1;
  } else if (!got.ok()) {
    *error = got.error;
    return false;
  } else {
    json spec = got.body.is_object() && got.body.contains("spec") ? got.body["spec"] : json::object();
    if (!spec.is_object()) spec = json::object();
    int64_t was = 0;
    if (spec.contains("pool") && spec["pool"].is_object() && spec["pool"].contains("generation") &&
        spec["pool"]["generation"].is_number_integer())
      was = spec["pool"]["generation"].get<int64_t>();
    if (spec.value("nodeName", "") == config_.node_name && spec.contains("devices") && spec["devices"].dump() == devices) {
      generation_ = was;  // a restart: what is there is current
      published_ = devices;
      return true;
    }
    json slice = BuildResourceSlice(config_.driver, config_.node_name, gpus_, was + 1);
    if (got.body.contains("metadata") && got.body["metadata"].is_object())
      slice["metadata"]["resourceVersion"] = got.body["metadata"].value("resourceVersion", "");
    r = kube_->Call("PUT", path + "/" + name, slice);
    if (r.ok()) generation_ = was + 1;
  }
  if (!r.ok()) {
    *error = r.error;
    return false;
  }
  published_ = devices;
  Log("published ResourceSlice " + name + " (pool generation " + std::to_string(generation_) + ")");
  return true;
}

void DraPluginRunner::RunOnce() {
  std::vector<GpuInfo> gpus;
  std::string err;
  if (!source_->Discover(&gpus, &err)) {
    Log("GPU discovery: " + err + "; offering no GPU until it answers");
    gpus = gpus_;
    for (auto& g : gpus) g.healthy = false;
  }
  gpus_ = gpus;
  if (service_) service_->SetGpus(gpus_);
  // Now and then the published slice is read back (a GET, nothing written when it is
  // current): kubelet deletes a driver's ResourceSlices when the driver stays unregistered,
  // e.g. across a kubelet restart, and the plugin then publishes it again.
  if (++polls_since_check_ >= kRecheckPolls) {
    polls_since_check_ = 0;
    published_.clear();
  }
  if (!Publish(&err)) Log("publishing the ResourceSlice: " + err);
  if (dra_.Gone() || registration_socket_.Gone()) {
    Log("a plugin socket is gone (kubelet restarted?): serving again");
    if (!Serve(&err)) Log(err);
  }
}

void DraPluginRunner::Run(const std::atomic<bool>& stop) { RunPollLoop(config_.poll, stop, [this] { RunOnce(); }); }

void DraPluginRunner::Stop() {
  if (!dra_.serving() && !registration_socket_.serving()) return;
  // The registration socket first: kubelet stops calling a plugin whose socket is gone.
  unlink(registration_socket().c_str());
  registration_socket_.Shutdown();
  dra_.Shutdown();
  unlink(dra_socket().c_str());
}

}  // namespace gslice::k8s
