#include "gslice/k8s/kube_client.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <httplib.h>

namespace gslice::k8s {

using nlohmann::json;

namespace {

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  while (!out->empty() && (out->back() == '\n' || out->back() == '\r' || out->back() == ' ')) out->pop_back();
  return true;
}

json AnnotationPatch(const std::map<std::string, std::string>& annotations) {
  json a = json::object();
  for (const auto& [k, v] : annotations) a[k] = v;
  return json{{"metadata", {{"annotations", a}}}};
}

}  // namespace

std::string UrlEncode(const std::string& s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

bool KubeConfig::InCluster(KubeConfig* out, std::string* error) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !port) {
    *error = "not running in a pod (KUBERNETES_SERVICE_HOST/PORT unset): pass --apiserver";
    return false;
  }
  const std::string dir = "/var/run/secrets/kubernetes.io/serviceaccount/";
  KubeConfig c;
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6
  c.server = "https://" + h + ":" + port;
  if (!ReadFile(dir + "token", &c.token)) {
    *error = "cannot read " + dir + "token: is a service account mounted?";
    return false;
  }
  c.token_file = dir + "token";
  c.ca_file = dir + "ca.crt";
  *out = c;
  return true;
}

KubeResult KubeClient::Request(const std::string& method, const std::string& path,
                               const std::string& body, const std::string& content_type) const {
  KubeResult r;
  httplib::Client cli(config_.server);
  if (!cli.is_valid()) {
    r.error = "bad API server address '" + config_.server + "'";
    return r;
  }
  cli.set_connection_timeout(config_.timeout_seconds, 0);
  cli.set_read_timeout(config_.timeout_seconds, 0);
  cli.set_write_timeout(config_.timeout_seconds, 0);
  std::string token = config_.token;
  if (!config_.token_file.empty() && !ReadFile(config_.token_file, &token)) {
    r.error = "cannot read the API token " + config_.token_file;
    return r;
  }
  if (!token.empty()) cli.set_bearer_token_auth(token);
  if (!config_.ca_file.empty()) cli.set_ca_cert_path(config_.ca_file.c_str());
  httplib::Headers headers{{"Accept", "application/json"}};
  if (method != "GET" && method != "POST" && method != "PATCH" && method != "PUT" && method != "DELETE") {
    r.error = "unsupported method " + method;
    return r;
  }
  httplib::Result res = method == "GET"    ? cli.Get(path, headers)
                        : method == "POST" ? cli.Post(path, headers, body, content_type)
                        : method == "PUT"  ? cli.Put(path, headers, body, content_type)
                        : method == "DELETE" ? cli.Delete(path, headers, body, content_type)
                                           : cli.Patch(path, headers, body, content_type);
  if (!res) {
    r.error = method + " " + path + ": " + httplib::to_string(res.error()) + " (API server " +
              config_.server + ")";
    return r;
  }
  r.status = res->status;
  r.body = json::parse(res->body, nullptr, false);
  if (res->status < 200 || res->status >= 300) {
    std::string msg;
    if (r.body.is_object() && r.body.contains("message") && r.body["message"].is_string())
      msg = r.body["message"].get<std::string>();
    r.error = method + " " + path + ": HTTP " + std::to_string(res->status) +
              (msg.empty() ? "" : ": " + msg);
  } else if (r.body.is_discarded()) {
    r.error = method + " " + path + ": response is not JSON";
  }
  return r;
}

KubeResult KubeClient::ListPods(const std::string& field_selector) const {
  std::string path = "/api/v1/pods";
  if (!field_selector.empty()) path += "?fieldSelector=" + UrlEncode(field_selector);
  return Request("GET", path, "", "");
}

KubeResult KubeClient::GetPod(const std::string& ns, const std::string& name) const {
  return Request("GET", "/api/v1/namespaces/" + ns + "/pods/" + name, "", "");
}

KubeResult KubeClient::PatchPodAnnotations(const std::string& ns, const std::string& name,
                                           const std::map<std::string, std::string>& annotations) const {
  return Request("PATCH", "/api/v1/namespaces/" + ns + "/pods/" + name,
                 AnnotationPatch(annotations).dump(), "application/merge-patch+json");
}

KubeResult KubeClient::BindPod(const std::string& ns, const std::string& name, const std::string& uid,
                               const std::string& node) const {
  json binding = {{"apiVersion", "v1"},
                  {"kind", "Binding"},
                  {"metadata", {{"name", name}, {"namespace", ns}}},
                  {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
  if (!uid.empty()) binding["metadata"]["uid"] = uid;
  return Request("POST", "/api/v1/namespaces/" + ns + "/pods/" + name + "/binding", binding.dump(),
                 "application/json");
}

KubeResult KubeClient::Call(const std::string& method, const std::string& path, const json& body) const {
  return Request(method, path, body.is_null() ? "" : body.dump(), body.is_null() ? "" : "application/json");
}

KubeResult KubeClient::ListNodes() const { return Request("GET", "/api/v1/nodes", "", ""); }

KubeResult KubeClient::PatchNodeAnnotations(const std::string& name,
                                            const std::map<std::string, std::string>& annotations) const {
  return Request("PATCH", "/api/v1/nodes/" + name, AnnotationPatch(annotations).dump(),
                 "application/merge-patch+json");
}

}  // namespace gslice::k8s
