#include "fake_kubelet.h"

#include <unistd.h>

namespace gslice::k8s::testing {

FakeKubelet::FakeKubelet(std::string dir) : dir_(std::move(dir)) {
  std::string path = dir_ + "/kubelet.sock";
  unlink(path.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + path, grpc::InsecureServerCredentials());
  builder.RegisterService(this);
  server_ = builder.BuildAndStart();
}

FakeKubelet::~FakeKubelet() { Shutdown(); }

grpc::Status FakeKubelet::Register(grpc::ServerContext*, const v1beta1::RegisterRequest* req, v1beta1::Empty*) {
  if (req->version() != "v1beta1")
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unsupported version " + req->version());
  std::lock_guard<std::mutex> lock(mu_);
  registrations_.push_back(*req);
  cv_.notify_all();
  return grpc::Status::OK;
}

bool FakeKubelet::WaitForRegistrations(size_t n, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return registrations_.size() >= n; });
}

v1beta1::RegisterRequest FakeKubelet::last_registration() {
  std::lock_guard<std::mutex> lock(mu_);
  return registrations_.empty() ? v1beta1::RegisterRequest() : registrations_.back();
}

std::unique_ptr<v1beta1::DevicePlugin::Stub> FakeKubelet::Dial() {
  auto channel = grpc::CreateChannel("unix://" + dir_ + "/" + last_registration().endpoint(),
                                     grpc::InsecureChannelCredentials());
  return v1beta1::DevicePlugin::NewStub(channel);
}

void FakeKubelet::Watch() {
  watch_ctx_ = std::make_unique<grpc::ClientContext>();
  auto stub = Dial();
  watch_thread_ = std::thread([this, stub = std::move(stub)] {
    v1beta1::Empty empty;
    auto reader = stub->ListAndWatch(watch_ctx_.get(), empty);
    v1beta1::ListAndWatchResponse list;
    while (reader->Read(&list)) {
      std::lock_guard<std::mutex> lock(mu_);
      lists_.push_back(list);
      cv_.notify_all();
    }
    reader->Finish();
  });
}

bool FakeKubelet::WaitForList(const std::function<bool(const v1beta1::ListAndWatchResponse&)>& pred,
                              std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] {
    for (const auto& l : lists_)
      if (pred(l)) return true;
    return false;
  });
}

size_t FakeKubelet::list_count() {
  std::lock_guard<std::mutex> lock(mu_);
  return lists_.size();
}

void FakeKubelet::Shutdown() {
  if (watch_ctx_) watch_ctx_->TryCancel();
  if (watch_thread_.joinable()) watch_thread_.join();
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_.reset();
  }
}

int CountHealth(const v1beta1::ListAndWatchResponse& list, const std::string& health, const std::string& gpu_prefix) {
  int n = 0;
  for (const auto& d : list.devices())
    if (d.health() == health && d.id().rfind(gpu_prefix, 0) == 0) ++n;
  return n;
}

}  // namespace gslice::k8s::testing
