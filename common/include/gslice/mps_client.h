// How a program joins gsliced's MPS on a GPU (docs/compute.md, "The substrate"): the
// environment `gslice run`, the device plugin and the DRA driver give it, and the state of a
// GPU's MPS that gsliced publishes for the Kubernetes plugins, which do not ask gsliced at
// admission. gsliced writes the state (daemon/mps_service.h); the plugins read it.
//
// The state of GPU <uuid> is the file <mps_directory>/<uuid>/tenant, one line: "uid N" when
// the GPU's MPS is given to uid N, "none" when it serves and is given to no one yet. No file:
// gsliced serves no MPS on the GPU. Written whole (renamed into place) by root only.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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

// Writes GPU `uuid`'s state: serving, given to `uid` (-1: no one yet); or removes it (not
// serving). False with *error when it cannot.
bool WriteMpsTenant(const std::string& mps_directory, const std::string& uuid, bool serving, int64_t uid,
                    std::string* error);

// What gsliced published of GPU `uuid`: whether its MPS serves, and to whom (-1: no one yet).
// A file that is not a regular file of root's, or that says anything else, counts as not
// serving.
struct MpsTenant {
  bool serving = false;
  int64_t uid = -1;
};
MpsTenant ReadMpsTenant(const std::string& mps_directory, const std::string& uuid);

}  // namespace gslice
