#include "fake_dra_kubelet.h"

#include <filesystem>
#include <thread>

namespace gslice::k8s::testing {

namespace fs = std::filesystem;

bool FakeDraKubelet::Register(std::chrono::milliseconds timeout, std::string* error) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  std::string socket;
  while (socket.empty() && std::chrono::steady_clock::now() < until) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(registry_dir_, ec))
      if (e.is_socket() && e.path().string().ends_with("-reg.sock")) socket = e.path().string();
    if (socket.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (socket.empty()) {
    *error = "no registration socket appeared in " + registry_dir_;
    return false;
  }
  auto reg = ::pluginregistration::Registration::NewStub(
      grpc::CreateChannel("unix://" + socket, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Status st = reg->GetInfo(&ctx, ::pluginregistration::InfoRequest(), &info_);
  if (!st.ok()) {
    *error = "GetInfo: " + st.error_message();
    return false;
  }
  // What kubelet checks before it accepts a DRA plugin.
  std::string refusal;
  bool v1 = false;
  for (const auto& v : info_.supported_versions()) v1 = v1 || v == "v1.DRAPlugin";
  if (info_.type() != "DRAPlugin") refusal = "type " + info_.type() + " is not DRAPlugin";
  else if (!v1) refusal = "no supported version is v1.DRAPlugin";
  else if (info_.endpoint().empty() || !fs::exists(info_.endpoint())) refusal = "endpoint " + info_.endpoint() + " does not exist";
  ::pluginregistration::RegistrationStatus status;
  status.set_plugin_registered(refusal.empty());
  status.set_error(refusal);
  ::pluginregistration::RegistrationStatusResponse resp;
  grpc::ClientContext nctx;
  nctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  st = reg->NotifyRegistrationStatus(&nctx, status, &resp);
  if (!refusal.empty() || !st.ok()) {
    *error = !refusal.empty() ? refusal : "NotifyRegistrationStatus: " + st.error_message();
    return false;
  }
  stub_ = drapb::DRAPlugin::NewStub(grpc::CreateChannel("unix://" + info_.endpoint(), grpc::InsecureChannelCredentials()));
  return true;
}

drapb::NodePrepareResourcesResponse FakeDraKubelet::Prepare(const drapb::Claim& claim, grpc::Status* status) {
  drapb::NodePrepareResourcesRequest req;
  *req.add_claims() = claim;
  drapb::NodePrepareResourcesResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::Status st = stub_->NodePrepareResources(&ctx, req, &resp);
  if (status) *status = st;
  return resp;
}

drapb::NodeUnprepareResourcesResponse FakeDraKubelet::Unprepare(const drapb::Claim& claim, grpc::Status* status) {
  drapb::NodeUnprepareResourcesRequest req;
  *req.add_claims() = claim;
  drapb::NodeUnprepareResourcesResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::Status st = stub_->NodeUnprepareResources(&ctx, req, &resp);
  if (status) *status = st;
  return resp;
}

drapb::Claim MakeClaimRef(const std::string& ns, const std::string& name, const std::string& uid) {
  drapb::Claim c;
  c.set_namespace_(ns);
  c.set_name(name);
  c.set_uid(uid);
  return c;
}

}  // namespace gslice::k8s::testing
