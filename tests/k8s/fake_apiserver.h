// A small stand-in for the Kubernetes API server: the pod and node endpoints gslice reads
// and writes (list/get/merge-patch pods and nodes, pods/<name>/binding), in memory, over
// HTTP on 127.0.0.1 with a port of its own. Enough to drive the extender and device plugin
// end to end; it does no validation beyond what those calls need.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "gslice/k8s/kube_client.h"

namespace gslice::k8s::testing {

class FakeApiServer {
 public:
  FakeApiServer();
  ~FakeApiServer();

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  KubeConfig config() const {
    KubeConfig c;
    c.server = url();
    return c;
  }

  void AddPod(const nlohmann::json& pod);
  void AddNode(const nlohmann::json& node);
  void DeletePod(const std::string& ns, const std::string& name);
  void SetPodPhase(const std::string& ns, const std::string& name, const std::string& phase);
  nlohmann::json Pod(const std::string& ns, const std::string& name) const;
  nlohmann::json Node(const std::string& name) const;
  nlohmann::json Pods() const;  // all, as a list of pod objects

  // resource.k8s.io/v1 objects by API path ("/apis/resource.k8s.io/v1/resourceslices/x",
  // ".../namespaces/ns/resourceclaims/c"): ResourceSlices are created (POST), replaced (PUT,
  // with a matching resourceVersion) and deleted through the API; claims are put by tests.
  void PutResource(const std::string& path, nlohmann::json object);
  nlohmann::json Resource(const std::string& path) const;  // null when absent
  int resource_writes() const { return resource_writes_; }

  // The next n binding requests fail with HTTP 500.
  void FailBindings(int n) { fail_bindings_ = n; }
  // Each binding request waits this long before it takes effect.
  void DelayBindings(int ms) { binding_delay_ms_ = ms; }
  int bindings() const { return bindings_; }
  std::string last_authorization() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_authorization_;
  }

 private:
  void Route();
  mutable std::mutex mu_;
  std::map<std::string, nlohmann::json> pods_;  // "ns/name"
  std::map<std::string, nlohmann::json> nodes_;
  std::map<std::string, nlohmann::json> resources_;  // by API path
  int64_t resource_version_ = 0;
  std::atomic<int> resource_writes_{0};
  std::string last_authorization_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> fail_bindings_{0};
  std::atomic<int> bindings_{0};
  std::atomic<int> binding_delay_ms_{0};
};

// A pod asking one container for gslice resources.
nlohmann::json MakePod(const std::string& ns, const std::string& name, const std::string& uid,
                       int gpus, int64_t memory_mib, int compute, const std::string& cls = "");
// A node whose gslice.io/gpus annotation lists `gpus` GPUs of `mib` each.
nlohmann::json MakeNode(const std::string& name, int gpus, int64_t mib, int slices_per_gpu = 0);

}  // namespace gslice::k8s::testing
