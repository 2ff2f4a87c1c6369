// Which GPUs gsliced shares through NVIDIA MPS, for which uid, and why: the pure decision
// (no process, file or clock) that mps_service.h carries out and the registry shows.
//
// Facts about MPS it is built on (NVIDIA's nvidia-cuda-mps-control(1)):
//  - a control daemon serves the GPUs visible to it when it starts; the server it starts
//    serves all of them, for one uid at a time;
//  - a client whose uid differs from the running server's waits, inside CUDA's
//    initialisation, until every client of that server has exited;
//  - a program that cannot reach the control daemon runs as it would without MPS;
//  - in compute mode DEFAULT a context outside MPS runs beside the MPS server, the GPU
//    time-slicing between them; in EXCLUSIVE_PROCESS only the server may hold a context.
//
// So gsliced runs one control daemon per GPU (a user on GPU 1 never waits for one on GPU 0),
// and on each GPU one uid at a time, its tenant, may reach that daemon (mps_service.h gives
// the daemon's socket to that uid alone): the tenant's slices there run on MPS, every other
// slice there runs time-sliced beside it, and no program ever waits at CUDA initialisation
// behind another tenant's work. The tenant is the uid of the GPU's oldest slice that can use
// MPS; it stays while any of its slices there exists (deleted ones whose processes still run
// included), and only then passes on. The hand-over itself is the service's: it gives the
// socket to a new uid only once no server of another uid has clients (Invariant: a slice is
// on MPS only where its uid is the tenant the service has actually given the GPU to).
//
// A fatal fault of one MPS client (an illegal address, a trap, a program killed mid-kernel)
// ends every client of its server (docs/compute.md, "Faults"). So under gsliced's
// mps_classes "one" (the default) a GPU's MPS serves one class of its tenant uid too: the
// tenant is a uid and a class, picked, held and passed on together by the rule above, and the
// tenant uid's slices of the other class run time-sliced beside the server, where an
// opportunistic fault cannot end guaranteed work. Under "mixed" both classes of the tenant
// share its server (Invariant: under "one" the slices on a GPU's MPS are all of one class, the
// one the service has given it to). A slice whose class changes moves at the next plan; a
// program keeps the substrate it connected with until it restarts.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model.h"

namespace gslice {

// gsliced's `mps` option.
enum class MpsMode {
  kOff,   // never run MPS
  kAuto,  // run it where the control binary exists and the GPU's compute mode allows it
  kOn,    // as auto, but gsliced refuses to start without the control program
};
bool ParseMpsMode(std::string_view text, MpsMode* out);
std::string_view ToString(MpsMode mode);

// gsliced's `mps_classes` option: which classes of its tenant uid a GPU's MPS serves.
enum class MpsClasses {
  kOne,    // one class at a time, picked with the uid
  kMixed,  // both: the operator accepts that an opportunistic fault ends guaranteed work
};
bool ParseMpsClasses(std::string_view text, MpsClasses* out);
std::string_view ToString(MpsClasses classes);

// How one GPU's work is shared, and a short stable code of why (metrics' label).
struct GpuSharing {
  bool mps = false;        // a control daemon of gsliced serves this GPU now
  std::string reason = {}; // "serving", "mps-off", "no-control", "compute-mode", "daemon-down"
  std::string why = {};    // a sentence a person can act on
  int64_t tenant_uid = -1; // the uid its MPS is for (PlanMps); -1: none yet
  // The class of that uid's slices it serves; nullopt: both ("mixed"), or no tenant.
  std::optional<SliceClass> tenant_class = std::nullopt;
  std::string tenant_why = {};  // why that uid and class (or why none)
};

// Whether gsliced runs MPS on a GPU at all, before any slice: the mode, whether the control
// binary was found (`control` names it for messages), the GPU's compute mode (NVML's value,
// -1 unknown) and its index (for messages). `daemon_up`/`daemon_problem`: the state of the
// GPU's control daemon as mps_service.h last saw it (ignored when MPS cannot serve anyway).
GpuSharing DecideGpuSharing(MpsMode mode, bool control_found, const std::string& control, int compute_mode,
                            unsigned index, bool daemon_up, const std::string& daemon_problem);

// A slice as the plan sees it on the GPUs it uses.
struct MpsCandidate {
  std::string slice;
  int64_t uid = -1;              // the uid its programs run as (-1: not known)
  std::vector<std::string> gpus; // UUIDs
  int64_t created_at = 0;        // unix seconds: the oldest slice of a free GPU makes its tenant
  bool deleted = false;          // deleted while its processes run on (holds, never takes)
  SliceClass slice_class = SliceClass::kGuaranteed;
};

// One GPU's state as the plan needs it.
struct MpsGpuState {
  std::string uuid;
  unsigned index = 0;
  GpuSharing sharing;        // DecideGpuSharing's answer (tenant fields ignored)
  int64_t tenant_uid = -1;   // the uid its daemon's socket is given to now (-1: none)
  // The class of that uid's slices the service has given it to (nullopt: both, or none).
  std::optional<SliceClass> tenant_class = std::nullopt;
  // The uid of a server that still had clients when the service last tried to give the GPU to
  // another uid, or to another class of its uid (then the tenant uid itself, and tenant_class
  // is nullopt); -1: none. The hand-over waits for them.
  int64_t busy_uid = -1;
};

// A slice's sharing on one GPU.
struct SliceSharing {
  bool mps = false;
  std::string why;
};

struct MpsPlan {
  std::map<std::string, GpuSharing> gpus;                                  // by UUID
  std::map<std::pair<std::string, std::string>, SliceSharing> slices;      // by (slice, UUID)
};

// The plan for `gpus` and the slices on them (see the top of this file): each GPU's tenant,
// the uid and class the service should give it to (a GPU that does not serve MPS has none;
// the class is nullopt under kMixed), and each slice's sharing there: MPS only where its uid
// and class are that tenant and the GPU is given to it already. Slices on GPUs not in `gpus`
// are left out.
MpsPlan PlanMps(const std::vector<MpsGpuState>& gpus, const std::vector<MpsCandidate>& slices, MpsClasses classes);

}  // namespace gslice
