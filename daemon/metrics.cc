#include "metrics.h"

#include <charconv>

#include "gslice/mps_client.h"

namespace gslice {
namespace {

enum class Kind { kGauge, kCounter };

struct MetricDef {
  const char* name;
  Kind kind;
  const char* help;
};

// Every metric gsliced exports. Label sets: gpu = GPU UUID; slice, user, project, class,
// pod, namespace for slices; gpu, slice, pid, pod, namespace, container for processes.
enum MetricId {
  kGpuInfo,
  kGpuMemoryTotal,
  kGpuMemoryUsed,
  kGpuMemoryGuaranteed,
  kGpuComputeGuaranteed,
  kGpuUtilization,
  kGpuSharing,
  kGpuMpsUid,
  kGpuMpsClass,
  kGpuMpsRestarts,
  kSliceMemoryLimit,
  kSliceMemoryUsed,
  kSliceComputeShare,
  kSliceProtect,
  kSliceComputeUsed,
  kSliceProcesses,
  kSliceState,
  kSliceThrottled,
  kSliceMps,
  kProcessMemoryUsed,
  kProjectMemoryQuota,
  kProjectMemoryGuaranteed,
  kProjectComputeQuota,
  kProjectComputeGuaranteed,
  kProjectPriority,
  kSlicesCreated,
  kSlicesDeleted,
  kAdmissionRefusals,
  kSlicesAdopted,
  kSuspendRequests,
  kResumeRequests,
  kApiRequests,
  kStartTime,
  kMetricCount
};

constexpr MetricDef kMetrics[kMetricCount] = {
    {"gslice_gpu_info", Kind::kGauge, "GPUs on this node (value 1), with index and model name."},
    {"gslice_gpu_memory_total_bytes", Kind::kGauge, "Memory of the GPU."},
    {"gslice_gpu_memory_used_bytes", Kind::kGauge, "Memory in use on the GPU, every process."},
    {"gslice_gpu_memory_guaranteed_bytes", Kind::kGauge,
     "Memory reserved on the GPU by guaranteed slices."},
    {"gslice_gpu_compute_guaranteed_ratio", Kind::kGauge,
     "Compute of the GPU reserved by guaranteed slices (0..1)."},
    {"gslice_gpu_utilization_ratio", Kind::kGauge,
     "Fraction of the last sample period a kernel ran on the GPU (0..1)."},
    {"gslice_gpu_sharing", Kind::kGauge,
     "How the GPU is shared (value 1): substrate mps or time-sliced, and the reason: serving, mps-off, "
     "no-control, compute-mode or daemon-down."},
    {"gslice_gpu_mps_uid", Kind::kGauge, "The uid the GPU's MPS serves; absent while it serves no one."},
    {"gslice_gpu_mps_class", Kind::kGauge,
     "The class of that uid's slices the GPU's MPS serves (value 1): guaranteed, opportunistic, or any "
     "(both, mps_classes \"mixed\"); absent while it serves no one."},
    {"gslice_gpu_mps_restarts_total", Kind::kCounter,
     "Times the GPU's MPS control daemon was found dead and started again."},
    {"gslice_slice_memory_limit_bytes", Kind::kGauge, "Memory limit of the slice on the GPU."},
    {"gslice_slice_memory_used_bytes", Kind::kGauge, "Memory the slice's processes use on the GPU."},
    {"gslice_slice_compute_share_ratio", Kind::kGauge, "Compute share of the slice on the GPU (0..1)."},
    {"gslice_slice_protect_ratio", Kind::kGauge,
     "Protection level of a guaranteed slice: the fraction of its solo speed opportunistic work must leave it."},
    {"gslice_slice_compute_used_ratio", Kind::kGauge,
     "Compute the slice used over the last sample period (0..1 of a GPU), when known."},
    {"gslice_slice_processes", Kind::kGauge, "Processes attached to the slice."},
    {"gslice_slice_state", Kind::kGauge,
     "Lifecycle state of the slice: 1 for the current state, 0 for the others."},
    {"gslice_slice_throttled", Kind::kGauge, "1 while the compute gate holds the slice back."},
    {"gslice_slice_mps", Kind::kGauge, "1 where the slice uses the GPU's MPS server, 0 where it is time-sliced."},
    {"gslice_process_memory_used_bytes", Kind::kGauge,
     "Memory a process of a slice uses on the GPU; pod, namespace and container when known."},
    {"gslice_project_memory_quota_bytes", Kind::kGauge,
     "Guaranteed memory quota of the project (0: unlimited)."},
    {"gslice_project_memory_guaranteed_bytes", Kind::kGauge,
     "Guaranteed memory the project's slices hold."},
    {"gslice_project_compute_quota_ratio", Kind::kGauge,
     "Guaranteed compute quota of the project, in GPUs (0: unlimited)."},
    {"gslice_project_compute_guaranteed_ratio", Kind::kGauge,
     "Guaranteed compute the project's slices hold, in GPUs."},
    {"gslice_project_priority", Kind::kGauge, "Priority of the project (higher yields last)."},
    {"gslice_slices_created_total", Kind::kCounter, "Slices created since gsliced started."},
    {"gslice_slices_deleted_total", Kind::kCounter, "Slices deleted since gsliced started."},
    {"gslice_admission_refusals_total", Kind::kCounter,
     "Slice requests refused by admission control or quota."},
    {"gslice_slices_adopted_total", Kind::kCounter,
     "Running slices gsliced found and took over when it started."},
    {"gslice_suspend_requests_total", Kind::kCounter, "Suspend requests received."},
    {"gslice_resume_requests_total", Kind::kCounter, "Resume requests received."},
    {"gslice_api_requests_total", Kind::kCounter, "API requests answered, by status code."},
    {"gslice_daemon_start_time_seconds", Kind::kGauge, "When gsliced started (unix time)."},
};

// Label values escape backslash, double quote and newline.
std::string Escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

class Writer {
 public:
  void Header(MetricId id) {
    const MetricDef& m = kMetrics[id];
    out_ += "# HELP ";
    out_ += m.name;
    out_ += ' ';
    out_ += m.help;
    out_ += "\n# TYPE ";
    out_ += m.name;
    out_ += m.kind == Kind::kCounter ? " counter\n" : " gauge\n";
  }
  void Sample(MetricId id, const std::vector<std::pair<const char*, std::string>>& labels,
              double value) {
    out_ += kMetrics[id].name;
    if (!labels.empty()) {
      out_ += '{';
      bool first = true;
      for (const auto& [k, v] : labels) {
        if (!first) out_ += ',';
        first = false;
        out_ += k;
        out_ += "=\"";
        out_ += Escape(v);
        out_ += '"';
      }
      out_ += '}';
    }
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, value);  // shortest exact form
    out_ += ' ';
    out_.append(buf, res.ptr);
    out_ += '\n';
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

using Labels = std::vector<std::pair<const char*, std::string>>;

Labels SliceLabels(const Slice& s, const std::string& gpu) {
  Labels l;
  if (!gpu.empty()) l.emplace_back("gpu", gpu);
  l.emplace_back("slice", s.name);
  l.emplace_back("user", s.user);
  l.emplace_back("project", s.project);
  l.emplace_back("class", std::string(ToString(s.slice_class)));
  if (!s.pod.empty()) l.emplace_back("pod", s.pod);
  if (!s.pod_namespace.empty()) l.emplace_back("namespace", s.pod_namespace);
  return l;
}

// The node's GPUs: what they are, their memory, their guarantees and how they are shared.
void WriteGpus(Writer& w, const NodeSnapshot& snap) {
  w.Header(kGpuInfo);
  for (const GpuView& g : snap.gpus) {
    w.Sample(kGpuInfo, {{"gpu", g.gpu.uuid}, {"index", std::to_string(g.gpu.index)}, {"name", g.gpu.name}}, 1);
  }
  struct GpuGauge {
    MetricId id;
    double (*value)(const GpuView&);
  };
  const GpuGauge gpu_gauges[] = {
      {kGpuMemoryTotal, [](const GpuView& g) { return double(g.gpu.memory_total); }},
      {kGpuMemoryUsed, [](const GpuView& g) { return double(g.gpu.memory_used); }},
      {kGpuMemoryGuaranteed, [](const GpuView& g) { return double(g.guaranteed_memory); }},
      {kGpuComputeGuaranteed, [](const GpuView& g) { return g.guaranteed_compute; }},
  };
  for (const GpuGauge& gauge : gpu_gauges) {
    w.Header(gauge.id);
    for (const GpuView& g : snap.gpus) w.Sample(gauge.id, {{"gpu", g.gpu.uuid}}, gauge.value(g));
  }
  w.Header(kGpuUtilization);
  for (const GpuView& g : snap.gpus) {
    if (g.gpu.utilization >= 0) w.Sample(kGpuUtilization, {{"gpu", g.gpu.uuid}}, g.gpu.utilization);
  }
  w.Header(kGpuSharing);
  for (const GpuView& g : snap.gpus) {
    w.Sample(kGpuSharing,
             {{"gpu", g.gpu.uuid}, {"substrate", g.sharing.mps ? "mps" : "time-sliced"}, {"reason", g.sharing.reason}}, 1);
  }
  w.Header(kGpuMpsUid);
  for (const GpuView& g : snap.gpus) {
    if (g.sharing.mps && g.sharing.tenant_uid >= 0) w.Sample(kGpuMpsUid, {{"gpu", g.gpu.uuid}}, double(g.sharing.tenant_uid));
  }
  w.Header(kGpuMpsClass);
  for (const GpuView& g : snap.gpus) {
    if (g.sharing.mps && g.sharing.tenant_uid >= 0) {
      w.Sample(kGpuMpsClass, {{"gpu", g.gpu.uuid}, {"class", std::string(MpsClassName(g.sharing.tenant_class))}}, 1);
    }
  }
  w.Header(kGpuMpsRestarts);
  for (const GpuView& g : snap.gpus) w.Sample(kGpuMpsRestarts, {{"gpu", g.gpu.uuid}}, g.mps_restarts);
}

// Each slice on each of its GPUs, and the processes that run in it.
void WriteSlices(Writer& w, const NodeSnapshot& snap) {
  w.Header(kSliceMemoryLimit);
  for (const SliceView& v : snap.slices) {
    for (const SliceGpu& g : v.slice.gpus) w.Sample(kSliceMemoryLimit, SliceLabels(v.slice, g.uuid), double(g.memory_limit));
  }
  w.Header(kSliceMemoryUsed);
  for (const SliceView& v : snap.slices) {
    for (const SliceGpu& g : v.slice.gpus) {
      auto it = v.memory_used.find(g.uuid);
      w.Sample(kSliceMemoryUsed, SliceLabels(v.slice, g.uuid), it == v.memory_used.end() ? 0.0 : double(it->second));
    }
  }
  w.Header(kSliceComputeShare);
  for (const SliceView& v : snap.slices) {
    for (const SliceGpu& g : v.slice.gpus) w.Sample(kSliceComputeShare, SliceLabels(v.slice, g.uuid), g.compute_share);
  }
  w.Header(kSliceProtect);
  for (const SliceView& v : snap.slices) {
    if (v.slice.slice_class != SliceClass::kGuaranteed) continue;
    w.Sample(kSliceProtect, SliceLabels(v.slice, ""), EffectiveProtectPermille(v.slice.protect_permille) / 1000.0);
  }
  w.Header(kSliceComputeUsed);
  for (const SliceView& v : snap.slices) {
    if (v.compute_used >= 0) w.Sample(kSliceComputeUsed, SliceLabels(v.slice, ""), v.compute_used);
  }
  w.Header(kSliceProcesses);
  for (const SliceView& v : snap.slices) w.Sample(kSliceProcesses, SliceLabels(v.slice, ""), double(v.processes.size()));
  w.Header(kSliceState);
  for (const SliceView& v : snap.slices) {
    for (SliceState s : {SliceState::kRunning, SliceState::kSuspending, SliceState::kSuspended,
                         SliceState::kResuming, SliceState::kFailed}) {
      Labels l = SliceLabels(v.slice, "");
      l.emplace_back("state", std::string(ToString(s)));
      w.Sample(kSliceState, l, v.slice.state == s ? 1 : 0);
    }
  }
  w.Header(kSliceThrottled);
  for (const SliceView& v : snap.slices) w.Sample(kSliceThrottled, SliceLabels(v.slice, ""), v.throttled ? 1 : 0);
  w.Header(kSliceMps);
  for (const SliceView& v : snap.slices) {
    for (const SliceGpu& g : v.slice.gpus) {
      auto it = v.sharing.find(g.uuid);
      w.Sample(kSliceMps, SliceLabels(v.slice, g.uuid), it != v.sharing.end() && it->second.mps ? 1 : 0);
    }
  }
  w.Header(kProcessMemoryUsed);
  for (const SliceView& v : snap.slices) {
    for (const ProcessUsage& p : v.processes) {
      Labels l = {{"gpu", p.gpu_uuid}, {"slice", v.slice.name}, {"pid", std::to_string(p.pid)}};
      if (!p.pod.empty()) l.emplace_back("pod", p.pod);
      if (!p.pod_namespace.empty()) l.emplace_back("namespace", p.pod_namespace);
      if (!p.container.empty()) l.emplace_back("container", p.container);
      w.Sample(kProcessMemoryUsed, l, double(p.memory_used));
    }
  }
}

// Each project's quotas and what its slices are guaranteed.
void WriteProjects(Writer& w, const NodeSnapshot& snap) {
  struct ProjectGauge {
    MetricId id;
    double (*value)(const ProjectView&);
  };
  const ProjectGauge project_gauges[] = {
      {kProjectMemoryQuota, [](const ProjectView& p) { return double(p.project.memory_quota); }},
      {kProjectMemoryGuaranteed, [](const ProjectView& p) { return double(p.guaranteed_memory); }},
      {kProjectComputeQuota, [](const ProjectView& p) { return p.project.compute_quota; }},
      {kProjectComputeGuaranteed, [](const ProjectView& p) { return p.guaranteed_compute; }},
      {kProjectPriority, [](const ProjectView& p) { return double(p.project.priority); }},
  };
  for (const ProjectGauge& gauge : project_gauges) {
    w.Header(gauge.id);
    for (const ProjectView& p : snap.projects) w.Sample(gauge.id, {{"project", p.project.name}}, gauge.value(p));
  }
}

// The registry's counters since gsliced started, and when it started.
void WriteCounters(Writer& w, const RegistryCounters& registry, double start_time_seconds) {
  struct Counter {
    MetricId id;
    const std::atomic<uint64_t>* value;
  };
  const Counter counters[] = {
      {kSlicesCreated, &registry.slices_created},   {kSlicesDeleted, &registry.slices_deleted},
      {kAdmissionRefusals, &registry.admission_refusals}, {kSlicesAdopted, &registry.slices_adopted},
      {kSuspendRequests, &registry.suspend_requests}, {kResumeRequests, &registry.resume_requests},
  };
  for (const Counter& c : counters) {
    w.Header(c.id);
    w.Sample(c.id, {}, double(c.value->load()));
  }
  w.Header(kStartTime);
  w.Sample(kStartTime, {}, start_time_seconds);
}

}  // namespace

std::string RenderMetrics(const NodeSnapshot& snap, const RegistryCounters& registry,
                          double start_time_seconds) {
  Writer w;
  WriteGpus(w, snap);
  WriteSlices(w, snap);
  WriteProjects(w, snap);
  WriteCounters(w, registry, start_time_seconds);
  return w.Take();
}

std::vector<std::string> MetricNames() {
  std::vector<std::string> out;
  for (const MetricDef& m : kMetrics) out.push_back(m.name);
  return out;
}

std::string RenderApiMetrics(const std::map<int, uint64_t>& requests_by_code) {
  Writer w;
  w.Header(kApiRequests);
  for (const auto& [code, count] : requests_by_code) {
    w.Sample(kApiRequests, {{"code", std::to_string(code)}}, double(count));
  }
  return w.Take();
}

}  // namespace gslice
