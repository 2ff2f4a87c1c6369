// A stand-in for kubelet's plugin watcher and DRA manager, speaking the same protos: it looks
// for registration sockets in a plugins_registry folder, asks each GetInfo, reports the
// outcome with NotifyRegistrationStatus (accepting only DRA plugins that serve v1.DRAPlugin),
// and then calls the plugin's DRA service at the endpoint it named.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "dra/v1/api.grpc.pb.h"
#include "pluginregistration/v1/api.grpc.pb.h"

namespace gslice::k8s::testing {

namespace drapb = ::k8s::io::kubelet::pkg::apis::dra::v1;

class FakeDraKubelet {
 public:
  explicit FakeDraKubelet(std::string registry_dir) : registry_dir_(std::move(registry_dir)) {}

  // Waits for a registration socket, registers the plugin behind it. False with *error when
  // none appears in time or the plugin is not one kubelet would accept.
  bool Register(std::chrono::milliseconds timeout, std::string* error);
  const ::pluginregistration::PluginInfo& info() const { return info_; }

  drapb::NodePrepareResourcesResponse Prepare(const drapb::Claim& claim, grpc::Status* status = nullptr);
  drapb::NodeUnprepareResourcesResponse Unprepare(const drapb::Claim& claim, grpc::Status* status = nullptr);

 private:
  std::string registry_dir_;
  ::pluginregistration::PluginInfo info_;
  std::unique_ptr<drapb::DRAPlugin::Stub> stub_;
};

drapb::Claim MakeClaimRef(const std::string& ns, const std::string& name, const std::string& uid);

}  // namespace gslice::k8s::testing
