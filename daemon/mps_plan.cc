#include "mps_plan.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "gslice/nvml_subset.h"

namespace gslice {
namespace {

std::string GpuText(unsigned index) { return "GPU " + std::to_string(index); }

std::string UidText(int64_t uid) { return "uid " + std::to_string(uid); }

// Who a GPU's MPS is for: a uid and, under "one", a class of its slices.
struct Tenant {
  int64_t uid = -1;
  std::optional<SliceClass> cls;
  bool operator==(const Tenant&) const = default;
  bool operator<(const Tenant& o) const { return std::tie(uid, cls) < std::tie(o.uid, o.cls); }
};

// Whether `c` came before `than` (nullptr: before anything); ties go by name.
bool Older(const MpsCandidate& c, const MpsCandidate* than) {
  return than == nullptr || std::tie(c.created_at, c.slice) < std::tie(than->created_at, than->slice);
}

std::string TenantText(const Tenant& t) {
  return t.cls ? "the " + std::string(ToString(*t.cls)) + " slices of " + UidText(t.uid) : UidText(t.uid);
}

// The tenant a slice would make: its uid, and its class where a server serves one.
Tenant TenantOf(const MpsCandidate& c, MpsClasses classes) {
  return Tenant{.uid = c.uid, .cls = classes == MpsClasses::kOne ? std::optional(c.slice_class) : std::nullopt};
}

// The tenant of GPU `g`, which serves MPS, given the slices `here` on it (see mps_plan.h), and
// *why.
Tenant PlanTenant(const MpsGpuState& g, const std::vector<const MpsCandidate*>& here, MpsClasses classes,
                  std::string* why) {
  const std::string gpu = GpuText(g.index);
  const Tenant given{.uid = g.tenant_uid, .cls = g.tenant_class};
  // Who holds it: the tenants of slices here that can use MPS, deleted ones included.
  std::set<Tenant> holders;
  const MpsCandidate* oldest = nullptr;
  const MpsCandidate* oldest_of_given = nullptr;  // of the given uid, deleted ones included
  for (const MpsCandidate* c : here) {
    if (c->gpus.size() != 1 || c->uid < 0) continue;
    holders.insert(TenantOf(*c, classes));
    if (c->uid == given.uid && Older(*c, oldest_of_given)) oldest_of_given = c;
    if (!c->deleted && Older(*c, oldest)) oldest = c;
  }
  if (given.uid >= 0 && holders.count(given) != 0) {
    *why = given.cls ? TenantText(given) + " on " + gpu + " keep its MPS until they are gone"
                     : UidText(given.uid) + " has slices on " + gpu + "; it keeps its MPS until they are gone";
    return given;
  }
  if (classes == MpsClasses::kOne && given.uid >= 0 && !given.cls && oldest_of_given != nullptr) {
    // Given for both classes (by an earlier gsliced, or under "mixed" before a restart), or its
    // class pending: the uid keeps it, and its server serves the class of its oldest slice there.
    const Tenant planned = TenantOf(*oldest_of_given, classes);
    *why = UidText(given.uid) + " has slices on " + gpu + " and keeps its MPS until they are gone, for " +
           TenantText(planned) + " (its oldest there, " + oldest_of_given->slice + ")";
    if (g.busy_uid == given.uid) *why += ", once the programs still on its server, of either class, have exited";
    return planned;
  }
  if (oldest == nullptr) {
    *why = "no slice on " + gpu + " uses its MPS yet: the next one of a single GPU takes it";
    return {};
  }
  const Tenant planned = TenantOf(*oldest, classes);
  *why = UidText(oldest->uid) + " holds the oldest slice on " + gpu + " that can use MPS (" + oldest->slice +
         (planned.cls ? ", " + std::string(ToString(*planned.cls)) : "") + ")";
  if (planned.cls) *why += ": its MPS serves " + TenantText(planned);
  if (g.busy_uid >= 0 && g.busy_uid != oldest->uid) {
    *why += "; it gets it once the programs of " + UidText(g.busy_uid) + " still on the MPS server have exited";
  }
  return planned;
}

// How slice `c` shares GPU `g`, whose sharing and planned tenant the plan has decided.
SliceSharing PlanSlice(const MpsGpuState& g, const GpuSharing& sharing, const Tenant& planned, const MpsCandidate& c,
                       MpsClasses classes) {
  const std::string gpu = GpuText(g.index);
  const Tenant given{.uid = g.tenant_uid, .cls = g.tenant_class};
  const Tenant mine = TenantOf(c, classes);
  if (!sharing.mps) return {.why = sharing.why};
  if (c.gpus.size() != 1) {
    return {.why = "a program reaches one MPS control daemon and gsliced runs one per GPU: a slice over " +
                   std::to_string(c.gpus.size()) + " GPUs is time-sliced on each"};
  }
  if (c.uid < 0) {
    return {.why = "gsliced does not know the uid its programs run as, and an MPS server serves one uid: time-sliced"};
  }
  if (mine == planned && mine == given) {
    return {.mps = true,
            .why = "on " + gpu + "'s MPS server of " + UidText(c.uid) +
                   (mine.cls ? ", which serves its " + std::string(ToString(*mine.cls)) + " slices alone" : "")};
  }
  if (mine == planned && g.busy_uid == c.uid && given.uid == c.uid) {
    return {.why = "programs of " + UidText(c.uid) + " still use " + gpu + "'s MPS server, and the server cannot " +
                   "tell their class (their slices are gone or changed class while they ran); a fault of theirs " +
                   "could end this slice's work (docs/compute.md, Faults): time-sliced until they exit"};
  }
  if (mine == planned) {
    return {.why = g.busy_uid >= 0 ? "programs of " + UidText(g.busy_uid) + " still use " + gpu +
                                         "'s MPS server, and one of " + UidText(c.uid) +
                                         " would wait at CUDA initialisation until they exit: time-sliced until then"
                                   : gpu + "'s MPS is being given to " + TenantText(mine) + ": time-sliced until then"};
  }
  if (c.uid == planned.uid) {
    // Same uid, the other class (only under "one").
    const bool guaranteed = c.slice_class == SliceClass::kGuaranteed;
    return {.why = gpu + "'s MPS serves " + TenantText(planned) + ", and this slice is " +
                   std::string(ToString(c.slice_class)) + ": " +
                   (guaranteed ? "a fault of theirs would end its guaranteed work on that server"
                               : "its faults would end the guaranteed work on that server") +
                   " (docs/compute.md, Faults): time-sliced beside it, as gsliced's mps_classes \"one\" has it; a "
                   "program keeps the substrate it started on, after a class change too, until it starts again"};
  }
  return {.why = gpu + "'s MPS serves " + UidText(planned.uid) + ", and a server serves one uid at a time: a program of " +
                 UidText(c.uid) + " on it would wait at CUDA initialisation until every program of " +
                 UidText(planned.uid) + " there has exited, so it runs time-sliced beside them"};
}

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

bool ParseMpsClasses(std::string_view text, MpsClasses* out) {
  for (MpsClasses c : {MpsClasses::kOne, MpsClasses::kMixed}) {
    if (text == ToString(c)) {
      *out = c;
      return true;
    }
  }
  return false;
}

std::string_view ToString(MpsClasses classes) { return classes == MpsClasses::kMixed ? "mixed" : "one"; }

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

MpsPlan PlanMps(const std::vector<MpsGpuState>& gpus, const std::vector<MpsCandidate>& slices, MpsClasses classes) {
  MpsPlan plan;
  for (const MpsGpuState& g : gpus) {
    GpuSharing sharing = g.sharing;
    sharing.tenant_uid = -1;
    sharing.tenant_class.reset();
    sharing.tenant_why.clear();
    std::vector<const MpsCandidate*> here;
    for (const MpsCandidate& c : slices) {
      if (std::find(c.gpus.begin(), c.gpus.end(), g.uuid) != c.gpus.end()) here.push_back(&c);
    }
    const Tenant planned = sharing.mps ? PlanTenant(g, here, classes, &sharing.tenant_why) : Tenant{};
    sharing.tenant_uid = planned.uid;
    sharing.tenant_class = planned.cls;
    for (const MpsCandidate* c : here) plan.slices[{c->slice, g.uuid}] = PlanSlice(g, sharing, planned, *c, classes);
    plan.gpus[g.uuid] = std::move(sharing);
  }
  return plan;
}

}  // namespace gslice
