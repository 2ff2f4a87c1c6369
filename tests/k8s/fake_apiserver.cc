#include "fake_apiserver.h"

#include "gslice/k8s/resources.h"

namespace gslice::k8s::testing {

using nlohmann::json;

namespace {
void Reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}
json NotFound(const std::string& what) {
  return {{"kind", "Status"}, {"status", "Failure"}, {"message", what + " not found"}, {"code", 404}};
}
}  // namespace

FakeApiServer::FakeApiServer() {
  Route();
  port_ = server_.bind_to_any_port("127.0.0.1");
  thread_ = std::thread([this] { server_.listen_after_bind(); });
}

FakeApiServer::~FakeApiServer() {
  server_.stop();
  thread_.join();
}

void FakeApiServer::AddPod(const json& pod) {
  std::lock_guard<std::mutex> lock(mu_);
  pods_[pod["metadata"]["namespace"].get<std::string>() + "/" + pod["metadata"]["name"].get<std::string>()] = pod;
}

void FakeApiServer::AddNode(const json& node) {
  std::lock_guard<std::mutex> lock(mu_);
  nodes_[node["metadata"]["name"].get<std::string>()] = node;
}

void FakeApiServer::DeletePod(const std::string& ns, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  pods_.erase(ns + "/" + name);
}

void FakeApiServer::SetPodPhase(const std::string& ns, const std::string& name, const std::string& phase) {
  std::lock_guard<std::mutex> lock(mu_);
  pods_[ns + "/" + name]["status"]["phase"] = phase;
}

json FakeApiServer::Pod(const std::string& ns, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(ns + "/" + name);
  return it == pods_.end() ? json() : it->second;
}

json FakeApiServer::Node(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(name);
  return it == nodes_.end() ? json() : it->second;
}

json FakeApiServer::Pods() const {
  std::lock_guard<std::mutex> lock(mu_);
  json items = json::array();
  for (const auto& [k, p] : pods_) items.push_back(p);
  return items;
}

void FakeApiServer::PutResource(const std::string& path, json object) {
  std::lock_guard<std::mutex> lock(mu_);
  object["metadata"]["resourceVersion"] = std::to_string(++resource_version_);
  resources_[path] = std::move(object);
}

json FakeApiServer::Resource(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = resources_.find(path);
  return it == resources_.end() ? json() : it->second;
}

