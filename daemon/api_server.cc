#include "api_server.h"

#include <grp.h>
#include <httplib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "admission.h"
#include "gslice/units.h"
#include "metrics.h"
#include "web_assets.h"

namespace gslice {
namespace {

using nlohmann::json;

ApiResponse Json(int status, const json& body) {
  ApiResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  r.body += '\n';
  return r;
}

ApiResponse Error(const Status& s) {
  return Json(s.code() ? s.code() : 500, json{{"error", s.message()}});
}

ApiResponse Error(int code, const std::string& message) {
  return Json(code, json{{"error", message}});
}

json ToJson(const GpuView& g) {
  return json{{"index", g.gpu.index},
              {"uuid", g.gpu.uuid},
              {"name", g.gpu.name},
              {"memory_total_bytes", g.gpu.memory_total},
              {"memory_used_bytes", g.gpu.memory_used},
              {"utilization", g.gpu.utilization < 0 ? json(nullptr) : json(g.gpu.utilization)},
              {"guaranteed_memory_bytes", g.guaranteed_memory},
              {"guaranteed_compute", g.guaranteed_compute},
              {"slices", g.slices}};
}

json ToJson(const Slice& s) {
  json gpus = json::array();
  for (const SliceGpu& g : s.gpus) {
    gpus.push_back({{"uuid", g.uuid}, {"memory_limit_bytes", g.memory_limit}, {"compute_share", g.compute_share}});
  }
  return json{{"name", s.name},
              {"user", s.user},
              {"project", s.project},
              {"class", ToString(s.slice_class)},
              {"state", ToString(s.state)},
              {"origin", s.origin},
              {"pod", s.pod},
              {"namespace", s.pod_namespace},
              {"idle_timeout_s", s.idle_timeout_s},
              {"created_at", s.created_at},
              {"last_error", s.last_error},
              {"gpus", gpus}};
}

json ToJson(const SliceView& v, const std::vector<GpuView>& gpus) {
  json j = ToJson(v.slice);
  uint64_t limit = 0, used = 0;
  for (json& g : j["gpus"]) {
    std::string uuid = g["uuid"];
    for (const GpuView& info : gpus) {
      if (info.gpu.uuid == uuid) g["index"] = info.gpu.index;
    }
    auto it = v.memory_used.find(uuid);
    uint64_t u = it == v.memory_used.end() ? 0 : it->second;
    g["memory_used_bytes"] = u;
    used += u;
    limit += g["memory_limit_bytes"].get<uint64_t>();
  }
  j["memory_limit_bytes"] = limit;
  j["memory_used_bytes"] = used;
  j["compute_used"] = v.compute_used < 0 ? json(nullptr) : json(v.compute_used);
  j["throttled"] = v.throttled;
  j["activity"] = v.activity;
  json procs = json::array();
  for (const ProcessUsage& p : v.processes) {
    procs.push_back({{"pid", p.pid},
                     {"gpu", p.gpu_uuid},
                     {"memory_used_bytes", p.memory_used},
                     {"pod", p.pod},
                     {"namespace", p.pod_namespace},
                     {"container", p.container}});
  }
  j["processes"] = procs;
  return j;
}

json ToJson(const Project& p) {
  return json{{"name", p.name},
              {"memory_quota_bytes", p.memory_quota},
              {"compute_quota", p.compute_quota},
              {"priority", p.priority},
              {"created_at", p.created_at}};
}

json ToJson(const ProjectView& v) {
  json j = ToJson(v.project);
  j["guaranteed_memory_bytes"] = v.guaranteed_memory;
  j["guaranteed_compute"] = v.guaranteed_compute;
  j["slices"] = v.slices;
  return j;
}

json ToJson(const User& u) { return json{{"name", u.name}, {"created_at", u.created_at}}; }

// Reads a size given as a byte count or a string ("8GiB").
Status ReadSize(const json& v, const std::string& field, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
  } else if (v.is_string()) {
    ParsedSize p = ParseSize(v.get<std::string>());
    if (!p.ok) {
      return Status::BadRequest(field + ": '" + v.get<std::string>() + "' is not a size (" +
                                p.error + "); write e.g. \"8GiB\"");
    }
    *out = p.bytes;
  } else {
    return Status::BadRequest(field + ": expected a byte count or a size like \"8GiB\"");
  }
  return Status::Ok();
}

// Reads a fraction given as a number 0..1 or a percentage string ("30%").
Status ReadFraction(const json& v, const std::string& field, double* out, double max) {
  if (v.is_number()) {
    *out = v.get<double>();
  } else if (v.is_string()) {
    ParsedPercent p = ParsePercent(v.get<std::string>());
    if (!p.ok) {
      return Status::BadRequest(field + ": '" + v.get<std::string>() + "' is not a percentage (" +
                                p.error + "); write e.g. \"30%\"");
    }
    *out = p.fraction;
  } else {
    return Status::BadRequest(field + ": expected a number 0..1 or a percentage like \"30%\"");
  }
  if (!(*out >= 0) || *out > max) {
    return Status::BadRequest(field + ": " + PercentText(*out) + " is out of range");
  }
  return Status::Ok();
}

Status ReadString(const json& body, const char* field, std::string* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return Status::Ok();
  if (!it->is_string()) return Status::BadRequest(std::string(field) + ": expected a string");
  *out = it->get<std::string>();
  return Status::Ok();
}

Status CheckFields(const json& body, std::initializer_list<const char*> known) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) {
      std::string list;
      for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      return Status::BadRequest("unknown field '" + it.key() + "'; known fields: " + list);
    }
  }
  return Status::Ok();
}

