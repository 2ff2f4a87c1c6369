// The gslice DRA kubelet plugin: kubelet's plugin registration and DRA node service (v1) over
// unix sockets, the node's ResourceSlice on the API server, and prepared claims as gsliced
// slices.
//
// Life cycle: serve the DRA service on <plugin_dir>/dra.sock and Registration on
// <registry_dir>/<driver>-reg.sock (kubelet finds it there, asks GetInfo, and calls the DRA
// service from then on); publish the node's ResourceSlice; then poll: GPU changes (the slice
// is published again with the next pool generation) and sockets removed (served again).
//
// NodePrepareResources, per claim: reads the ResourceClaim from the API server, plans its
// slices (dra_claims.h), creates each in gsliced (SliceStore), writes the claim's CDI spec
// to <cdi_dir>/gslice.io-<claim uid>.json, records the claim in <plugin_dir>/claims.json and
// answers the devices with their CDI IDs. A claim prepared before (also before a restart of
// the plugin: the record is read back at start) is answered from the record without touching
// anything. NodeUnprepareResources deletes the claim's slices, CDI spec and record; a claim
// that is not prepared is already unprepared.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dra/v1/api.grpc.pb.h"
#include "gslice/k8s/device_plugin.h"
#include "gslice/k8s/dra_claims.h"
#include "gslice/k8s/gpu_source.h"
#include "gslice/k8s/kube_client.h"
#include "gslice/k8s/kubelet_plugin.h"
#include "pluginregistration/v1/api.grpc.pb.h"

namespace grpc {
class Server;
}

namespace gslice::k8s {

namespace drapb = ::k8s::io::kubelet::pkg::apis::dra::v1;

// Where prepared slices live: gsliced (MakeGslicedSliceStore) on a node; tests may stand in.
class SliceStore {
 public:
  virtual ~SliceStore() = default;
  // Creates the slice of a claim's request (admitted like any slice; refused when it does
  // not fit). A slice of that name that exists already is taken as this one: a prepare
  // retried after the plugin died between creating it and recording the claim. Returns the
  // host path of the slice's usage file in the node ledger; "" with *error on failure.
  virtual std::string Create(const ClaimSlice& slice, std::string* error) = 0;
  // Deletes the slice; one that is gone already is not an error.
  virtual bool Delete(const std::string& name, std::string* error) = 0;
};

// gsliced's API on its unix socket (POST and DELETE /v1/slices), as an admin (root): each
// slice belongs to user <claim namespace>, of origin "api" (kept until deleted, also across
// gsliced restarts), with the claim's namespace and name as its pod and namespace. The usage
// file is found in the node ledger at ledger_path.
std::unique_ptr<SliceStore> MakeGslicedSliceStore(const std::string& socket, const std::string& ledger_path);

struct DraPluginConfig {
  std::string driver = std::string(kDraDriver);
  std::string node_name;
  std::string registry_dir = "/var/lib/kubelet/plugins_registry";
  std::string plugin_dir = "/var/lib/kubelet/plugins/gslice.io";  // dra.sock and claims.json
  std::string cdi_dir = "/var/run/cdi";
  // What a container of a claim gets (shim, ledger, usage, suspend board, device nodes): the
  // same settings and the same edits as the device plugin's Allocate.
  DevicePluginConfig container;
  std::chrono::milliseconds poll{1000};
};

// One prepared claim as recorded (claims.json).
struct PreparedClaim {
  std::string uid, namespace_name, name;
  std::vector<std::string> slices;  // gsliced slice names
  struct Device {
    std::string request, pool, device, cdi_id;
  };
  std::vector<Device> devices;
};

class DraNodeService final : public drapb::DRAPlugin::Service {
 public:
  DraNodeService(DraPluginConfig config, const KubeClient* kube, SliceStore* store);

  // Reads the record of prepared claims; false with *error when it exists but cannot be read.
  bool Load(std::string* error);
  void SetGpus(const std::vector<GpuInfo>& gpus);
  std::map<std::string, PreparedClaim> prepared() const;

  grpc::Status NodePrepareResources(grpc::ServerContext*, const drapb::NodePrepareResourcesRequest* req,
                                    drapb::NodePrepareResourcesResponse* out) override;
  grpc::Status NodeUnprepareResources(grpc::ServerContext*, const drapb::NodeUnprepareResourcesRequest* req,
                                      drapb::NodeUnprepareResourcesResponse* out) override;

  std::string CdiSpecPath(const std::string& claim_uid) const;
  std::string RecordPath() const;

 private:
  // REQUIRES: mu_ held.
  std::string Prepare(const drapb::Claim& claim, PreparedClaim* out);
  std::string Unprepare(const PreparedClaim& claim);
  bool Save(std::string* error) const;

  const DraPluginConfig config_;
  const KubeClient* kube_;
  SliceStore* store_;
  mutable std::mutex mu_;  // one prepare or unprepare at a time; guards gpus_ and prepared_
  std::vector<GpuInfo> gpus_;
  std::map<std::string, PreparedClaim> prepared_;  // by claim UID
};

// Registration as kubelet's plugin watcher asks it.
class DraRegistrationService final : public ::pluginregistration::Registration::Service {
 public:
  DraRegistrationService(std::string driver, std::string endpoint)
      : driver_(std::move(driver)), endpoint_(std::move(endpoint)) {}
  grpc::Status GetInfo(grpc::ServerContext*, const ::pluginregistration::InfoRequest*,
                       ::pluginregistration::PluginInfo* out) override;
  grpc::Status NotifyRegistrationStatus(grpc::ServerContext*, const ::pluginregistration::RegistrationStatus* status,
                                        ::pluginregistration::RegistrationStatusResponse*) override;
  int registrations() const { return registrations_; }

 private:
  const std::string driver_, endpoint_;
  std::atomic<int> registrations_{0};
};

class DraPluginRunner {
 public:
  DraPluginRunner(DraPluginConfig config, GpuSource* source, const KubeClient* kube, SliceStore* store);
  ~DraPluginRunner();

  // First discovery, the record of prepared claims, serve both sockets, publish the
  // ResourceSlice (a failure to publish is retried by RunOnce, not an error here).
  bool Start(std::string* error);
  void RunOnce();
  void Run(const std::atomic<bool>& stop);
  // Stops serving and removes the registration socket (kubelet then forgets the plugin);
  // prepared claims, their slices and CDI specs stay.
  void Stop();

  DraNodeService* service() { return service_.get(); }
  int registrations() const { return registration_ ? registration_->registrations() : 0; }
  int64_t generation() const { return generation_; }
  std::string dra_socket() const { return config_.plugin_dir + "/dra.sock"; }
  std::string registration_socket() const { return config_.registry_dir + "/" + config_.driver + "-reg.sock"; }

 private:
  bool Serve(std::string* error);
  bool Publish(std::string* error);

  DraPluginConfig config_;
  GpuSource* source_;
  const KubeClient* kube_;
  SliceStore* store_;
  std::unique_ptr<DraNodeService> service_;  // null until Start
  std::unique_ptr<DraRegistrationService> registration_;
  // Declared after the services they serve: destroyed (shut down) before them.
  PluginSocket dra_, registration_socket_;
  std::vector<GpuInfo> gpus_;
  std::string published_;  // the devices last published (JSON), "" when not yet
  static constexpr int kRecheckPolls = 60;
  int polls_since_check_ = 0;
  int64_t generation_ = 0;
};

}  // namespace gslice::k8s
