#include "api_json.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "admission.h"
#include "gslice/mps_client.h"
#include "gslice/units.h"

namespace gslice {

using nlohmann::json;

namespace {

// A remote slice's client and whether its worker holds the GPU (attached) or was moved to
// host memory (suspended: the client's next call resumes it); null for a local slice.
json RemoteJson(const Slice& s) {
  if (s.remote_client.empty()) return nullptr;
  const bool away = s.state == SliceState::kSuspended || s.state == SliceState::kSuspending;
  return json{{"client", s.remote_client}, {"state", away ? "suspended" : "attached"}};
}

}  // namespace

json ToJson(const GpuView& g) {
  return json{{"index", g.gpu.index},
              {"uuid", g.gpu.uuid},
              {"name", g.gpu.name},
              {"memory_total_bytes", g.gpu.memory_total},
              {"memory_used_bytes", g.gpu.memory_used},
              {"utilization", g.gpu.utilization < 0 ? json(nullptr) : json(g.gpu.utilization)},
              {"guaranteed_memory_bytes", g.guaranteed_memory},
              {"guaranteed_compute", g.guaranteed_compute},
              {"slices", g.slices},
              {"sharing", {{"substrate", g.sharing.mps ? "mps" : "time-sliced"},
                           {"reason", g.sharing.reason},
                           {"why", g.sharing.why},
                           {"mps_uid", g.sharing.tenant_uid < 0 ? json(nullptr) : json(g.sharing.tenant_uid)},
                           {"mps_class", g.sharing.tenant_uid < 0 ? json(nullptr)
                                                                  : json(MpsClassName(g.sharing.tenant_class))},
                           {"mps_uid_why", g.sharing.tenant_why},
                           {"mps_restarts", g.mps_restarts}}}};
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
    // On MPS: the environment its programs need (they must run as the server's uid).
    auto sharing = v.sharing.find(uuid);
    const bool mps = sharing != v.sharing.end() && sharing->second.mps;
    g["sharing"] = mps ? "mps" : "time-sliced";
    g["sharing_why"] = sharing != v.sharing.end() ? sharing->second.why : "";
    g["mps"] = mps ? json{{"uid", sharing->second.uid},
                          {"class", MpsClassName(sharing->second.slice_class)},
                          {"pipe_directory", sharing->second.pipe_directory},
                          {"log_directory", sharing->second.log_directory}}
                   : json(nullptr);
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

json ToJson(const HistorySample& s) {
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
  return json{{"time_ms", s.time_ms}, {"gpus", gpus}, {"slices", slices}};
}

json ToJson(const Store::Event& e) {
  return json{{"id", e.id}, {"time", e.time}, {"slice", e.slice}, {"kind", e.kind}, {"detail", e.detail}};
}

Result<json> ParseBody(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return Status::BadRequest("request body is not valid JSON");
  }
  if (!j.is_object()) return Status::BadRequest("request body must be a JSON object");
  return j;
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

Status ReadString(const json& body, const char* field, std::string* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return Status::Ok();
  if (!it->is_string()) return Status::BadRequest(std::string(field) + ": expected a string");
  *out = it->get<std::string>();
  return Status::Ok();
}

namespace {

constexpr uint64_t kMaxSize = kMaxSizeBytes;

// Reads a size given as a byte count or a string ("8GiB"), at most kMaxSize.
Status ReadSize(const json& v, const std::string& field, uint64_t* out) {
  // Non-negative integers arrive unsigned; only "-0" arrives signed and not negative.
  if (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0) {
    return Status::BadRequest(field + ": " + v.dump() + " is negative; expected a byte count or a size like \"8GiB\"");
  }
  if (v.is_number_float()) {
    return Status::BadRequest(field + ": " + v.dump() + " is not a whole number of bytes; write e.g. \"8GiB\"");
  }
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
  } else if (v.is_number_integer()) {
    *out = 0;  // -0
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

// A whole number from `lo` to `hi`, as `text` says ("an integer from -1000000 to 1000000").
struct IntegerRange {
  int64_t lo, hi;
  std::string text;
};

// Reads a whole number in `range`, exactly as written. JSON integers arrive as uint64 (every
// non-negative one) or int64, and each is compared in its own type before it is converted,
// so no value wraps, is clamped or loses its sign on the way to the check. A fraction
// (even 1.0 or 1e6), a string and a number past either end are refused with the range.
Status ReadInteger(const json& v, const std::string& field, const IntegerRange& range, int64_t* out) {
  if (!v.is_number_integer()) return Status::BadRequest(field + ": expected " + range.text);
  bool in_range = false;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    in_range = range.hi >= 0 && u <= static_cast<uint64_t>(range.hi) &&
               (range.lo <= 0 || u >= static_cast<uint64_t>(range.lo));
    if (in_range) *out = static_cast<int64_t>(u);
  } else {
    const int64_t i = v.get<int64_t>();
    in_range = i >= range.lo && i <= range.hi;
    if (in_range) *out = i;
  }
  if (!in_range) return Status::BadRequest(field + ": " + v.dump() + " is out of range: expected " + range.text);
  return Status::Ok();
}

const IntegerRange kIdleTimeoutRange{0, kMaxIdleTimeoutS,
                                     "a whole number of seconds from 0 (never) to " +
                                         std::to_string(kMaxIdleTimeoutS) + " (366 days)"};

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

// Who holds a registration of origin "run" (registry.h, SliceRequest::holder).
Status ReadHolder(const json& v, PidIdentity* holder) {
  if (!v.is_object()) return Status::BadRequest("holder: expected {\"pid\": N, \"pid_ns\": N, \"start_time\": N}");
  if (Status s = CheckFields(v, {"pid", "pid_ns", "start_time"}); !s.ok()) return s;
  auto pid = v.find("pid");
  if (pid == v.end()) return Status::BadRequest("holder.pid: expected a process id");
  int64_t number = 0;
  if (Status s = ReadInteger(*pid, "holder.pid", {1, UINT32_MAX, "a process id"}, &number); !s.ok()) return s;
  holder->pid = static_cast<uint32_t>(number);  // in range: fits
  for (auto [field, out] : {std::pair{"pid_ns", &holder->pid_ns}, {"start_time", &holder->start_time}}) {
    if (auto f = v.find(field); f != v.end()) {
      if (!f->is_number_unsigned()) return Status::BadRequest(std::string("holder.") + field + ": expected a number");
      *out = f->get<uint64_t>();
    }
  }
  return Status::Ok();
}

// A slice's guaranteed compute share in `obj`, if given: "compute_share", or "compute", its
// old name, read for one release (docs/api.md). where: "" or "gpus[]." for messages.
Status ReadComputeShare(const json& obj, const std::string& where, double* out) {
  const auto share = obj.find("compute_share"), old = obj.find("compute");
  if (share != obj.end() && old != obj.end()) {
    return Status::BadRequest(where + "compute: the old name of " + where + "compute_share; give compute_share only");
  }
  if (share != obj.end()) return ReadFraction(*share, where + "compute_share", out, 1.0);
  if (old != obj.end()) return ReadFraction(*old, where + "compute", out, 1.0);
  return Status::Ok();
}

// "gpus", each with the top-level "memory" and "compute_share" unless it gives its own.
Status ReadGpus(const json& body, std::vector<SliceRequest::Gpu>* out) {
  uint64_t memory = 0;
  double compute = 0;
  if (auto it = body.find("memory"); it != body.end()) {
    if (Status s = ReadSize(*it, "memory", &memory); !s.ok()) return s;
  }
  if (Status s = ReadComputeShare(body, "", &compute); !s.ok()) return s;
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
      if (Status s = CheckFields(g, {"gpu", "memory", "compute_share", "compute"}); !s.ok()) return s;
      auto ref = g.find("gpu");
      if (ref == g.end()) return Status::BadRequest("gpus: each entry needs \"gpu\" (an index or a UUID)");
      if (ref->is_string()) gpu.ref = ref->get<std::string>();
      else if (ref->is_number_unsigned() && ref->get<uint64_t>() < 4096) gpu.ref = std::to_string(ref->get<uint64_t>());
      else return Status::BadRequest("gpus[].gpu: expected an index or a UUID");
      if (auto m = g.find("memory"); m != g.end()) {
        if (Status s = ReadSize(*m, "gpus[].memory", &gpu.memory); !s.ok()) return s;
      }
      if (Status s = ReadComputeShare(g, "gpus[].", &gpu.compute); !s.ok()) return s;
    } else {
      return Status::BadRequest("gpus: each entry is an index, a UUID or an object");
    }
    if (gpu.memory == 0) {
      return Status::BadRequest("memory: give the slice's memory per GPU, e.g. \"memory\": \"8GiB\"");
    }
    out->push_back(gpu);
  }
  return Status::Ok();
}

}  // namespace

