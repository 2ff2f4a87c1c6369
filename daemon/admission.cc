#include "admission.h"

#include <cmath>
#include <cstdio>
#include <set>

#include "gslice/units.h"

namespace gslice {
namespace {

// Compute shares are compared with this slack so that three slices of 1/3 fit one GPU.
constexpr double kShareEpsilon = 1e-9;

std::string GpuLabel(const GpuInfo& gpu) {
  return "GPU " + std::to_string(gpu.index) + " (" + gpu.uuid + ")";
}

}  // namespace

std::string SizeText(uint64_t bytes) {
  char buf[32];
  return FormatSize(bytes, buf, sizeof buf);
}

std::string PercentText(double fraction) {
  char buf[32];
  double pct = fraction * 100.0;
  if (std::fabs(pct - std::round(pct)) < 0.05) {
    std::snprintf(buf, sizeof buf, "%.0f%%", pct);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f%%", pct);
  }
  return buf;
}

std::map<std::string, GpuCommitment> CommitmentsByGpu(const std::vector<Slice>& slices) {
  std::map<std::string, GpuCommitment> out;
  for (const Slice& s : slices) {
    for (const SliceGpu& g : s.gpus) {
      GpuCommitment& c = out[g.uuid];
      c.slices++;
      if (s.slice_class == SliceClass::kGuaranteed) {
        c.guaranteed_memory += g.memory_limit;
        c.guaranteed_compute += g.compute_share;
      }
    }
  }
  return out;
}

ProjectUsage UsageOfProject(const std::string& project, const std::vector<Slice>& slices) {
  ProjectUsage u;
  for (const Slice& s : slices) {
    if (s.project != project) continue;
    u.slices++;
    if (s.slice_class != SliceClass::kGuaranteed) continue;
    for (const SliceGpu& g : s.gpus) {
      u.guaranteed_memory += g.memory_limit;
      u.guaranteed_compute += g.compute_share;
    }
  }
  return u;
}

Status Admit(const Slice& candidate, const std::vector<GpuInfo>& gpus,
             const std::vector<Slice>& existing, const Project& project) {
  if (candidate.gpus.empty()) {
    return Status::BadRequest("slice '" + candidate.name + "' asks for no GPU: name at least one");
  }
  std::set<std::string> seen;
  for (const SliceGpu& g : candidate.gpus) {
    if (!seen.insert(g.uuid).second) {
      return Status::BadRequest("GPU " + g.uuid + " is listed twice: list each GPU once");
    }
  }
  const bool guaranteed = candidate.slice_class == SliceClass::kGuaranteed;
  auto commitments = CommitmentsByGpu(existing);
  for (const SliceGpu& g : candidate.gpus) {
    const GpuInfo* gpu = nullptr;
    for (const GpuInfo& info : gpus) {
      if (info.uuid == g.uuid) gpu = &info;
    }
    if (gpu == nullptr) {
      return Status::BadRequest("GPU " + g.uuid + " is not on this node: `gslice ls` lists the GPUs");
    }
    if (g.memory_limit == 0) {
      return Status::BadRequest(GpuLabel(*gpu) + ": memory limit is 0: ask for at least 64 MiB");
    }
    if (g.memory_limit > gpu->memory_total) {
      return Status::BadRequest(GpuLabel(*gpu) + " has " + SizeText(gpu->memory_total) +
                                ", asked " + SizeText(g.memory_limit));
    }
    if (!(g.compute_share >= 0) || g.compute_share > 1 + kShareEpsilon) {
      return Status::BadRequest(GpuLabel(*gpu) + ": compute share " + PercentText(g.compute_share) +
                                " is outside 0% to 100%");
    }
    if (!guaranteed) continue;
    const GpuCommitment& c = commitments[g.uuid];
    uint64_t free_memory =
        c.guaranteed_memory >= gpu->memory_total ? 0 : gpu->memory_total - c.guaranteed_memory;
    if (g.memory_limit > free_memory) {
      return Status::Conflict(GpuLabel(*gpu) + ": " + SizeText(free_memory) +
                              " guaranteed memory free, asked " + SizeText(g.memory_limit) +
                              "; ask for less, pick another GPU, or use --class opportunistic");
    }
    double free_compute = std::max(0.0, 1.0 - c.guaranteed_compute);
    if (g.compute_share > free_compute + kShareEpsilon) {
      return Status::Conflict(GpuLabel(*gpu) + ": " + PercentText(free_compute) +
                              " guaranteed compute free, asked " + PercentText(g.compute_share) +
                              "; ask for less, pick another GPU, or use --class opportunistic");
    }
  }
  if (!guaranteed) return Status::Ok();

  ProjectUsage used = UsageOfProject(project.name, existing);
  uint64_t asked_memory = 0;
  double asked_compute = 0;
  for (const SliceGpu& g : candidate.gpus) {
    asked_memory += g.memory_limit;
    asked_compute += g.compute_share;
  }
  if (project.memory_quota > 0 && used.guaranteed_memory + asked_memory > project.memory_quota) {
    uint64_t free_quota =
        used.guaranteed_memory >= project.memory_quota ? 0 : project.memory_quota - used.guaranteed_memory;
    return Status::Conflict("project " + project.name + ": " + SizeText(free_quota) + " of its " +
                            SizeText(project.memory_quota) + " memory quota free, asked " +
                            SizeText(asked_memory) +
                            "; work over quota may run only as --class opportunistic");
  }
  if (project.compute_quota > 0 &&
      used.guaranteed_compute + asked_compute > project.compute_quota + kShareEpsilon) {
    double free_quota = std::max(0.0, project.compute_quota - used.guaranteed_compute);
    return Status::Conflict("project " + project.name + ": " + PercentText(free_quota) +
                            " of its " + PercentText(project.compute_quota) +
                            " compute quota free, asked " + PercentText(asked_compute) +
                            "; work over quota may run only as --class opportunistic");
  }
  return Status::Ok();
}

}  // namespace gslice