Result<json> ParseBody(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return Status::BadRequest("request body is not valid JSON");
  }
  if (!j.is_object()) return Status::BadRequest("request body must be a JSON object");
  return j;
}

Result<SliceRequest> ParseSliceRequest(const json& body) {
  if (Status s = CheckFields(body, {"name", "user", "project", "class", "gpus", "memory", "compute",
                                    "origin", "pod", "namespace", "idle_timeout_s", "holder"});
      !s.ok()) {
    return s;
  }
  SliceRequest r;
  for (auto [field, out] : {std::pair{"name", &r.name}, {"user", &r.user}, {"project", &r.project},
                            {"origin", &r.origin}, {"pod", &r.pod}, {"namespace", &r.pod_namespace}}) {
    if (Status s = ReadString(body, field, out); !s.ok()) return s;
  }
  if (r.user.empty()) return Status::BadRequest("user: every slice belongs to a user; give one");
  if (r.origin != "api" && r.origin != "run") return Status::BadRequest("origin: expected \"api\" or \"run\"");
  std::string cls = "guaranteed";
  if (Status s = ReadString(body, "class", &cls); !s.ok()) return s;
  if (!ParseSliceClass(cls, &r.slice_class)) {
    return Status::BadRequest("class: '" + cls + "' is neither guaranteed nor opportunistic");
  }
  if (auto it = body.find("idle_timeout_s"); it != body.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return Status::BadRequest("idle_timeout_s: expected a whole number of seconds >= 0");
    }
    r.idle_timeout_s = it->get<int64_t>();
  }
  // Who holds a registration of origin "run" (registry.h, SliceRequest::holder).
  if (auto it = body.find("holder"); it != body.end()) {
    if (!it->is_object()) return Status::BadRequest("holder: expected {\"pid\": N, \"pid_ns\": N, \"start_time\": N}");
    if (Status s = CheckFields(*it, {"pid", "pid_ns", "start_time"}); !s.ok()) return s;
    auto pid = it->find("pid");
    if (pid == it->end() || !pid->is_number_unsigned() || pid->get<uint64_t>() == 0 ||
        pid->get<uint64_t>() > UINT32_MAX) {
      return Status::BadRequest("holder.pid: expected a process id");
    }
    r.holder.pid = static_cast<uint32_t>(pid->get<uint64_t>());
    for (auto [field, out] : {std::pair{"pid_ns", &r.holder.pid_ns}, {"start_time", &r.holder.start_time}}) {
      if (auto f = it->find(field); f != it->end()) {
        if (!f->is_number_unsigned()) return Status::BadRequest(std::string("holder.") + field + ": expected a number");
        *out = f->get<uint64_t>();
      }
    }
  }
  // Defaults every GPU entry may override: "memory" and "compute" at the top level.
  uint64_t memory = 0;
  double compute = 0;
  if (auto it = body.find("memory"); it != body.end()) {
    if (Status s = ReadSize(*it, "memory", &memory); !s.ok()) return s;
  }
  if (auto it = body.find("compute"); it != body.end()) {
    if (Status s = ReadFraction(*it, "compute", &compute, 1.0); !s.ok()) return s;
  }
  auto gpus = body.find("gpus");
  if (gpus == body.end() || !gpus->is_array() || gpus->empty()) {
    return Status::BadRequest("gpus: expected a non-empty list, e.g. [\"0\"] or [{\"gpu\": \"0\", \"memory\": \"8GiB\"}]");
  }
  if (gpus->size() > 64) return Status::BadRequest("gpus: more than 64 entries");
  for (const json& g : *gpus) {
    SliceRequest::Gpu gpu{"", memory, compute};
    if (g.is_string()) {
      gpu.ref = g.get<std::string>();
    } else if (g.is_number_unsigned()) {
      gpu.ref = std::to_string(g.get<uint64_t>());
    } else if (g.is_object()) {
      if (Status s = CheckFields(g, {"gpu", "memory", "compute"}); !s.ok()) return s;
      auto ref = g.find("gpu");
      if (ref == g.end()) return Status::BadRequest("gpus: each entry needs \"gpu\" (an index or a UUID)");
      if (ref->is_string()) gpu.ref = ref->get<std::string>();
      else if (ref->is_number_unsigned()) gpu.ref = std::to_string(ref->get<uint64_t>());
      else return Status::BadRequest("gpus[].gpu: expected an index or a UUID");
      if (auto m = g.find("memory"); m != g.end()) {
        if (Status s = ReadSize(*m, "gpus[].memory", &gpu.memory); !s.ok()) return s;
      }
      if (auto c = g.find("compute"); c != g.end()) {
        if (Status s = ReadFraction(*c, "gpus[].compute", &gpu.compute, 1.0); !s.ok()) return s;
      }
    } else {
      return Status::BadRequest("gpus: each entry is an index, a UUID or an object");
    }
    if (gpu.memory == 0) {
      return Status::BadRequest("memory: give the slice's memory per GPU, e.g. \"memory\": \"8GiB\"");
    }
    r.gpus.push_back(gpu);
  }
  return r;
}

