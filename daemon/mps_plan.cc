#include "mps_plan.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "gslice/nvml_subset.h"

namespace gslice {
namespace {

std::string GpuText(unsigned index) { return "GPU " + std::to_string(index); }

std::string UidText(int64_t uid) { return "uid " + std::to_string(uid); }

const char* ComputeModeName(int mode) {
  switch (mode) {
    case NVML_COMPUTEMODE_DEFAULT: return "DEFAULT";
    case NVML_COMPUTEMODE_EXCLUSIVE_THREAD: return "EXCLUSIVE_THREAD";
    case NVML_COMPUTEMODE_PROHIBITED: return "PROHIBITED";
    case NVML_COMPUTEMODE_EXCLUSIVE_PROCESS: return "EXCLUSIVE_PROCESS";
    default: return "unknown";
  }
}

}  // namespace

bool ParseMpsMode(std::string_view text, MpsMode* out) {
  for (MpsMode m : {MpsMode::kOff, MpsMode::kAuto, MpsMode::kOn}) {
    if (text == ToString(m)) {
      *out = m;
      return true;
    }
  }
  return false;
}

std::string_view ToString(MpsMode mode) {
  switch (mode) {
    case MpsMode::kOff: return "off";
    case MpsMode::kAuto: return "auto";
    case MpsMode::kOn: return "on";
  }
  return "off";
}

GpuSharing DecideGpuSharing(MpsMode mode, bool control_found, const std::string& control, int compute_mode,
                            unsigned index, bool daemon_up, const std::string& daemon_problem) {
  const std::string gpu = GpuText(index);
  if (mode == MpsMode::kOff) {
    return {.reason = "mps-off", .why = "gsliced's mps option is off: every slice on " + gpu + " is time-sliced"};
  }
  if (!control_found) {
    return {.reason = "no-control",
            .why = "no MPS control program (" + control + ", gsliced's mps_control) on this node: every slice on " + gpu +
                   " is time-sliced; install the NVIDIA driver's MPS tools to share its SMs"};
  }
  if (compute_mode != NVML_COMPUTEMODE_DEFAULT) {
    std::string why = compute_mode < 0
                          ? "NVML does not say " + gpu + "'s compute mode"
                          : gpu + " is in compute mode " + ComputeModeName(compute_mode);
    if (compute_mode == NVML_COMPUTEMODE_EXCLUSIVE_PROCESS) {
      why += ", where only the MPS server may hold a context, so another user's program could not run beside it";
    }
    return {.reason = "compute-mode",
            .why = why + ": gsliced runs MPS only in compute mode DEFAULT and never changes the mode "
                         "(an administrator can: nvidia-smi -i " + std::to_string(index) + " -c DEFAULT); every slice on " +
                   gpu + " is time-sliced"};
  }
  if (!daemon_up) {
    return {.reason = "daemon-down",
            .why = gpu + "'s MPS control daemon is not running" +
                   (daemon_problem.empty() ? std::string() : " (" + daemon_problem + ")") +
                   ": slices on it are time-sliced until gsliced has started it again"};
  }
  return {.mps = true, .reason = "serving", .why = "gsliced's MPS control daemon serves " + gpu};
}

MpsPlan PlanMps(const std::vector<MpsGpuState>& gpus, const std::vector<MpsCandidate>& slices) {
  MpsPlan plan;
  for (const MpsGpuState& g : gpus) {
    GpuSharing sharing = g.sharing;
    sharing.tenant_uid = -1;
    sharing.tenant_why.clear();
    const std::string gpu = GpuText(g.index);
    std::vector<const MpsCandidate*> here;
    for (const MpsCandidate& c : slices) {
      if (std::find(c.gpus.begin(), c.gpus.end(), g.uuid) != c.gpus.end()) here.push_back(&c);
    }
    if (sharing.mps) {
      // Who holds it: the uids of slices here that can use MPS, deleted ones included.
      std::set<int64_t> holders;
      const MpsCandidate* oldest = nullptr;
      for (const MpsCandidate* c : here) {
        if (c->gpus.size() != 1 || c->uid < 0) continue;
        holders.insert(c->uid);
        if (c->deleted) continue;
        if (oldest == nullptr || std::tie(c->created_at, c->slice) < std::tie(oldest->created_at, oldest->slice)) {
          oldest = c;
        }
      }
      if (g.tenant_uid >= 0 && holders.count(g.tenant_uid) != 0) {
        sharing.tenant_uid = g.tenant_uid;
        sharing.tenant_why = UidText(g.tenant_uid) + " has slices on " + gpu + "; it keeps its MPS until they are gone";
      } else if (oldest != nullptr) {
        sharing.tenant_uid = oldest->uid;
        sharing.tenant_why = UidText(oldest->uid) + " holds the oldest slice on " + gpu + " that can use MPS (" +
                             oldest->slice + ")";
        if (g.busy_uid >= 0 && g.busy_uid != oldest->uid) {
          sharing.tenant_why += "; it gets it once the programs of " + UidText(g.busy_uid) +
                                " still on the MPS server have exited";
        }
      } else {
        sharing.tenant_why = "no slice on " + gpu + " uses its MPS yet: the next one of a single GPU takes it";
      }
    }
    for (const MpsCandidate* c : here) {
      SliceSharing s;
      if (!sharing.mps) {
        s.why = sharing.why;
      } else if (c->gpus.size() != 1) {
        s.why = "a program reaches one MPS control daemon and gsliced runs one per GPU: a slice over " +
                std::to_string(c->gpus.size()) + " GPUs is time-sliced on each";
      } else if (c->uid < 0) {
        s.why = "gsliced does not know the uid its programs run as, and an MPS server serves one uid: time-sliced";
      } else if (c->uid == sharing.tenant_uid && c->uid == g.tenant_uid) {
        s.mps = true;
        s.why = "on " + gpu + "'s MPS server of " + UidText(c->uid);
      } else if (c->uid == sharing.tenant_uid) {
        s.why = g.busy_uid >= 0 ? "programs of " + UidText(g.busy_uid) + " still use " + gpu +
                                      "'s MPS server, and one of " + UidText(c->uid) +
                                      " would wait at CUDA initialisation until they exit: time-sliced until then"
                                : gpu + "'s MPS is being given to " + UidText(c->uid) + ": time-sliced until then";
      } else {
        s.why = gpu + "'s MPS serves " + UidText(sharing.tenant_uid) +
                ", and a server serves one uid at a time: a program of " + UidText(c->uid) +
                " on it would wait at CUDA initialisation until every program of " + UidText(sharing.tenant_uid) +
                " there has exited, so it runs time-sliced beside them";
      }
      plan.slices[{c->slice, g.uuid}] = std::move(s);
    }
    plan.gpus[g.uuid] = std::move(sharing);
  }
  return plan;
}

}  // namespace gslice