Result<SliceRequest> ParseSliceRequest(const json& body) {
  if (Status s = CheckFields(body, {"name", "user", "project", "class", "protect", "gpus", "memory", "compute_share", "compute",
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
  const std::optional<SliceClass> parsed = ParseSliceClass(cls);
  if (!parsed) return Status::BadRequest("class: '" + cls + "' is neither guaranteed nor opportunistic");
  r.slice_class = *parsed;
  if (auto it = body.find("protect"); it != body.end() && !it->is_null()) {
    if (Status s = ReadProtect(*it, &r.protect_permille); !s.ok()) return s;
    if (Status s = ValidateProtect(r.slice_class, r.protect_permille); !s.ok()) return s;
  }
  if (auto it = body.find("idle_timeout_s"); it != body.end()) {
    if (Status s = ReadInteger(*it, "idle_timeout_s", kIdleTimeoutRange, &r.idle_timeout_s); !s.ok()) return s;
  }
  if (auto it = body.find("holder"); it != body.end()) {
    if (Status s = ReadHolder(*it, &r.holder); !s.ok()) return s;
  }
  if (Status s = ReadGpus(body, &r.gpus); !s.ok()) return s;
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
    const std::optional<SliceClass> parsed = ParseSliceClass(cls);
    if (!parsed) return Status::BadRequest("class: '" + cls + "' is neither guaranteed nor opportunistic");
    c.slice_class = *parsed;
  }
  if (auto it = body.find("protect"); it != body.end()) {
    uint32_t permille = 0;
    if (Status s = ReadProtect(*it, &permille); !s.ok()) return s;
    c.protect_permille = permille;
  }
  if (auto it = body.find("idle_timeout_s"); it != body.end()) {
    int64_t seconds = 0;
    if (Status s = ReadInteger(*it, "idle_timeout_s", kIdleTimeoutRange, &seconds); !s.ok()) return s;
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
    const IntegerRange range{-kMaxProjectPriority, kMaxProjectPriority,
                             "an integer from " + std::to_string(-kMaxProjectPriority) + " to " +
                                 std::to_string(kMaxProjectPriority)};
    int64_t priority = 0;
    if (Status s = ReadInteger(*it, "priority", range, &priority); !s.ok()) return s;
    p.priority = static_cast<int>(priority);  // in range: fits
  }
  return p;
}

// Splits "/v1/slices/a/suspend" into {"v1","slices","a","suspend"}; empty segments, "."
Result<std::string> ParseUserName(const json& body) {
  if (Status s = CheckFields(body, {"name"}); !s.ok()) return s;
  std::string name;
  if (Status s = ReadString(body, "name", &name); !s.ok()) return s;
  return name;
}

Result<int> ParseTraceSeconds(const json& body) {
  if (Status s = CheckFields(body, {"seconds"}); !s.ok()) return s;
  const IntegerRange range{1, kMaxTraceSeconds, "a whole number of seconds to record, 1 to " +
                                                    std::to_string(kMaxTraceSeconds)};
  auto it = body.find("seconds");
  if (it == body.end()) return Status::BadRequest("seconds: expected " + range.text);
  int64_t seconds = 0;
  if (Status s = ReadInteger(*it, "seconds", range, &seconds); !s.ok()) return s;
  return static_cast<int>(seconds);  // in range: fits
}

}  // namespace gslice