Result<Project> ParseProject(const json& body, const std::string& name_from_path) {
  if (Status s = CheckFields(body, {"name", "memory_quota", "compute_quota", "priority"}); !s.ok()) {
    return s;
  }
  Project p;
  p.name = name_from_path;
  std::string name;
  if (Status s = ReadString(body, "name", &name); !s.ok()) return s;
  if (!name_from_path.empty() && !name.empty() && name != name_from_path) {
    return Status::BadRequest("name: '" + name + "' differs from the path's '" + name_from_path + "'");
  }
  if (p.name.empty()) p.name = name;
  if (Status s = ValidateName("project", p.name); !s.ok()) return s;
  if (auto it = body.find("memory_quota"); it != body.end()) {
    if (Status s = ReadSize(*it, "memory_quota", &p.memory_quota); !s.ok()) return s;
  }
  if (auto it = body.find("compute_quota"); it != body.end()) {
    // In GPUs: 1.5 is one and a half GPUs' worth of guaranteed compute.
    if (!it->is_number() || it->get<double>() < 0 || it->get<double>() > 4096) {
      return Status::BadRequest("compute_quota: expected a number of GPUs >= 0 (0: unlimited)");
    }
    p.compute_quota = it->get<double>();
  }
  if (auto it = body.find("priority"); it != body.end()) {
    if (!it->is_number_integer() || std::llabs(it->get<int64_t>()) > 1000000) {
      return Status::BadRequest("priority: expected an integer");
    }
    p.priority = static_cast<int>(it->get<int64_t>());
  }
  return p;
}

