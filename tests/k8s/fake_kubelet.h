// A stand-in for the kubelet's device manager, speaking the same v1beta1 proto: it serves
// Registration on <dir>/kubelet.sock and, once a plugin registered, dials the plugin's
// endpoint and keeps a ListAndWatch stream open, recording every device list it receives.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "api.grpc.pb.h"

namespace gslice::k8s::testing {

class FakeKubelet final : public v1beta1::Registration::Service {
 public:
  explicit FakeKubelet(std::string dir);
  ~FakeKubelet() override;

  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* req, v1beta1::Empty*) override;

  bool WaitForRegistrations(size_t n, std::chrono::milliseconds timeout);
  v1beta1::RegisterRequest last_registration();

  // The plugin's service at the endpoint it registered.
  std::unique_ptr<v1beta1::DevicePlugin::Stub> Dial();
  // Opens ListAndWatch on a thread; lists arrive in lists().
  void Watch();
  // Waits until a received list satisfies pred.
  bool WaitForList(const std::function<bool(const v1beta1::ListAndWatchResponse&)>& pred,
                   std::chrono::milliseconds timeout);
  size_t list_count();

  // Stops serving and ends the watch: the kubelet process dies.
  void Shutdown();

 private:
  std::string dir_;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1beta1::RegisterRequest> registrations_;
  std::vector<v1beta1::ListAndWatchResponse> lists_;
  std::unique_ptr<grpc::ClientContext> watch_ctx_;
  std::thread watch_thread_;
};

// Counts devices by health in a list.
int CountHealth(const v1beta1::ListAndWatchResponse& list, const std::string& health,
                const std::string& gpu_prefix = "");

}  // namespace gslice::k8s::testing
