#include "api_server.h"

#include <arpa/inet.h>
#include <grp.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "admission.h"
#include "gslice/units.h"
#include "metrics.h"
#include "trace_files.h"
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

// A remote slice's client and whether its worker holds the GPU (attached) or was moved to
// host memory (suspended: the client's next call resumes it); null for a local slice.
json RemoteJson(const Slice& s) {
  if (s.remote_client.empty()) return nullptr;
  const bool away = s.state == SliceState::kSuspended || s.state == SliceState::kSuspending;
  return json{{"client", s.remote_client}, {"state", away ? "suspended" : "attached"}};
}

json ToJson(const Slice& s) {
  json gpus = json::array();
  for (const SliceGpu& g : s.gpus) {
    gpus.push_back({{"uuid", g.uuid},
                    {"memory_limit_bytes", g.memory_limit},
                    {"compute_share", g.compute_share},
                    {"compute_cap", g.compute_cap}});
  }
  return json{{"name", s.name},
              {"user", s.user},
              {"owner_uid", s.owner_uid < 0 ? json(nullptr) : json(s.owner_uid)},
              {"project", s.project},
              {"class", ToString(s.slice_class)},
              {"protect", s.slice_class == SliceClass::kGuaranteed
                              ? json(EffectiveProtectPermille(s.protect_permille) / 1000.0)
                              : json(nullptr)},
              {"state", ToString(s.state)},
              {"origin", s.origin},
              {"pod", s.pod},
              {"namespace", s.pod_namespace},
              {"idle_timeout_s", s.idle_timeout_s},
              {"remote", RemoteJson(s)},
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
  if (j["remote"].is_object()) {
    // Idle reclaim suspends the worker's process, not the slice's lifecycle: what the worker
    // holds now is its activity.
    const bool away = v.activity == "suspended" || v.activity == "suspending";
    j["remote"]["state"] = away ? "suspended" : "attached";
  }
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

constexpr uint64_t kMaxSize = kMaxSizeBytes;

// Reads a size given as a byte count or a string ("8GiB"), at most kMaxSize.
Status ReadSize(const json& v, const std::string& field, uint64_t* out) {
  if (v.is_number_integer() && !v.is_number_unsigned()) {
    return Status::BadRequest(field + ": " + v.dump() + " is negative; expected a byte count or a size like \"8GiB\"");
  }
  if (v.is_number_float()) {
    return Status::BadRequest(field + ": " + v.dump() + " is not a whole number of bytes; write e.g. \"8GiB\"");
  }
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
  if (*out > kMaxSize) {
    return Status::BadRequest(field + ": " + std::to_string(*out) + " bytes is out of range (at most " +
                              std::to_string(kMaxSize) + ", 1 EiB)");
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

// Seconds from 0 (never) to kMaxIdleTimeoutS.
Status ReadIdleTimeout(const json& v, int64_t* out) {
  // A number past int64 arrives unsigned; one past kMaxIdleTimeoutS is refused, not wrapped.
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0)) {
    return Status::BadRequest("idle_timeout_s: expected a whole number of seconds from 0 (never) to " +
                              std::to_string(kMaxIdleTimeoutS));
  }
  if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(kMaxIdleTimeoutS)
                             : v.get<int64_t>() > kMaxIdleTimeoutS) {
    return Status::BadRequest("idle_timeout_s: " + v.dump() + " is out of range: at most " +
                              std::to_string(kMaxIdleTimeoutS) + " (366 days); 0 means never");
  }
  *out = v.get<int64_t>();
  return Status::Ok();
}

// A protection level: a fraction of the slice's solo speed, in thousandths (the ledger's unit).
Status ReadProtect(const json& v, uint32_t* permille) {
  const std::string range = FormatProtect(kProtectMinPermille) + " to " + FormatProtect(kProtectMaxPermille);
  if (!v.is_number()) {
    return Status::BadRequest("protect: expected a number from " + range +
                              " (the fraction of the slice's solo speed kept against opportunistic work), e.g. 0.9");
  }
  const double x = v.get<double>();
  if (!(x >= kMinProtect - 0.0005 && x < kMaxProtect + 0.0005)) {
    return Status::BadRequest("protect: " + v.dump() + " is out of range: from " + range +
                              " (a fraction of solo speed: 0.9, not 90); default " + FormatProtect(kProtectDefaultPermille));
  }
  *permille = static_cast<uint32_t>(std::lround(x * 1000));
  return Status::Ok();
}

Result<SliceRequest> ParseSliceRequest(const json& body) {
  if (Status s = CheckFields(body, {"name", "user", "project", "class", "protect", "gpus", "memory", "compute",
                                    "origin", "pod", "namespace", "idle_timeout_s", "holder",
                                    "remote_client"});
      !s.ok()) {
    return s;
  }
  SliceRequest r;
  for (auto [field, out] : {std::pair{"name", &r.name}, {"user", &r.user}, {"project", &r.project},
                            {"origin", &r.origin}, {"pod", &r.pod}, {"namespace", &r.pod_namespace}}) {
    if (Status s = ReadString(body, field, out); !s.ok()) return s;
  }
  if (r.origin != "api" && r.origin != "run") return Status::BadRequest("origin: expected \"api\" or \"run\"");
  if (Status s = ReadString(body, "remote_client", &r.remote_client); !s.ok()) return s;
  if (r.remote_client.size() > 200 ||
      !std::all_of(r.remote_client.begin(), r.remote_client.end(), [](char c) { return c >= 0x20 && c < 0x7f; })) {
    return Status::BadRequest("remote_client: at most 200 printable ASCII characters");
  }
  std::string cls = "guaranteed";
  if (Status s = ReadString(body, "class", &cls); !s.ok()) return s;
  if (!ParseSliceClass(cls, &r.slice_class)) {
    return Status::BadRequest("class: '" + cls + "' is neither guaranteed nor opportunistic");
  }
  if (auto it = body.find("protect"); it != body.end() && !it->is_null()) {
    if (Status s = ReadProtect(*it, &r.protect_permille); !s.ok()) return s;
    if (Status s = ValidateProtect(r.slice_class, r.protect_permille); !s.ok()) return s;
  }
  if (auto it = body.find("idle_timeout_s"); it != body.end()) {
    if (Status s = ReadIdleTimeout(*it, &r.idle_timeout_s); !s.ok()) return s;
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
    } else if (g.is_number_unsigned() && g.get<uint64_t>() < 4096) {
      gpu.ref = std::to_string(g.get<uint64_t>());
    } else if (g.is_object()) {
      if (Status s = CheckFields(g, {"gpu", "memory", "compute"}); !s.ok()) return s;
      auto ref = g.find("gpu");
      if (ref == g.end()) return Status::BadRequest("gpus: each entry needs \"gpu\" (an index or a UUID)");
      if (ref->is_string()) gpu.ref = ref->get<std::string>();
      else if (ref->is_number_unsigned() && ref->get<uint64_t>() < 4096) gpu.ref = std::to_string(ref->get<uint64_t>());
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

// PATCH /v1/slices/NAME: what to change (docs/api.md).
Result<SliceChange> ParseSliceChange(const json& body) {
  if (Status s = CheckFields(body, {"memory", "compute_cap", "compute_share", "class", "protect", "idle_timeout_s",
                                    "make_room"});
      !s.ok()) {
    return s;
  }
  SliceChange c;
  if (auto it = body.find("memory"); it != body.end()) {
    const bool list = it->is_array();
    if (list && (it->empty() || it->size() > 64)) return Status::BadRequest("memory: expected 1 to 64 sizes");
    for (const json& v : list ? *it : json::array({*it})) {
      uint64_t bytes = 0;
      if (Status s = ReadSize(v, "memory", &bytes); !s.ok()) return s;
      if (bytes == 0) return Status::BadRequest("memory: must be more than 0, e.g. \"8GiB\"");
      c.memory.push_back(bytes);
    }
  }
  for (auto [field, out] : {std::pair{"compute_cap", &c.compute_cap}, {"compute_share", &c.compute_share}}) {
    if (auto it = body.find(field); it != body.end()) {
      double fraction = 0;
      if (Status s = ReadFraction(*it, field, &fraction, 1.0); !s.ok()) return s;
      *out = fraction;
    }
  }
  if (body.contains("class")) {
    std::string cls;
    if (Status s = ReadString(body, "class", &cls); !s.ok()) return s;
    SliceClass parsed;
    if (!ParseSliceClass(cls, &parsed)) {
      return Status::BadRequest("class: '" + cls + "' is neither guaranteed nor opportunistic");
    }
    c.slice_class = parsed;
  }
  if (auto it = body.find("protect"); it != body.end()) {
    uint32_t permille = 0;
    if (Status s = ReadProtect(*it, &permille); !s.ok()) return s;
    c.protect_permille = permille;
  }
  if (auto it = body.find("idle_timeout_s"); it != body.end()) {
    int64_t seconds = 0;
    if (Status s = ReadIdleTimeout(*it, &seconds); !s.ok()) return s;
    c.idle_timeout_s = seconds;
  }
  if (auto it = body.find("make_room"); it != body.end()) {
    if (!it->is_boolean()) return Status::BadRequest("make_room: expected true or false");
    c.make_room = it->get<bool>();
  }
  return c;
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
    if (!it->is_number() || !(it->get<double>() >= 0) || it->get<double>() > kMaxComputeQuotaGpus) {
      return Status::BadRequest("compute_quota: expected a number of GPUs from 0 (unlimited) to 4096");
    }
    p.compute_quota = it->get<double>();
  }
  if (auto it = body.find("priority"); it != body.end()) {
    if (!it->is_number_integer() ||
        (it->is_number_unsigned() ? it->get<uint64_t>() > static_cast<uint64_t>(kMaxProjectPriority)
                                  : std::llabs(it->get<int64_t>()) > kMaxProjectPriority)) {
      return Status::BadRequest("priority: expected an integer from -1000000 to 1000000");
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

bool IsStaticAsset(const std::string& method, const std::string& path) {
  if (method != "GET" && method != "HEAD") return false;
  std::vector<std::string> p;
  return SplitPath(path, &p) && p.size() <= 1 && FindWebAsset(path) != nullptr;
}

// Admins only: projects (quotas) and users are the node's policy, not a tenant's.
Status RequireAdmin(const Caller& caller, const std::string& what) {
  if (caller.admin) return Status::Ok();
  return Status::Forbidden(what + " is for admins (root, members of gsliced's admin_group, the "
                           "token's holder); you are " + caller.Describe());
}

// The owner of a new slice: the caller, unless an admin names someone else.
Status ResolveOwner(const Caller& caller, SliceRequest* r) {
  if (r->user.empty() || r->user == caller.user) {
    if (caller.user.empty()) return Status::Forbidden("the caller has no identity: it may not create slices");
    r->user = caller.user;
    r->owner_uid = caller.uid;
    return Status::Ok();
  }
  if (!caller.admin) {
    return Status::Forbidden("user: '" + r->user + "' is not you (" + caller.Describe() +
                             "): only admins (root, members of gsliced's admin_group) create "
                             "slices for others; leave \"user\" out to create your own");
  }
  r->owner_uid = -1;
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwnam_r(r->user.c_str(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    r->owner_uid = pw.pw_uid;
  }
  return Status::Ok();
}

}  // namespace

bool ApiRouter::Authorized(const std::string& method, const std::string& path,
                           const std::string& authorization) const {
  return IsStaticAsset(method, path) || TokenMatches(authorization, token_);
}

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

namespace {
constexpr int kTraceReadsAtOnce = 4;
}  // namespace

ApiResponse ApiRouter::ServeTrace(const std::string& name, const Caller& caller) {
  auto view = registry_->GetSlice(name);
  if (!view.ok()) return Error(view.status());
  // What a program did, with its kernel names and arguments, is its owner's to read.
  const Slice& slice = view->slice;
  if (!MayChange(slice, caller).ok()) {
    std::string whose = slice.user;
    if (slice.owner_uid >= 0) whose += " (uid " + std::to_string(slice.owner_uid) + ")";
    return Error(403, "the trace of slice '" + name + "' is for its owner, " + whose +
                          ", or an admin (root or a member of gsliced's admin_group); you are " +
                          caller.Describe());
  }
  const std::string record = "record one with `gslice trace " + name + " --seconds 10`";
  if (trace_dir_.empty()) return Error(404, "slice '" + name + "' has no trace: this gsliced keeps none");
  if (trace_reads_.fetch_add(1) >= kTraceReadsAtOnce) {
    trace_reads_.fetch_sub(1);
    return Error(503, "gsliced is reading " + std::to_string(kTraceReadsAtOnce) +
                          " traces for other requests: ask again in a moment");
  }
  Result<std::string> trace = ReadTraceFile(TracePath(trace_dir_, name));
  trace_reads_.fetch_sub(1);
  if (!trace.ok() && trace.status().code() == 404) {
    return Error(404, "slice '" + name + "' has no trace yet: " + record);
  }
  if (!trace.ok()) return Error(trace.status());
  ApiResponse r;
  r.body = std::move(trace.value());
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
  if (req.over_tcp && !Authorized(m, req.path, req.authorization)) {
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
      errno = 0;
      since = std::strtoll(it->second.c_str(), &end, 10);
      if (it->second.empty() || *end != '\0' || errno == ERANGE || since < 0) {
        return Error(400, "since: expected unix milliseconds, a whole number >= 0");
      }
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
        if (Status s = ResolveOwner(req.caller, &request.value()); !s.ok()) return Error(s);
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
      if (m == "PATCH") {
        auto body = ParseBody(req.body);
        if (!body.ok()) return Error(body.status());
        auto change = ParseSliceChange(body.value());
        if (!change.ok()) return Error(change.status());
        auto updated = registry_->UpdateSlice(p[1], change.value(), req.caller);
        if (!updated.ok()) return Error(updated.status());
        auto view = registry_->GetSlice(p[1]);
        json out = view.ok() ? ToJson(view.value(), registry_->Snapshot().gpus) : ToJson(updated->slice);
        if (!updated->note.empty()) out["note"] = updated->note;
        return Json(200, out);
      }
      if (m == "DELETE") {
        Status s = registry_->DeleteSlice(p[1], req.caller);
        if (!s.ok()) return Error(s);
        return Json(200, json{{"deleted", p[1]}});
      }
      return MethodNotAllowed("GET, PATCH, DELETE");
    }
    if (p.size() == 3 && p[2] == "trace") {
      if (m == "GET") return ServeTrace(p[1], req.caller);
      if (m != "POST") return MethodNotAllowed("GET, POST");
      // Records a timeline of the slice for {"seconds": N} and answers with it (docs/trace.md).
      auto body = ParseBody(req.body);
      if (!body.ok()) return Error(body.status());
      if (Status s = CheckFields(body.value(), {"seconds"}); !s.ok()) return Error(s);
      auto it = body.value().find("seconds");
      if (it == body.value().end() || !it->is_number_integer()) {
        return Error(400, "seconds: expected a whole number of seconds to record, 1 to 300");
      }
      auto recorded = registry_->RecordTrace(p[1], it->get<int>(), trace_dir_, req.caller);
      if (!recorded.ok()) return Error(recorded.status());
      ApiResponse r;
      r.body = std::move(recorded->trace);
      return r;
    }
    if (p.size() == 3 && (p[2] == "suspend" || p[2] == "resume")) {
      if (m != "POST") return MethodNotAllowed("POST");
      auto result = p[2] == "suspend" ? registry_->SuspendSlice(p[1], req.caller)
                                      : registry_->ResumeSlice(p[1], req.caller);
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
        if (Status s = RequireAdmin(req.caller, "creating a project"); !s.ok()) return Error(s);
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
        if (Status s = RequireAdmin(req.caller, "changing a project"); !s.ok()) return Error(s);
        auto body = ParseBody(req.body);
        if (!body.ok()) return Error(body.status());
        auto project = ParseProject(body.value(), p[1]);
        if (!project.ok()) return Error(project.status());
        auto updated = registry_->UpdateProject(project.value());
        if (!updated.ok()) return Error(updated.status());
        return Json(200, ToJson(updated.value()));
      }
      if (m == "DELETE") {
        if (Status s = RequireAdmin(req.caller, "deleting a project"); !s.ok()) return Error(s);
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
      if (Status s = RequireAdmin(req.caller, "registering a user"); !s.ok()) return Error(s);
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

namespace {

using Clock = std::chrono::steady_clock;

// The identity of a peer on the unix socket, from the kernel: SO_PEERCRED's uid, gid and
// pid at connect time; the name from the passwd database; admin when uid 0, or when the
// peer's primary or supplementary groups (its /proc/<pid>/status while that process is the
// peer, else the user's groups in the group database) include admin_gid.
Caller PeerCaller(int fd, int64_t admin_gid) {
  Caller c;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return c;  // nobody
  c.uid = cred.uid;
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(cred.uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr &&
      ValidateName("user", pw.pw_name).ok()) {
    c.user = pw.pw_name;
  } else {
    c.user = "uid-" + std::to_string(cred.uid);  // no name usable in slice names and URLs
  }
  c.admin = cred.uid == 0;
  if (c.admin || admin_gid < 0) return c;
  if (static_cast<int64_t>(cred.gid) == admin_gid) {
    c.admin = true;
    return c;
  }
  // The peer's own groups, if the pid still names a process of that uid.
  bool from_proc = false;
  if (cred.pid > 0) {
    std::ifstream status("/proc/" + std::to_string(cred.pid) + "/status");
    std::string line;
    bool uid_matches = false;
    std::vector<int64_t> groups;
    while (std::getline(status, line)) {
      std::istringstream in(line);
      std::string key;
      in >> key;
      if (key == "Uid:") {
        int64_t real = -1;
        in >> real;
        uid_matches = real == static_cast<int64_t>(cred.uid);
      } else if (key == "Groups:") {
        for (int64_t g; in >> g;) groups.push_back(g);
      }
    }
    if (uid_matches) {
      from_proc = true;
      c.admin = std::find(groups.begin(), groups.end(), admin_gid) != groups.end();
    }
  }
  if (!from_proc && found != nullptr) {
    int n = 256;
    std::vector<gid_t> groups(static_cast<size_t>(n));
    if (getgrouplist(pw.pw_name, cred.gid, groups.data(), &n) >= 0) {
      groups.resize(static_cast<size_t>(n));
      c.admin = std::find(groups.begin(), groups.end(), static_cast<gid_t>(admin_gid)) != groups.end();
    }
  }
  return c;
}

// A TCP caller with the token: an admin without a kernel identity.
Caller TokenCaller() { return Caller{.user = "token", .uid = -1, .admin = true}; }

std::string AddressText(const sockaddr* addr) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (addr == nullptr) return text;
  if (addr->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, text, sizeof text);
  } else if (addr->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr, text, sizeof text);
  }
  return text;
}

}  // namespace

// One listener: a libmicrohttpd daemon (a thread per connection) on a socket bound here,
// and what the library does not do itself: the caller of each connection, connections
// per client on the unix socket, and deadlines for whole requests (a sweeper shuts down
// connections that pass theirs; the library closes them).
class HttpListener {
 public:
  struct Settings {
    bool over_tcp = false;
    unsigned max_connections = 256;
    unsigned per_client = 128;
    int request_timeout_s = 10;
    int idle_timeout_s = 30;
    uint64_t max_body = 65536;
    int64_t admin_gid = -1;
  };
  HttpListener(ApiRouter* router, Settings settings) : router_(router), settings_(settings) {}
  ~HttpListener() { Stop(); }

  // Serves the bound, listening socket `fd` (the listener owns it from here on).
  Status Start(int fd);
  void Stop();

 private:
  // What one request has sent so far. One at a time per connection: HTTP/1.1 answers in order.
  struct Request {
    bool headers_seen = false;
    bool too_large = false;
    std::string body;
  };
  struct Connection {
    int fd = -1;
    std::string client;  // "uid 1000", "127.0.0.1": the key of the per-client count
    Caller caller;
    bool over_limit = false;  // more connections than per_client: answered 429, closed
    Clock::time_point deadline = Clock::time_point::max();  // REQUIRES: mu_ held
    bool shut = false;                                       // REQUIRES: mu_ held
    Request request;
  };

  static void OnConnection(void* cls, MHD_Connection* c, void** socket_context,
                           MHD_ConnectionNotificationCode code);
  static void* OnRequestLine(void* cls, const char* uri, MHD_Connection* c);
  static MHD_Result OnRequest(void* cls, MHD_Connection* c, const char* url, const char* method,
                              const char* version, const char* upload, size_t* upload_size,
                              void** con_cls);
  static void OnCompleted(void* cls, MHD_Connection* c, void** con_cls,
                          MHD_RequestTerminationCode code);
  MHD_Result Answer(MHD_Connection* c, const ApiResponse& r, bool close);
  MHD_Result Refuse(MHD_Connection* c, int status, const std::string& message);
  void SetDeadline(Connection* conn, Clock::time_point deadline) {
    std::lock_guard lock(mu_);
    conn->deadline = deadline;
  }
  void Sweep();

  ApiRouter* router_;
  Settings settings_;
  MHD_Daemon* daemon_ = nullptr;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;                     // REQUIRES: mu_ held
  std::set<Connection*> connections_;         // REQUIRES: mu_ held
  std::map<std::string, unsigned> per_client_;  // REQUIRES: mu_ held
  std::thread sweeper_;
};

Status HttpListener::Start(int fd) {
  const unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL;
  auto quiet = +[](void*, const char*, va_list) {};
  // TCP: the library refuses connections over the per-IP limit as it accepts them. The
  // unix socket's peers are counted by uid in OnConnection.
  daemon_ = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &HttpListener::OnRequest, this,
      MHD_OPTION_LISTEN_SOCKET, fd,
      MHD_OPTION_CONNECTION_LIMIT, settings_.max_connections,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, settings_.over_tcp ? settings_.per_client : 0u,
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(settings_.idle_timeout_s),
      MHD_OPTION_NOTIFY_CONNECTION, &HttpListener::OnConnection, this,
      MHD_OPTION_NOTIFY_COMPLETED, &HttpListener::OnCompleted, this,
      MHD_OPTION_URI_LOG_CALLBACK, &HttpListener::OnRequestLine, this,
      MHD_OPTION_EXTERNAL_LOGGER, quiet, nullptr,
      MHD_OPTION_END);
  if (daemon_ == nullptr) {
    close(fd);
    return Status::Unavailable("cannot start serving the API (libmicrohttpd refused its options)");
  }
  sweeper_ = std::thread([this] { Sweep(); });
  return Status::Ok();
}

void HttpListener::Stop() {
  if (daemon_ == nullptr) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  sweeper_.join();
  MHD_stop_daemon(daemon_);  // closes the listening socket and every connection
  daemon_ = nullptr;
}

void HttpListener::Sweep() {
  std::unique_lock lock(mu_);
  while (!stop_cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stopping_; })) {
    const Clock::time_point now = Clock::now();
    for (Connection* conn : connections_) {
      // The fd is the connection's until OnConnection(CLOSED), which takes mu_ first.
      if (!conn->shut && conn->deadline <= now) {
        shutdown(conn->fd, SHUT_RDWR);
        conn->shut = true;
      }
    }
  }
}

void HttpListener::OnConnection(void* cls, MHD_Connection* c, void** socket_context,
                                MHD_ConnectionNotificationCode code) {
  auto* self = static_cast<HttpListener*>(cls);
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    auto conn = std::make_unique<Connection>();
    const MHD_ConnectionInfo* fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    conn->fd = fd != nullptr ? fd->connect_fd : -1;
    if (self->settings_.over_tcp) {
      const MHD_ConnectionInfo* addr = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
      conn->client = AddressText(addr != nullptr ? addr->client_addr : nullptr);
    } else {
      conn->caller = PeerCaller(conn->fd, self->settings_.admin_gid);
      conn->client = "uid " + std::to_string(conn->caller.uid);
    }
    std::lock_guard lock(self->mu_);
    conn->over_limit = ++self->per_client_[conn->client] > self->settings_.per_client;
    conn->deadline = Clock::now() + std::chrono::seconds(self->settings_.idle_timeout_s);
    self->connections_.insert(conn.get());
    *socket_context = conn.release();
  } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
    std::unique_ptr<Connection> conn(static_cast<Connection*>(*socket_context));
    if (conn == nullptr) return;
    std::lock_guard lock(self->mu_);
    self->connections_.erase(conn.get());
    if (--self->per_client_[conn->client] == 0) self->per_client_.erase(conn->client);
  }
}