// Splits "/v1/slices/a/suspend" into {"v1","slices","a","suspend"}; empty segments, "."
// and ".." make the path invalid.
bool SplitPath(const std::string& path, std::vector<std::string>* parts) {
  if (path.empty() || path[0] != '/') return false;
  size_t i = 1;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string part = path.substr(i, j - i);
    if (part == "." || part == "..") return false;
    if (part.empty() && j != path.size()) return false;
    if (!part.empty()) parts->push_back(part);
    i = j + 1;
  }
  return true;
}

bool TokenMatches(const std::string& header, const std::string& token) {
  static const std::string kPrefix = "Bearer ";
  if (token.empty() || header.size() != kPrefix.size() + token.size() ||
      header.compare(0, kPrefix.size(), kPrefix) != 0) {
    return false;
  }
  unsigned char diff = 0;  // constant time over the token
  for (size_t i = 0; i < token.size(); ++i) {
    diff |= static_cast<unsigned char>(header[kPrefix.size() + i] ^ token[i]);
  }
  return diff == 0;
}

ApiResponse MethodNotAllowed(const std::string& allow) {
  ApiResponse r = Error(405, "method not allowed here; allowed: " + allow);
  r.allow = allow;
  return r;
}

}  // namespace

ApiResponse ApiRouter::Handle(const ApiRequest& request) {
  ApiResponse r = Route(request);
  counters_.Count(r.status);
  return r;
}

ApiResponse ApiRouter::Cached(const std::string& key, const std::function<ApiResponse()>& render) {
  const uint64_t generation = registry_->generation();
  {
    std::lock_guard lock(cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end() && it->second.first == generation) return it->second.second;
  }
  ApiResponse r = render();
  if (r.status == 200) {
    std::lock_guard lock(cache_mu_);
    cache_[key] = {generation, r};
  }
  return r;
}

