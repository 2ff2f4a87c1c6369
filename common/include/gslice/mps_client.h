// How a program joins gsliced's MPS on a GPU (docs/compute.md, "The substrate"): the
// environment `gslice run`, the device plugin and the DRA driver give it, and the state of a
// GPU's MPS that gsliced publishes for the Kubernetes plugins, which do not ask gsliced at
// admission. gsliced writes the state (daemon/mps_service.h); the plugins read it.
//
// The state of GPU <uuid> is the file <mps_directory>/<uuid>/tenant, one line:
//   "uid N class C"     the GPU's MPS is given to uid N, for its slices of class C:
//                       "guaranteed" or "opportunistic" (gsliced's mps_classes "one"), or
//                       "any" (mps_classes "mixed": both classes of uid N share the server);
//   "none class any"    it serves and is given to no one yet; the first slice's uid takes it,
//                       with both classes ("mixed");
//   "none class pending" it serves and is given to no one yet; the first slice's uid and class
//                       take it ("one"), so which class it will serve is not known yet;
//   "uid N class pending" given to uid N, the class not settled yet ("one", just after a
//                       gsliced restart adopted a server whose class it does not know).
// No file: gsliced serves no MPS on the GPU. Written whole (renamed into place) by root only.
// The one-field lines of earlier versions ("uid N", "none") read as class "any": those versions
// put both classes of the tenant uid on its server, which is what "any" says.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gslice/slice_class.h"

namespace gslice {

struct MpsClientSetting {
  std::string pipe_directory;  // the GPU's CUDA_MPS_PIPE_DIRECTORY
  std::string log_directory;   // its CUDA_MPS_LOG_DIRECTORY
  bool opportunistic = false;  // the slice's class
  double compute_cap = 0;      // the slice's cap, 0..1; 0: none
};

// CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY; CUDA_MPS_CLIENT_PRIORITY 0 (normal) for
// guaranteed work, 1 (below normal) for opportunistic work, so the hardware scheduler favours
// guaranteed kernels; and with a cap, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: the cap in whole
// percent, rounded up (1 to 100), so the program's kernels use at most that share of the SMs.
std::vector<std::pair<std::string, std::string>> MpsClientEnvironment(const MpsClientSetting& setting);

// The tenant file of GPU `uuid` under `mps_directory`.
std::string MpsTenantPath(const std::string& mps_directory, const std::string& uuid);

// What gsliced publishes of one GPU's MPS.
// Invariant (as written and as read): uid < 0 unless serving; slice_class is set only when
// one_class and uid >= 0.
struct MpsTenant {
  bool serving = false;
  int64_t uid = -1;        // the uid it is given to; -1: no one yet
  bool one_class = false;  // it serves one class of that uid at a time (mps_classes "one")
  // The class it serves; nullopt: both classes (!one_class), or not known yet (one_class:
  // "pending"), so no slice may join it.
  std::optional<SliceClass> slice_class = std::nullopt;
};

// Whether a program of `uid` whose slice is of class `cls` may join the GPU's MPS as
// `tenant` says: it serves, is given to that uid, and serves that class.
bool MpsTakes(const MpsTenant& tenant, int64_t uid, SliceClass cls);

// The word the tenant file, the API and the metrics use for the class a server serves:
// "guaranteed", "opportunistic", or "any" (both).
std::string_view MpsClassName(std::optional<SliceClass> cls);

// Writes GPU `uuid`'s state, or removes it when !tenant.serving. False with *error when it
// cannot.
// REQUIRES: tenant satisfies MpsTenant's invariant.
bool WriteMpsTenant(const std::string& mps_directory, const std::string& uuid, const MpsTenant& tenant,
                    std::string* error);

// What gsliced published of GPU `uuid`. A file that is not a regular file of root's, not
// writable by others, or that says anything else (an unknown class, a uid out of range, a
// class without a uid other than "any" or "pending") counts as not serving.
MpsTenant ReadMpsTenant(const std::string& mps_directory, const std::string& uuid);

}  // namespace gslice