void* HttpListener::OnRequestLine(void* cls, const char*, MHD_Connection* c) {
  auto* self = static_cast<HttpListener*>(cls);
  const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  auto* conn = info != nullptr ? static_cast<Connection*>(info->socket_context) : nullptr;
  if (conn == nullptr) return nullptr;
  conn->request = Request{};
  // Its headers and body must all arrive within the request timeout.
  self->SetDeadline(conn, Clock::now() + std::chrono::seconds(self->settings_.request_timeout_s));
  return conn;
}

void HttpListener::OnCompleted(void* cls, MHD_Connection*, void** con_cls,
                               MHD_RequestTerminationCode) {
  auto* self = static_cast<HttpListener*>(cls);
  auto* conn = static_cast<Connection*>(*con_cls);
  if (conn == nullptr) return;
  conn->request = Request{};
  self->SetDeadline(conn, Clock::now() + std::chrono::seconds(self->settings_.idle_timeout_s));
}

MHD_Result HttpListener::Answer(MHD_Connection* c, const ApiResponse& r, bool close) {
  MHD_Response* response = MHD_create_response_from_buffer(
      r.body.size(), const_cast<char*>(r.body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, "Content-Type", r.content_type.c_str());
  MHD_add_response_header(response, "Cache-Control", "no-store");
  MHD_add_response_header(response, "X-Content-Type-Options", "nosniff");
  if (!r.allow.empty()) MHD_add_response_header(response, "Allow", r.allow.c_str());
  if (r.content_type.rfind("text/html", 0) == 0) {
    MHD_add_response_header(response, "Content-Security-Policy",
                            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'");
  }
  if (close) MHD_add_response_header(response, "Connection", "close");
  MHD_Result queued = MHD_queue_response(c, static_cast<unsigned>(r.status), response);
  MHD_destroy_response(response);
  return queued;
}

// An answer the transport gives itself, before (or instead of) the router.
MHD_Result HttpListener::Refuse(MHD_Connection* c, int status, const std::string& message) {
  router_->counters().Count(status);
  ApiResponse r;
  r.status = status;
  r.body = json{{"error", message}}.dump() + "\n";
  return Answer(c, r, /*close=*/true);
}

MHD_Result HttpListener::OnRequest(void* cls, MHD_Connection* c, const char* url,
                                   const char* method, const char*, const char* upload,
                                   size_t* upload_size, void** con_cls) {
  auto* self = static_cast<HttpListener*>(cls);
  auto* conn = static_cast<Connection*>(*con_cls);
  if (conn == nullptr) return MHD_NO;
  Request& req = conn->request;
  const Settings& cfg = self->settings_;
  const char* auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
  if (!req.headers_seen) {
    // The headers are in; the body (if any) is not read yet.
    req.headers_seen = true;
    if (conn->over_limit) {
      return self->Refuse(c, 429, conn->client + " holds more than " + std::to_string(cfg.per_client) +
                                      " connections to gsliced (api_connections_per_client): "
                                      "reuse connections, or close some");
    }
    if (cfg.over_tcp && !self->router_->Authorized(method, url, auth ? auth : "")) {
      return self->Refuse(c, 401, "missing or wrong bearer token: send `Authorization: Bearer "
                                  "<token>` (the token is in gsliced's token_file)");
    }
    if (const char* length = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length")) {
      errno = 0;
      char* end = nullptr;
      unsigned long long n = std::strtoull(length, &end, 10);
      // Known too large: nothing of it is kept. It is read and dropped and answered 413
      // at its end (within the request timeout), so a client that sends its whole body
      // before reading reads the answer rather than a reset.
      if (errno == ERANGE || n > cfg.max_body) req.too_large = true;
    }
    return MHD_YES;
  }
  if (*upload_size != 0) {
    // Whatever the transfer encoding, at most max_body bytes are kept; past that the rest
    // is read and dropped (the request deadline bounds how long) and the answer is 413.
    if (!req.too_large && req.body.size() + *upload_size > cfg.max_body) {
      req.too_large = true;
      std::string().swap(req.body);
    }
    if (!req.too_large) req.body.append(upload, *upload_size);
    *upload_size = 0;
    return MHD_YES;
  }
  self->SetDeadline(conn, Clock::time_point::max());  // answering: no deadline meanwhile
  if (req.too_large) {
    return self->Refuse(c, 413, "request body larger than max_body_bytes (" +
                                    std::to_string(cfg.max_body) + " bytes)");
  }
  ApiRequest request;
  request.method = std::strcmp(method, "HEAD") == 0 ? "GET" : method;
  request.path = url;
  MHD_get_connection_values(
      c, MHD_GET_ARGUMENT_KIND,
      +[](void* out, MHD_ValueKind, const char* key, const char* value) -> MHD_Result {
        static_cast<ApiRequest*>(out)->query[key] = value ? value : "";
        return MHD_YES;
      },
      &request);
  request.body = std::move(req.body);
  request.authorization = auth ? auth : "";
  request.over_tcp = cfg.over_tcp;
  if (!cfg.over_tcp) {
    request.caller = conn->caller;
  } else if (self->router_->Authorized("POST", "/v1", request.authorization)) {
    request.caller = TokenCaller();
  }
  return self->Answer(c, self->router_->Handle(request), /*close=*/false);
}

ApiServer::ApiServer(Registry* registry, DaemonConfig config, std::string token)
    : registry_(registry),
      config_(std::move(config)),
      router_(registry, std::move(token),
              std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(),
              TraceDir(config_)) {}

ApiServer::~ApiServer() { Stop(); }

Status ApiServer::Start() {
  if (!config_.admin_group.empty()) {
    group gr{};
    group* found = nullptr;
    std::vector<char> buf(16384);
    if (getgrnam_r(config_.admin_group.c_str(), &gr, buf.data(), buf.size(), &found) != 0 ||
        found == nullptr) {
      return Status::BadRequest("admin_group: no group named '" + config_.admin_group + "'");
    }
    admin_gid_ = gr.gr_gid;
  }
  if (!config_.socket.empty()) {
    if (Status s = StartUnix(); !s.ok()) return s;
  }
  if (!config_.tcp.empty()) {
    if (Status s = StartTcp(); !s.ok()) {
      Stop();
      return s;
    }
  }
  return Status::Ok();
}

namespace {

HttpListener::Settings ListenerSettings(const DaemonConfig& c, bool over_tcp, int64_t admin_gid) {
  return HttpListener::Settings{
      .over_tcp = over_tcp,
      .max_connections = static_cast<unsigned>(c.api_threads),
      .per_client = static_cast<unsigned>(c.api_connections_per_client),
      .request_timeout_s = static_cast<int>(c.api_request_timeout_s),
      .idle_timeout_s = static_cast<int>(c.api_idle_timeout_s),
      .max_body = c.max_body_bytes,
      .admin_gid = admin_gid,
  };
}

}  // namespace

Status ApiServer::StartUnix() {
  namespace fs = std::filesystem;
  const std::string& path = config_.socket;
  std::error_code ec;
  fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    return Status::BadRequest("socket: " + path + " is longer than a unix socket path may be (" +
                              std::to_string(sizeof addr.sun_path - 1) + " characters)");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  // Something at the path: a socket nobody answers on is a previous gsliced's and is
  // replaced; a live socket is another gsliced; anything else is not ours to remove.
  if (Status s = CheckSocketPath(path); !s.ok()) return s;
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool live = probe >= 0 && connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    if (probe >= 0) close(probe);
    if (live) return Status::Conflict("another gsliced is serving " + path + ": stop it first");
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Status::Unavailable("cannot remove the stale socket " + path + ": " + std::strerror(errno));
    }
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::Unavailable(std::string("cannot create a unix socket: ") + std::strerror(errno));
  // Bind with a tight umask so the socket never exists with wider permissions.
  mode_t old = umask(0177);
  int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int bind_errno = errno;
  umask(old);
  if (rc != 0) {
    close(fd);
    return Status::Unavailable("cannot listen on " + path + ": " + std::strerror(bind_errno));
  }
  if (lstat(path.c_str(), &st) == 0) socket_inode_ = st.st_ino;
  auto fail = [&](Status s) {
    close(fd);
    unlink(path.c_str());
    socket_inode_ = 0;
    return s;
  };
  if (!config_.socket_group.empty()) {
    struct group* gr = getgrnam(config_.socket_group.c_str());
    if (gr == nullptr) return fail(Status::BadRequest("socket_group: no group named '" + config_.socket_group + "'"));
    if (chown(path.c_str(), static_cast<uid_t>(-1), gr->gr_gid) != 0) {
      return fail(Status::Unavailable("socket_group: cannot chown " + path + ": " + std::strerror(errno)));
    }
  }
  if (chmod(path.c_str(), config_.socket_mode) != 0) {
    return fail(Status::Unavailable("cannot chmod " + path + ": " + std::strerror(errno)));
  }
  if (listen(fd, SOMAXCONN) != 0) return fail(Status::Unavailable("cannot listen on " + path));
  unix_listener_ = std::make_unique<HttpListener>(&router_, ListenerSettings(config_, false, admin_gid_));
  if (Status s = unix_listener_->Start(fd); !s.ok()) {
    unix_listener_.reset();
    unlink(path.c_str());
    socket_inode_ = 0;
    return s;
  }
  return Status::Ok();
}

Status ApiServer::StartTcp() {
  auto colon = config_.tcp.rfind(':');
  std::string host = config_.tcp.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  const std::string port = config_.tcp.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0 || res == nullptr) {
    return Status::BadRequest("tcp: cannot resolve '" + host + "': " + gai_strerror(rc));
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  bool ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
            bind(fd, res->ai_addr, res->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0;
  int err = errno;
  freeaddrinfo(res);
  if (!ok) {
    if (fd >= 0) close(fd);
    return Status::Unavailable("cannot listen on " + config_.tcp + ": " + std::strerror(err));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  tcp_port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  tcp_listener_ = std::make_unique<HttpListener>(&router_, ListenerSettings(config_, true, admin_gid_));
  if (Status s = tcp_listener_->Start(fd); !s.ok()) {
    tcp_listener_.reset();
    return s;
  }
  return Status::Ok();
}

void ApiServer::Stop() {
  unix_listener_.reset();
  tcp_listener_.reset();
  if (socket_inode_ != 0) {
    // Only the socket this server bound: never a file someone put there since.
    struct stat st {};
    if (lstat(config_.socket.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == socket_inode_) {
      unlink(config_.socket.c_str());
    }
    socket_inode_ = 0;
  }
}

}  // namespace gslice