ApiResponse ApiRouter::Route(const ApiRequest& req) {
  const std::string& m = req.method;
  std::vector<std::string> p;
  if (!SplitPath(req.path, &p)) return Error(400, "malformed path '" + req.path + "'");

  // The dashboard's static files are public: they hold no data.
  if (m == "GET" && (p.empty() || p.size() == 1)) {
    if (const WebAsset* asset = FindWebAsset(req.path)) {
      ApiResponse r;
      r.content_type = asset->content_type;
      r.body.assign(reinterpret_cast<const char*>(asset->data), asset->size);
      return r;
    }
  }
  if (req.over_tcp && !TokenMatches(req.authorization, token_)) {
    return Error(401, "missing or wrong bearer token: send `Authorization: Bearer <token>` "
                      "(the token is in gsliced's token_file)");
  }
  if (p.size() == 1 && p[0] == "healthz") {
    if (m != "GET") return MethodNotAllowed("GET");
    return Json(200, json{{"ok", true}});
  }
  if (p.size() == 1 && p[0] == "metrics") {
    if (m != "GET") return MethodNotAllowed("GET");
    ApiResponse r = Cached("/metrics", [&] {
      ApiResponse page;
      page.content_type = "text/plain; version=0.0.4; charset=utf-8";
      page.body = RenderMetrics(registry_->Snapshot(), registry_->counters(), start_time_);
      return page;
    });
    r.body += RenderApiMetrics(counters_.ByCode());
    return r;
  }
  if (p.empty() || p[0] != "v1") return Error(404, "no such path '" + req.path + "'; the API lives under /v1 (see docs/api.md)");
  p.erase(p.begin());
  const std::string collection = p.empty() ? "" : p[0];

  if (collection == "node" && p.size() == 1) {
    if (m != "GET") return MethodNotAllowed("GET");
    return Cached("/v1/node", [&] {
    NodeSnapshot snap = registry_->Snapshot();
    json gpus = json::array(), slices = json::array(), projects = json::array(), users = json::array();
    for (const GpuView& g : snap.gpus) gpus.push_back(ToJson(g));
    for (const SliceView& v : snap.slices) slices.push_back(ToJson(v, snap.gpus));
    for (const ProjectView& v : snap.projects) projects.push_back(ToJson(v));
    for (const User& u : snap.users) users.push_back(ToJson(u));
    return Json(200, json{{"time_ms", snap.time_ms}, {"ledger", snap.ledger}, {"gpus", gpus},
                          {"slices", slices}, {"projects", projects}, {"users", users}});
    });
  }
  if (collection == "gpus" && p.size() == 1) {
    if (m != "GET") return MethodNotAllowed("GET");
    return Cached("/v1/gpus", [&] {
      json out = json::array();
      for (const GpuView& g : registry_->Snapshot().gpus) out.push_back(ToJson(g));
      return Json(200, json{{"gpus", out}});
    });
  }
  if (collection == "history" && p.size() == 1) {
    if (m != "GET") return MethodNotAllowed("GET");
    int64_t since = 0;
    if (auto it = req.query.find("since"); it != req.query.end()) {
      char* end = nullptr;
      since = std::strtoll(it->second.c_str(), &end, 10);
      if (it->second.empty() || *end != '\0') return Error(400, "since: expected unix milliseconds");
    }
    json samples = json::array();
    for (const HistorySample& s : registry_->HistorySince(since)) {
      json gpus = json::object(), slices = json::object();
      for (const GpuPoint& g : s.gpus) {
        gpus[g.uuid] = {{"memory_used_bytes", g.memory_used},
                        {"slices_memory_used_bytes", g.slices_memory_used},
                        {"utilization", g.utilization < 0 ? json(nullptr) : json(g.utilization)}};
      }
      for (const SlicePoint& sp : s.slices) {
        slices[sp.name] = {{"memory_used_bytes", sp.memory_used},
                           {"compute_used", sp.compute_used < 0 ? json(nullptr) : json(sp.compute_used)}};
      }
      samples.push_back({{"time_ms", s.time_ms}, {"gpus", gpus}, {"slices", slices}});
    }
    return Json(200, json{{"samples", samples}});
  }
  if (collection == "events" && p.size() == 1) {
    if (m != "GET") return MethodNotAllowed("GET");
    auto events = registry_->RecentEvents(200);
    if (!events.ok()) return Error(events.status());
    json out = json::array();
    for (const Store::Event& e : events.value()) {
      out.push_back({{"id", e.id}, {"time", e.time}, {"slice", e.slice}, {"kind", e.kind}, {"detail", e.detail}});
    }
    return Json(200, json{{"events", out}});
  }
  if (collection == "slices") {
    if (p.size() == 1) {
      if (m == "GET") {
        return Cached("/v1/slices", [&] {
          NodeSnapshot snap = registry_->Snapshot();
          json out = json::array();
          for (const SliceView& v : snap.slices) out.push_back(ToJson(v, snap.gpus));
          return Json(200, json{{"slices", out}});
        });
      }
      if (m == "POST") {
        auto body = ParseBody(req.body);
        if (!body.ok()) return Error(body.status());
        auto request = ParseSliceRequest(body.value());
        if (!request.ok()) return Error(request.status());
        auto created = registry_->CreateSlice(request.value());
        if (!created.ok()) return Error(created.status());
        auto view = registry_->GetSlice(created->name);
        if (!view.ok()) return Json(201, ToJson(created.value()));
        return Json(201, ToJson(view.value(), registry_->Snapshot().gpus));
      }
      return MethodNotAllowed("GET, POST");
    }
    if (Status s = ValidateName("slice", p[1]); !s.ok()) return Error(404, "no such slice: " + s.message());
    if (p.size() == 2) {
      if (m == "GET") {
        auto view = registry_->GetSlice(p[1]);
        if (!view.ok()) return Error(view.status());
        return Json(200, ToJson(view.value(), registry_->Snapshot().gpus));
      }
      if (m == "DELETE") {
        Status s = registry_->DeleteSlice(p[1]);
        if (!s.ok()) return Error(s);
        return Json(200, json{{"deleted", p[1]}});
      }
      return MethodNotAllowed("GET, DELETE");
    }
    if (p.size() == 3 && (p[2] == "suspend" || p[2] == "resume")) {
      if (m != "POST") return MethodNotAllowed("POST");
      auto result = p[2] == "suspend" ? registry_->SuspendSlice(p[1]) : registry_->ResumeSlice(p[1]);
      if (!result.ok()) return Error(result.status());
      return Json(200, ToJson(result.value()));
    }
  }
  if (collection == "projects") {
    if (p.size() == 1) {
      if (m == "GET") {
        json out = json::array();
        for (const ProjectView& v : registry_->Snapshot().projects) out.push_back(ToJson(v));
        return Json(200, json{{"projects", out}});
      }
      if (m == "POST") {
        auto body = ParseBody(req.body);
        if (!body.ok()) return Error(body.status());
        auto project = ParseProject(body.value(), "");
        if (!project.ok()) return Error(project.status());
        auto created = registry_->CreateProject(project.value());
        if (!created.ok()) return Error(created.status());
        return Json(201, ToJson(created.value()));
      }
      return MethodNotAllowed("GET, POST");
    }
    if (Status s = ValidateName("project", p[1]); !s.ok()) return Error(404, "no such project: " + s.message());
    if (p.size() == 2) {
      if (m == "GET") {
        for (const ProjectView& v : registry_->Snapshot().projects) {
          if (v.project.name == p[1]) return Json(200, ToJson(v));
        }
        return Error(404, "no project named '" + p[1] + "'");
      }
      if (m == "PUT") {
        auto body = ParseBody(req.body);
        if (!body.ok()) return Error(body.status());
        auto project = ParseProject(body.value(), p[1]);
        if (!project.ok()) return Error(project.status());
        auto updated = registry_->UpdateProject(project.value());
        if (!updated.ok()) return Error(updated.status());
        return Json(200, ToJson(updated.value()));
      }
      if (m == "DELETE") {
        Status s = registry_->DeleteProject(p[1]);
        if (!s.ok()) return Error(s);
        return Json(200, json{{"deleted", p[1]}});
      }
      return MethodNotAllowed("GET, PUT, DELETE");
    }
  }
  if (collection == "users" && p.size() == 1) {
    if (m == "GET") {
      json out = json::array();
      for (const User& u : registry_->Snapshot().users) out.push_back(ToJson(u));
      return Json(200, json{{"users", out}});
    }
    if (m == "POST") {
      auto body = ParseBody(req.body);
      if (!body.ok()) return Error(body.status());
      if (Status s = CheckFields(body.value(), {"name"}); !s.ok()) return Error(s);
      std::string name;
      if (Status s = ReadString(body.value(), "name", &name); !s.ok()) return Error(s);
      auto user = registry_->CreateUser(name);
      if (!user.ok()) return Error(user.status());
      return Json(201, ToJson(user.value()));
    }
    return MethodNotAllowed("GET, POST");
  }
  return Error(404, "no such path '" + req.path + "' (see docs/api.md)");
}

