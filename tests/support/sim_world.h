// A test suite's own simulated node: the environment that gives the suite one simulated 2 GiB
// GPU, a ledger and a suspend board under a /dev/shm prefix of its own (pid-based, so suites
// running at once never meet), and the removal of what it left there. Shared by the remote
// suites (tests/remote/remote_test_support.h) and the remote pod suite in tests/k8s.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <initializer_list>
#include <string>
#include <system_error>

namespace gslice::test {

// A suite's world: one simulated 2 GiB GPU and a ledger and suspend board of its own under
// prefix; the caller's gslice settings cleared (and the names in also_unset).
inline void SetUpSimWorld(const std::string& prefix, std::initializer_list<const char*> also_unset = {}) {
  setenv("GSLICE_SIM_STATE", (prefix + "-node").c_str(), 1);
  setenv("GSLICE_SIM_DEVICES", "1", 1);
  setenv("GSLICE_SIM_MEMORY", "2GiB", 1);
  setenv("GSLICE_LEDGER", (prefix + "-ledger").c_str(), 1);
  setenv("GSLICE_SUSPEND_BOARD", (prefix + "-board").c_str(), 1);
  setenv("GSLICE_CONTEXT_OVERHEAD", "64MiB", 1);
  for (const char* v : {"GSLICE_REMOTE", "GSLICE_SOCKET", "GSLICE_DAEMON", "GSLICE_MEMORY", "GSLICE_LOG",
                        "GSLICE_CLASS", "GSLICE_COMPUTE", "GSLICE_SHARE"}) {
    unsetenv(v);
  }
  for (const char* v : also_unset) unsetenv(v);
}

// Removes what a suite's world left under prefix in /dev/shm.
inline void RemoveSimWorld(const std::string& prefix) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    if (entry.path().string().rfind(prefix, 0) == 0) std::filesystem::remove_all(entry.path(), ec);
  }
}

}  // namespace gslice::test
