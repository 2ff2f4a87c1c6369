#include "api_router.h"

#include <pwd.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "api_json.h"
#include "metrics.h"
#include "trace_files.h"
#include "web_assets.h"

namespace gslice {

using nlohmann::json;

ApiResponse ErrorResponse(int status, const std::string& message) {
  ApiResponse r;
  r.status = status;
  r.body = json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  return r;
}

namespace {

ApiResponse Json(int status, const json& body) {
  ApiResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  r.body += '\n';
  return r;
}

ApiResponse Error(const Status& s) { return ErrorResponse(s.code() ? s.code() : 500, s.message()); }

ApiResponse Error(int code, const std::string& message) { return ErrorResponse(code, message); }

// Splits "/v1/slices/a/suspend" into {"v1","slices","a","suspend"}; empty segments, "."
// and ".." make the path invalid.
bool SplitPath(std::string_view path, std::vector<std::string>* parts) {
  if (path.empty() || path[0] != '/') return false;
  size_t i = 1;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string part(path.substr(i, j - i));
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

bool IsStaticAsset(const std::string& method, const std::string& path) {
  if (method != "GET" && method != "HEAD") return false;
  std::vector<std::string> p;
  return SplitPath(path, &p) && p.size() <= 1 && FindWebAsset(path) != nullptr;
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

constexpr int kTraceReadsAtOnce = 4;

// What one caller may read (slice_reads): every slice, or only its own. Its own: the slices it
// may change as their owner (MayChange), their events and history since they were made (a name
// may have been another's before), its own user, and of each GPU what every tenant may know:
// totals, and whether its MPS serves this caller, but not whom else.
class ReadView {
 public:
  ReadView(SliceReads reads, const Caller& caller)
      : all_(reads == SliceReads::kOpen || caller.admin), caller_(caller) {}
  bool all() const { return all_; }
  bool Sees(const Slice& s) const { return all_ || MayChange(s, caller_).ok(); }

  json Slices(const NodeSnapshot& snap) const {
    json out = json::array();
    for (const SliceView& v : snap.slices) {
      if (Sees(v.slice)) out.push_back(ToJson(v, snap.gpus));
    }
    return out;
  }

  json Gpus(const NodeSnapshot& snap) const {
    json out = json::array();
    for (const GpuView& g : snap.gpus) out.push_back(Gpu(g));
    return out;
  }

  json Users(const NodeSnapshot& snap) const {
    json out = json::array();
    for (const User& u : snap.users) {
      if (all_ || u.name == caller_.user) out.push_back(ToJson(u));
    }
    return out;
  }

  // The caller's slices by name, with when each was made (unix seconds).
  std::map<std::string, int64_t> Own(const NodeSnapshot& snap) const {
    std::map<std::string, int64_t> own;
    for (const SliceView& v : snap.slices) {
      if (Sees(v.slice)) own[v.slice.name] = v.slice.created_at;
    }
    return own;
  }

 private:
  // The MPS tenant's uid and why it holds the GPU name other users' slices: shown only to the
  // tenant itself.
  json Gpu(const GpuView& g) const {
    json j = ToJson(g);
    const int64_t tenant = g.sharing.tenant_uid;
    if (all_ || tenant < 0) return j;
    json& sharing = j["sharing"];
    if (tenant == caller_.uid) {
      sharing["mps_uid_why"] = "its MPS serves your slices (uid " + std::to_string(tenant) + ")";
      return j;
    }
    sharing["mps_uid"] = nullptr;
    sharing["mps_class"] = nullptr;
    sharing["mps_uid_hidden"] = true;
    sharing["mps_uid_why"] = "another user's slices hold its MPS; only admins see whose (gsliced's slice_reads is owner)";
    return j;
  }

  bool all_;
  Caller caller_;
};

}  // namespace

// The handlers, one per route. `name` is the path's {slice} or {project}, already a valid
// name; empty for routes without one.
struct ApiHandlers {
  using Handler = ApiResponse (*)(ApiRouter& api, const ApiRequest& req, const std::string& name);

  static ApiResponse Health(ApiRouter&, const ApiRequest&, const std::string&) {
    return Json(200, json{{"ok", true}});
  }

  static ApiResponse Metrics(ApiRouter& api, const ApiRequest&, const std::string&) {
    ApiResponse r = api.Cached("/metrics", [&] {
      ApiResponse page;
      page.content_type = "text/plain; version=0.0.4; charset=utf-8";
      page.body = RenderMetrics(api.registry_->Snapshot(), api.registry_->counters(), api.start_time_);
      return page;
    });
    r.body += RenderApiMetrics(api.counters_.ByCode());
    return r;
  }

  // A view every caller reads alike is cached; one filtered for a caller is rendered for it.
  static ApiResponse CachedFor(ApiRouter& api, const ReadView& view, const std::string& key,
                               const std::function<ApiResponse()>& render) {
    return view.all() ? api.Cached(key, render) : render();
  }

  static ApiResponse Node(ApiRouter& api, const ApiRequest& req, const std::string&) {
    const ReadView view(api.slice_reads_, req.caller);
    return CachedFor(api, view, "/v1/node", [&] {
      NodeSnapshot snap = api.registry_->Snapshot();
      json projects = json::array();
      for (const ProjectView& v : snap.projects) projects.push_back(ToJson(v));
      return Json(200, json{{"time_ms", snap.time_ms}, {"ledger", snap.ledger}, {"gpus", view.Gpus(snap)},
                            {"slices", view.Slices(snap)}, {"projects", projects}, {"users", view.Users(snap)}});
    });
  }

  static ApiResponse Gpus(ApiRouter& api, const ApiRequest& req, const std::string&) {
    const ReadView view(api.slice_reads_, req.caller);
    return CachedFor(api, view, "/v1/gpus",
                     [&] { return Json(200, json{{"gpus", view.Gpus(api.registry_->Snapshot())}}); });
  }

  static ApiResponse History(ApiRouter& api, const ApiRequest& req, const std::string&) {
    int64_t since = 0;
    if (auto it = req.query.find("since"); it != req.query.end()) {
      char* end = nullptr;
      errno = 0;
      since = std::strtoll(it->second.c_str(), &end, 10);
      if (it->second.empty() || *end != '\0' || errno == ERANGE || since < 0) {
        return Error(400, "since: expected unix milliseconds, a whole number >= 0");
      }
    }
    const ReadView view(api.slice_reads_, req.caller);
    const std::map<std::string, int64_t> own = view.all() ? std::map<std::string, int64_t>{}
                                                          : view.Own(api.registry_->Snapshot());
    json samples = json::array();
    for (HistorySample& s : api.registry_->HistorySince(since)) {
      if (!view.all()) {
        std::erase_if(s.slices, [&](const SlicePoint& p) {
          auto it = own.find(p.name);
          return it == own.end() || s.time_ms < it->second * 1000;
        });
      }
      samples.push_back(ToJson(s));
    }
    return Json(200, json{{"samples", samples}});
  }

  static ApiResponse Events(ApiRouter& api, const ApiRequest& req, const std::string&) {
    const ReadView view(api.slice_reads_, req.caller);
    const std::map<std::string, int64_t> own = view.all() ? std::map<std::string, int64_t>{}
                                                          : view.Own(api.registry_->Snapshot());
    auto events = api.registry_->RecentEvents(200);
    if (!events.ok()) return Error(events.status());
    json out = json::array();
    for (const Store::Event& e : events.value()) {
      auto it = own.find(e.slice);
      if (view.all() || (it != own.end() && e.time >= it->second)) out.push_back(ToJson(e));
    }
    return Json(200, json{{"events", out}});
  }

  static ApiResponse ListSlices(ApiRouter& api, const ApiRequest& req, const std::string&) {
    const ReadView view(api.slice_reads_, req.caller);
    return CachedFor(api, view, "/v1/slices",
                     [&] { return Json(200, json{{"slices", view.Slices(api.registry_->Snapshot())}}); });
  }

  static ApiResponse CreateSlice(ApiRouter& api, const ApiRequest& req, const std::string&) {
    auto body = ParseBody(req.body);
    if (!body.ok()) return Error(body.status());
    auto request = ParseSliceRequest(body.value());
    if (!request.ok()) return Error(request.status());
    if (Status s = ResolveOwner(req.caller, &request.value()); !s.ok()) return Error(s);
    auto created = api.registry_->CreateSlice(request.value(), req.caller.admin);
    if (!created.ok()) return Error(created.status());
    auto view = api.registry_->GetSlice(created->name);
    if (!view.ok()) return Json(201, ToJson(created.value()));
    return Json(201, ToJson(view.value(), api.registry_->Snapshot().gpus));
  }

  static ApiResponse GetSlice(ApiRouter& api, const ApiRequest&, const std::string& name) {
    auto view = api.registry_->GetSlice(name);
    if (!view.ok()) return Error(view.status());
    return Json(200, ToJson(view.value(), api.registry_->Snapshot().gpus));
  }

  static ApiResponse ChangeSlice(ApiRouter& api, const ApiRequest& req, const std::string& name) {
    auto body = ParseBody(req.body);
    if (!body.ok()) return Error(body.status());
    auto change = ParseSliceChange(body.value());
    if (!change.ok()) return Error(change.status());
    auto updated = api.registry_->UpdateSlice(name, change.value(), req.caller);
    if (!updated.ok()) return Error(updated.status());
    auto view = api.registry_->GetSlice(name);
    json out = view.ok() ? ToJson(view.value(), api.registry_->Snapshot().gpus) : ToJson(updated->slice);
    if (!updated->note.empty()) out["note"] = updated->note;
    return Json(200, out);
  }

  static ApiResponse DeleteSlice(ApiRouter& api, const ApiRequest& req, const std::string& name) {
    Status s = api.registry_->DeleteSlice(name, req.caller);
    if (!s.ok()) return Error(s);
    return Json(200, json{{"deleted", name}});
  }

  // The slice's latest trace, for its owner or an admin.
  static ApiResponse ServeTrace(ApiRouter& api, const ApiRequest& req, const std::string& name) {
    auto view = api.registry_->GetSlice(name);
    if (!view.ok()) return Error(view.status());
    // What a program did, with its kernel names and arguments, is its owner's to read.
    const Slice& slice = view->slice;
    if (!MayChange(slice, req.caller).ok()) {
      std::string whose = slice.user;
      if (slice.owner_uid >= 0) whose += " (uid " + std::to_string(slice.owner_uid) + ")";
      return Error(403, "the trace of slice '" + name + "' is for its owner, " + whose +
                            ", or an admin (root or a member of gsliced's admin_group); you are " +
                            req.caller.Describe());
    }
    const std::string record = "record one with `gslice trace " + name + " --seconds 10`";
    if (api.trace_dir_.empty()) return Error(404, "slice '" + name + "' has no trace: this gsliced keeps none");
    if (api.trace_reads_.fetch_add(1) >= kTraceReadsAtOnce) {
      api.trace_reads_.fetch_sub(1);
      return Error(503, "gsliced is reading " + std::to_string(kTraceReadsAtOnce) +
                            " traces for other requests: ask again in a moment");
    }
    Result<std::string> trace = ReadTraceFile(TracePath(api.trace_dir_, name));
    api.trace_reads_.fetch_sub(1);
    if (!trace.ok() && trace.status().code() == 404) {
      return Error(404, "slice '" + name + "' has no trace yet: " + record);
    }
    if (!trace.ok()) return Error(trace.status());
    ApiResponse r;
    r.body = std::move(trace.value());
    return r;
  }

  // Records a timeline of the slice for {"seconds": N} and answers with it (docs/trace.md).
  static ApiResponse RecordTrace(ApiRouter& api, const ApiRequest& req, const std::string& name) {
    auto body = ParseBody(req.body);
    if (!body.ok()) return Error(body.status());
    auto seconds = ParseTraceSeconds(body.value());
    if (!seconds.ok()) return Error(seconds.status());
    auto recorded = api.registry_->RecordTrace(name, seconds.value(), api.trace_dir_, req.caller);
    if (!recorded.ok()) return Error(recorded.status());
    ApiResponse r;
    r.body = std::move(recorded->trace);
    return r;
  }

  static ApiResponse Suspend(ApiRouter& api, const ApiRequest& req, const std::string& name) {
    auto result = api.registry_->SuspendSlice(name, req.caller);
    if (!result.ok()) return Error(result.status());
    return Json(200, ToJson(result.value()));
  }

  static ApiResponse Resume(ApiRouter& api, const ApiRequest& req, const std::string& name) {
    auto result = api.registry_->ResumeSlice(name, req.caller);
    if (!result.ok()) return Error(result.status());
    return Json(200, ToJson(result.value()));
  }

  static ApiResponse ListProjects(ApiRouter& api, const ApiRequest&, const std::string&) {
    json out = json::array();
    for (const ProjectView& v : api.registry_->Snapshot().projects) out.push_back(ToJson(v));
    return Json(200, json{{"projects", out}});
  }

  static ApiResponse CreateProject(ApiRouter& api, const ApiRequest& req, const std::string&) {
    auto body = ParseBody(req.body);
    if (!body.ok()) return Error(body.status());
    auto project = ParseProject(body.value(), "");
    if (!project.ok()) return Error(project.status());
    auto created = api.registry_->CreateProject(project.value());
    if (!created.ok()) return Error(created.status());
    return Json(201, ToJson(created.value()));
  }

  static ApiResponse GetProject(ApiRouter& api, const ApiRequest&, const std::string& name) {
    for (const ProjectView& v : api.registry_->Snapshot().projects) {
      if (v.project.name == name) return Json(200, ToJson(v));
    }
    return Error(404, "no project named '" + name + "'");
  }

  static ApiResponse ChangeProject(ApiRouter& api, const ApiRequest& req, const std::string& name) {
    auto body = ParseBody(req.body);
    if (!body.ok()) return Error(body.status());
    auto project = ParseProject(body.value(), name);
    if (!project.ok()) return Error(project.status());
    auto updated = api.registry_->UpdateProject(project.value());
    if (!updated.ok()) return Error(updated.status());
    return Json(200, ToJson(updated.value()));
  }

  static ApiResponse DeleteProject(ApiRouter& api, const ApiRequest&, const std::string& name) {
    Status s = api.registry_->DeleteProject(name);
    if (!s.ok()) return Error(s);
    return Json(200, json{{"deleted", name}});
  }

  static ApiResponse ListUsers(ApiRouter& api, const ApiRequest& req, const std::string&) {
    const ReadView view(api.slice_reads_, req.caller);
    return Json(200, json{{"users", view.Users(api.registry_->Snapshot())}});
  }

  static ApiResponse RegisterUser(ApiRouter& api, const ApiRequest& req, const std::string&) {
    auto body = ParseBody(req.body);
    if (!body.ok()) return Error(body.status());
    auto name = ParseUserName(body.value());
    if (!name.ok()) return Error(name.status());
    auto user = api.registry_->CreateUser(name.value());
    if (!user.ok()) return Error(user.status());
    return Json(201, ToJson(user.value()));
  }
};

namespace {

// Who may call a route. kAdmin is checked here, before the handler runs (and before its
// body is read). kOwnerOrAdmin handlers pass the caller on: the registry refuses anyone but
// the slice's owner or an admin (MayChange), and a new slice is the caller's own unless an
// admin names another user. kAnyone routes only read.
enum class Access { kAnyone, kOwnerOrAdmin, kAdmin };

struct Route {
  std::string_view method;
  // Literal segments and at most one capture, "{slice}" or "{project}": a valid name of that
  // kind (model.h: ValidateName), handed to the handler.
  std::string_view pattern;
  Access access;
  ReadScope reads;  // under slice_reads = owner (api_router.h)
  // For kAdmin: what a non-admin is refused, as the error names it.
  std::string_view action;
  ApiHandlers::Handler handler;
};

using A = Access;
using H = ApiHandlers;
using R = ReadScope;

// docs/api.md lists the same. For one path, the methods appear in the order of its Allow.
constexpr Route kRoutes[] = {
    {"GET", "/healthz", A::kAnyone, R::kNoSlices, "", &H::Health},
    {"GET", "/metrics", A::kAnyone, R::kAdmins, "", &H::Metrics},
    {"GET", "/v1/node", A::kAnyone, R::kFiltered, "", &H::Node},
    {"GET", "/v1/gpus", A::kAnyone, R::kFiltered, "", &H::Gpus},
    {"GET", "/v1/history", A::kAnyone, R::kFiltered, "", &H::History},
    {"GET", "/v1/events", A::kAnyone, R::kFiltered, "", &H::Events},
    {"GET", "/v1/slices", A::kAnyone, R::kFiltered, "", &H::ListSlices},
    {"POST", "/v1/slices", A::kOwnerOrAdmin, R::kOwnAnswer, "", &H::CreateSlice},
    {"GET", "/v1/slices/{slice}", A::kAnyone, R::kOneSlice, "", &H::GetSlice},
    {"PATCH", "/v1/slices/{slice}", A::kOwnerOrAdmin, R::kOneSlice, "", &H::ChangeSlice},
    {"DELETE", "/v1/slices/{slice}", A::kOwnerOrAdmin, R::kOneSlice, "", &H::DeleteSlice},
    {"GET", "/v1/slices/{slice}/trace", A::kOwnerOrAdmin, R::kOneSlice, "", &H::ServeTrace},
    {"POST", "/v1/slices/{slice}/trace", A::kOwnerOrAdmin, R::kOneSlice, "", &H::RecordTrace},
    {"POST", "/v1/slices/{slice}/suspend", A::kOwnerOrAdmin, R::kOneSlice, "", &H::Suspend},
    {"POST", "/v1/slices/{slice}/resume", A::kOwnerOrAdmin, R::kOneSlice, "", &H::Resume},
    // A project's quotas and what its slices guarantee in all: policy every caller needs to
    // choose one, and totals, as a GPU's.
    {"GET", "/v1/projects", A::kAnyone, R::kNoSlices, "", &H::ListProjects},
    {"POST", "/v1/projects", A::kAdmin, R::kAdmins, "creating a project", &H::CreateProject},
    {"GET", "/v1/projects/{project}", A::kAnyone, R::kNoSlices, "", &H::GetProject},
    {"PUT", "/v1/projects/{project}", A::kAdmin, R::kAdmins, "changing a project", &H::ChangeProject},
    {"DELETE", "/v1/projects/{project}", A::kAdmin, R::kAdmins, "deleting a project", &H::DeleteProject},
    {"GET", "/v1/users", A::kAnyone, R::kFiltered, "", &H::ListUsers},
    {"POST", "/v1/users", A::kAdmin, R::kAdmins, "registering a user", &H::RegisterUser},
};

// Every route declares what it reads; a route names a slice exactly when it is kOneSlice (the
// 404 for another's slice is keyed on it); an admin route is kAdmins.
constexpr bool EveryRouteDeclaresItsReads() {
  for (const Route& r : kRoutes) {
    const bool names_slice = r.pattern.find("{slice}") != std::string_view::npos;
    if (r.reads == R::kUndeclared || names_slice != (r.reads == R::kOneSlice)) return false;
    if (r.access == A::kAdmin && r.reads != R::kAdmins) return false;
  }
  return true;
}
static_assert(EveryRouteDeclaresItsReads(), "each route in kRoutes declares its ReadScope (api_router.h)");

// Whether `path` has the shape of `pattern`: the same number of segments, literals equal.
// Then `kind` is the capture's kind ("slice") and `value` its segment; both empty if none.
bool Matches(std::string_view pattern, const std::vector<std::string>& path, std::string* kind,
             std::string* value) {
  std::vector<std::string> want;
  SplitPath(pattern, &want);
  if (want.size() != path.size()) return false;
  std::string k, v;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i].front() == '{') {
      k = want[i].substr(1, want[i].size() - 2);
      v = path[i];
    } else if (want[i] != path[i]) {
      return false;
    }
  }
  *kind = std::move(k);
  *value = std::move(v);
  return true;
}

}  // namespace