void FakeApiServer::Route() {
  const std::string slices = "/apis/resource.k8s.io/v1/resourceslices";
  server_.Post(slices, [this, slices](const httplib::Request& req, httplib::Response& res) {
    json obj = json::parse(req.body, nullptr, false);
    if (obj.is_discarded() || obj.value("kind", "") != "ResourceSlice" || !obj["metadata"].contains("name"))
      return Reply(res, 400, {{"message", "expected a ResourceSlice with a name"}});
    std::lock_guard<std::mutex> lock(mu_);
    const std::string path = slices + "/" + obj["metadata"]["name"].get<std::string>();
    if (resources_.count(path)) return Reply(res, 409, {{"message", "already exists"}});
    ++resource_writes_;
    obj["metadata"]["resourceVersion"] = std::to_string(++resource_version_);
    resources_[path] = obj;
    Reply(res, 201, obj);
  });
  server_.Put(slices + "/([^/]+)", [this, slices](const httplib::Request& req, httplib::Response& res) {
    json obj = json::parse(req.body, nullptr, false);
    if (obj.is_discarded()) return Reply(res, 400, {{"message", "bad JSON"}});
    std::lock_guard<std::mutex> lock(mu_);
    auto it = resources_.find(slices + "/" + std::string(req.matches[1]));
    if (it == resources_.end()) return Reply(res, 404, NotFound("resourceslice"));
    if (obj["metadata"].value("resourceVersion", "") != it->second["metadata"].value("resourceVersion", ""))
      return Reply(res, 409, {{"message", "the object has been modified"}});
    ++resource_writes_;
    obj["metadata"]["resourceVersion"] = std::to_string(++resource_version_);
    it->second = obj;
    Reply(res, 200, obj);
  });
  server_.Delete(slices + "/([^/]+)", [this, slices](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!resources_.erase(slices + "/" + std::string(req.matches[1]))) return Reply(res, 404, NotFound("resourceslice"));
    ++resource_writes_;
    Reply(res, 200, {{"kind", "Status"}, {"status", "Success"}});
  });
  server_.Get(R"(/apis/resource\.k8s\.io/v1/.+)", [this](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = resources_.find(req.path);
    if (it == resources_.end()) return Reply(res, 404, NotFound(req.path));
    Reply(res, 200, it->second);
  });

  server_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response&) {
    std::lock_guard<std::mutex> lock(mu_);
    last_authorization_ = req.get_header_value("Authorization");
    return httplib::Server::HandlerResponse::Unhandled;
  });
  server_.Get("/api/v1/pods", [this](const httplib::Request& req, httplib::Response& res) {
    std::string node;
    if (req.has_param("fieldSelector")) {
      std::string sel = req.get_param_value("fieldSelector");
      const std::string prefix = "spec.nodeName=";
      if (sel.rfind(prefix, 0) != 0) return Reply(res, 400, {{"message", "unsupported selector " + sel}});
      node = sel.substr(prefix.size());
    }
    std::lock_guard<std::mutex> lock(mu_);
    json items = json::array();
    for (const auto& [k, p] : pods_)
      if (node.empty() || p["spec"].value("nodeName", "") == node) items.push_back(p);
    Reply(res, 200, {{"kind", "PodList"}, {"apiVersion", "v1"}, {"items", items}});
  });
  server_.Get(R"(/api/v1/namespaces/([^/]+)/pods/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pods_.find(std::string(req.matches[1]) + "/" + std::string(req.matches[2]));
    if (it == pods_.end()) return Reply(res, 404, NotFound("pod"));
    Reply(res, 200, it->second);
  });
  server_.Patch(R"(/api/v1/namespaces/([^/]+)/pods/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Content-Type") != "application/merge-patch+json")
      return Reply(res, 415, {{"message", "expected a merge patch"}});
    json patch = json::parse(req.body, nullptr, false);
    if (patch.is_discarded()) return Reply(res, 400, {{"message", "bad JSON"}});
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pods_.find(std::string(req.matches[1]) + "/" + std::string(req.matches[2]));
    if (it == pods_.end()) return Reply(res, 404, NotFound("pod"));
    it->second.merge_patch(patch);
    Reply(res, 200, it->second);
  });
  server_.Post(R"(/api/v1/namespaces/([^/]+)/pods/([^/]+)/binding)", [this](const httplib::Request& req, httplib::Response& res) {
    ++bindings_;
    if (int ms = binding_delay_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    if (fail_bindings_ > 0) {
      --fail_bindings_;
      return Reply(res, 500, {{"message", "injected failure"}});
    }
    json b = json::parse(req.body, nullptr, false);
    if (b.is_discarded() || b.value("kind", "") != "Binding" || !b.contains("target"))
      return Reply(res, 400, {{"message", "expected a Binding"}});
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pods_.find(std::string(req.matches[1]) + "/" + std::string(req.matches[2]));
    if (it == pods_.end()) return Reply(res, 404, NotFound("pod"));
    if (!it->second["spec"].value("nodeName", "").empty())
      return Reply(res, 409, {{"message", "pod is already assigned to a node"}});
    std::string node = b["target"].value("name", "");
    if (!nodes_.count(node)) return Reply(res, 404, NotFound("node " + node));
    it->second["spec"]["nodeName"] = node;
    Reply(res, 201, {{"kind", "Status"}, {"status", "Success"}});
  });
  server_.Get("/api/v1/nodes", [this](const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu_);
    json items = json::array();
    for (const auto& [k, n] : nodes_) items.push_back(n);
    Reply(res, 200, {{"kind", "NodeList"}, {"apiVersion", "v1"}, {"items", items}});
  });
  server_.Patch(R"(/api/v1/nodes/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    json patch = json::parse(req.body, nullptr, false);
    if (patch.is_discarded()) return Reply(res, 400, {{"message", "bad JSON"}});
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(std::string(req.matches[1]));
    if (it == nodes_.end()) return Reply(res, 404, NotFound("node"));
    it->second.merge_patch(patch);
    Reply(res, 200, it->second);
  });
}

json MakePod(const std::string& ns, const std::string& name, const std::string& uid, int gpus,
             int64_t memory_mib, int compute, const std::string& cls) {
  json limits = {{"gslice.io/gpu", std::to_string(gpus)}};
  if (memory_mib) limits["gslice.io/gpu-memory"] = std::to_string(memory_mib);
  if (compute) limits["gslice.io/gpu-compute"] = std::to_string(compute);
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", ns}, {"uid", uid}, {"annotations", json::object()}}},
              {"spec", {{"containers", json::array({{{"name", "main"}, {"image", "cuda"},
                                                     {"resources", {{"limits", limits}}}}})}}},
              {"status", {{"phase", "Pending"}}}};
  if (!cls.empty()) pod["metadata"]["annotations"]["gslice.io/class"] = cls;
  return pod;
}

json MakeNode(const std::string& name, int gpus, int64_t mib, int slices_per_gpu) {
  std::vector<GpuInfo> inv;
  for (int i = 0; i < gpus; ++i) inv.push_back({"GPU-" + name + "-" + std::to_string(i), i, mib, "sim", true});
  json node = {{"apiVersion", "v1"},
               {"kind", "Node"},
               {"metadata", {{"name", name}, {"annotations", {{std::string(kAnnotationNodeGpus), EncodeGpuInventory(inv)}}}}}};
  if (slices_per_gpu) node["metadata"]["annotations"][std::string(kAnnotationNodeSlicesPerGpu)] = std::to_string(slices_per_gpu);
  return node;
}

}  // namespace gslice::k8s::testing
