// A small client for the few Kubernetes API calls gslice makes: list/get/patch pods, bind a
// pod, list/patch nodes. Plain HTTP (a test server, `kubectl proxy`) or HTTPS with a bearer
// token (in-cluster service account). Each call opens its own connection, so the client may
// be used from many threads at once.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace gslice::k8s {

struct KubeConfig {
  std::string server;   // "https://10.0.0.1:443" or "http://127.0.0.1:8001"
  std::string token;       // bearer token; empty: none
  std::string token_file;  // read before every request when set (service account tokens rotate)
  std::string ca_file;  // CA bundle for https; empty: system default
  int timeout_seconds = 10;

  // The in-cluster configuration (KUBERNETES_SERVICE_HOST/PORT and the service account
  // files); returns false with *error when not running in a pod.
  static bool InCluster(KubeConfig* out, std::string* error);
};

struct KubeResult {
  int status = 0;     // HTTP status; 0 when no response came
  std::string error;  // empty on success (2xx)
  nlohmann::json body;
  bool ok() const { return error.empty(); }
};

class KubeClient {
 public:
  explicit KubeClient(KubeConfig config) : config_(std::move(config)) {}

  // field_selector e.g. "spec.nodeName=node-1"; empty: all pods in all namespaces.
  KubeResult ListPods(const std::string& field_selector = "") const;
  KubeResult GetPod(const std::string& ns, const std::string& name) const;
  KubeResult PatchPodAnnotations(const std::string& ns, const std::string& name,
                                 const std::map<std::string, std::string>& annotations) const;
  // POST pods/<name>/binding: what a scheduler does to place a pod.
  KubeResult BindPod(const std::string& ns, const std::string& name, const std::string& uid,
                     const std::string& node) const;
  KubeResult ListNodes() const;
  KubeResult PatchNodeAnnotations(const std::string& name,
                                  const std::map<std::string, std::string>& annotations) const;

  // Any other object: GET, POST, PUT (a JSON body) or DELETE on an API path
  // ("/apis/resource.k8s.io/v1/resourceslices/x"). body: null for none.
  KubeResult Call(const std::string& method, const std::string& path,
                  const nlohmann::json& body = nullptr) const;

  const KubeConfig& config() const { return config_; }

 private:
  KubeResult Request(const std::string& method, const std::string& path, const std::string& body,
                     const std::string& content_type) const;
  KubeConfig config_;
};

// Percent-encodes a query parameter value.
std::string UrlEncode(const std::string& s);

}  // namespace gslice::k8s
