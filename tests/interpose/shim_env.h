// Starting programs under the shims on the simulated driver, each test with its own
// simulated node and ledger (unique /dev/shm paths), and reading what they print.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace gslice::test {

struct ChildResult {
  int exit_code = -1;   // -1 when killed by a signal or timed out
  int signal = 0;
  bool timed_out = false;
  std::string out, err;
};

// The environment for a program under the shims: LD_PRELOAD (sanitizer runtime first in
// the sanitize build), GSLICE_REAL_DRIVER/NVML -> the simulated driver, and unique
// GSLICE_SIM_STATE and GSLICE_LEDGER paths derived from name. Extra entries override.
class ShimEnv {
 public:
  explicit ShimEnv(const std::string& name);
  ~ShimEnv();
  ShimEnv(const ShimEnv&) = delete;
  ShimEnv& operator=(const ShimEnv&) = delete;

  std::map<std::string, std::string> vars;
  std::string ledger_path() const { return vars.at("GSLICE_LEDGER"); }

  // Runs argv with this environment (plus PATH etc. of the test), waits at most timeout_s.
  ChildResult Run(const std::vector<std::string>& argv, double timeout_s = 30) const;
  // Starts argv with stdin/stdout pipes; returns the pid. *in_fd / *out_fd: our ends.
  int Start(const std::vector<std::string>& argv, int* in_fd, int* out_fd) const;
};

std::string ClientPath();
std::string GsliceBinary();
// Reads one line from fd (blocking, at most timeout_s); "" on EOF or timeout.
std::string ReadLine(int fd, double timeout_s = 20);

}  // namespace gslice::test