ApiServer::ApiServer(Registry* registry, DaemonConfig config, std::string token)
    : registry_(registry),
      config_(std::move(config)),
      router_(registry, std::move(token),
              std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()) {}

ApiServer::~ApiServer() { Stop(); }

std::unique_ptr<httplib::Server> ApiServer::MakeServer(bool over_tcp) {
  auto server = std::make_unique<httplib::Server>();
  const size_t threads = static_cast<size_t>(config_.api_threads);
  server->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server->set_payload_max_length(config_.max_body_bytes);
  server->set_tcp_nodelay(true);  // small answers must not wait for delayed ACKs
  server->set_keep_alive_max_count(1000);
  server->set_keep_alive_timeout(2);
  server->set_read_timeout(5, 0);
  server->set_write_timeout(5, 0);
  auto handler = [this, over_tcp](const httplib::Request& hreq, httplib::Response& hres) {
    ApiRequest req;
    req.method = hreq.method == "HEAD" ? "GET" : hreq.method;
    req.path = hreq.path;
    for (const auto& [k, v] : hreq.params) req.query[k] = v;
    req.body = hreq.body;
    req.authorization = hreq.get_header_value("Authorization");
    req.over_tcp = over_tcp;
    ApiResponse res = router_.Handle(req);
    hres.status = res.status;
    if (!res.allow.empty()) hres.set_header("Allow", res.allow);
    hres.set_header("Cache-Control", "no-store");
    hres.set_header("X-Content-Type-Options", "nosniff");
    if (res.content_type.rfind("text/html", 0) == 0) {
      hres.set_header("Content-Security-Policy",
                      "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'");
    }
    hres.set_content(std::move(res.body), res.content_type.c_str());
  };
  server->Get(".*", handler);
  server->Post(".*", handler);
  server->Put(".*", handler);
  server->Delete(".*", handler);
  server->Patch(".*", handler);
  server->Options(".*", handler);
  // Errors httplib answers itself (413 for a body over max_body_bytes, 400 for a request it
  // cannot parse) get a JSON body too.
  server->set_error_handler([this](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg = res.status == 413 ? "request body larger than max_body_bytes (" +
                                              std::to_string(config_.max_body_bytes) + " bytes)"
                                        : res.status == 400
                                              ? "malformed HTTP request: bad request line or headers, "
                                                "or a POST/PUT without Content-Length (send one, "
                                                "even 0)"
                                              : "request rejected (HTTP " + std::to_string(res.status) + ")";
    router_.counters().Count(res.status);
    res.set_content(json{{"error", msg}}.dump() + "\n", "application/json");
  });
  return server;
}