std::vector<RouteDeclaration> ApiRoutes() {
  std::vector<RouteDeclaration> out;
  for (const Route& r : kRoutes) out.push_back({r.method, r.pattern, r.reads});
  return out;
}

bool ApiRouter::Sees(const std::string& name, const Caller& caller) {
  if (slice_reads_ == SliceReads::kOpen || caller.admin) return true;
  auto view = registry_->GetSlice(name);
  return view.ok() && MayChange(view->slice, caller).ok();
}

bool ApiRouter::Authorized(const std::string& method, const std::string& path,
                           const std::string& authorization) const {
  return IsStaticAsset(method, path) || HoldsToken(authorization);
}

bool ApiRouter::HoldsToken(const std::string& authorization) const { return TokenMatches(authorization, token_); }

ApiResponse ApiRouter::Handle(const ApiRequest& request) {
  ApiResponse r = Dispatch(request);
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

ApiResponse ApiRouter::Dispatch(const ApiRequest& req) {
  std::vector<std::string> p;
  if (!SplitPath(req.path, &p)) return Error(400, "malformed path '" + req.path + "'");
  // The dashboard's static files are public: they hold no data.
  if (req.method == "GET" && p.size() <= 1) {
    if (const WebAsset* asset = FindWebAsset(req.path)) {
      ApiResponse r;
      r.content_type = asset->content_type;
      r.body.assign(reinterpret_cast<const char*>(asset->data), asset->size);
      return r;
    }
  }
  if (req.over_tcp && !Authorized(req.method, req.path, req.authorization)) {
    return Error(401, "missing or wrong bearer token: send `Authorization: Bearer <token>` "
                      "(the token is in gsliced's token_file)");
  }
  std::string allow, kind, name;
  const Route* route = nullptr;
  for (const Route& r : kRoutes) {
    if (!Matches(r.pattern, p, &kind, &name)) continue;
    allow += (allow.empty() ? "" : ", ") + std::string(r.method);
    if (r.method == req.method) route = &r;
  }
  if (allow.empty()) {
    if (p.empty() || p[0] != "v1") {
      return Error(404, "no such path '" + req.path + "'; the API lives under /v1 (see docs/api.md)");
    }
    return Error(404, "no such path '" + req.path + "' (see docs/api.md)");
  }
  if (!kind.empty()) {
    if (Status s = ValidateName(kind, name); !s.ok()) return Error(404, "no such " + kind + ": " + s.message());
  }
  if (route == nullptr) {
    ApiResponse r = Error(405, "method not allowed here; allowed: " + allow);
    r.allow = allow;
    return r;
  }
  if (route->access == Access::kAdmin && !req.caller.admin) {
    return Error(403, std::string(route->action) + " is for admins (root, members of gsliced's admin_group, "
                      "the token's holder); you are " + req.caller.Describe());
  }
  const bool owner_reads = slice_reads_ == SliceReads::kOwner && !req.caller.admin;
  if (owner_reads && route->reads == ReadScope::kAdmins) {
    return Error(403, req.path + " is for admins (root, members of gsliced's admin_group, the token's holder) "
                      "while gsliced's slice_reads is owner: it shows every user's slices; you are " +
                      req.caller.Describe());
  }
  if (owner_reads && route->reads == ReadScope::kOneSlice && !Sees(name, req.caller)) {
    return Error(NoSuchSlice(name));
  }
  ApiResponse r = route->handler(*this, req, name);
  // The slice may have changed hands since the check: a refusal for not owning it says no more.
  if (owner_reads && route->reads == ReadScope::kOneSlice && r.status == 403 && !Sees(name, req.caller)) {
    return Error(NoSuchSlice(name));
  }
  return r;
}

}  // namespace gslice