Status ApiServer::Start() {
  if (!config_.socket.empty()) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path path(config_.socket);
    if (!path.parent_path().empty()) fs::create_directories(path.parent_path(), ec);
    if (fs::exists(path, ec)) {
      // A socket left by a previous gsliced: replace it, unless one still answers there.
      httplib::Client probe(config_.socket);
      probe.set_address_family(AF_UNIX);
      probe.set_connection_timeout(1, 0);
      if (probe.Get("/healthz")) {
        return Status::Conflict("another gsliced is serving " + config_.socket + ": stop it first");
      }
      fs::remove(path, ec);
    }
    unix_server_ = MakeServer(false);
    unix_server_->set_address_family(AF_UNIX);
    // Bind with a tight umask so the socket never exists with wider permissions.
    mode_t old = umask(0177);
    bool bound = unix_server_->bind_to_port(config_.socket.c_str(), 80);
    umask(old);
    if (!bound) return Status::Unavailable("cannot listen on " + config_.socket);
    if (!config_.socket_group.empty()) {
      struct group* gr = getgrnam(config_.socket_group.c_str());
      if (gr == nullptr) return Status::BadRequest("socket_group: no group named '" + config_.socket_group + "'");
      if (chown(config_.socket.c_str(), static_cast<uid_t>(-1), gr->gr_gid) != 0) {
        return Status::Unavailable("socket_group: cannot chown " + config_.socket);
      }
    }
    if (chmod(config_.socket.c_str(), config_.socket_mode) != 0) {
      return Status::Unavailable("cannot chmod " + config_.socket);
    }
    threads_.emplace_back([this] { unix_server_->listen_after_bind(); });
  }
  if (!config_.tcp.empty()) {
    auto colon = config_.tcp.rfind(':');
    std::string host = config_.tcp.substr(0, colon);
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    int port = std::atoi(config_.tcp.c_str() + colon + 1);
    tcp_server_ = MakeServer(true);
    if (port == 0) {
      tcp_port_ = tcp_server_->bind_to_any_port(host.c_str());
      if (tcp_port_ <= 0) return Status::Unavailable("cannot listen on " + config_.tcp);
    } else {
      if (!tcp_server_->bind_to_port(host.c_str(), port)) {
        return Status::Unavailable("cannot listen on " + config_.tcp + " (in use?)");
      }
      tcp_port_ = port;
    }
    threads_.emplace_back([this] { tcp_server_->listen_after_bind(); });
  }
  return Status::Ok();
}

void ApiServer::Stop() {
  if (unix_server_) unix_server_->stop();
  if (tcp_server_) tcp_server_->stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  if (unix_server_ && !config_.socket.empty()) {
    std::error_code ec;
    std::filesystem::remove(config_.socket, ec);
  }
  unix_server_.reset();
  tcp_server_.reset();
}

}  // namespace gslice
