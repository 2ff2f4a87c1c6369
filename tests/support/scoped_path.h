// A path a test owns under /tmp or /dev/shm: unique per process (pid-based), removed with
// everything below it when the test starts and again when it ends, also when it fails (the
// destructor runs on a failed ASSERT too). Symbolic links are removed, never followed.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace gslice::test {

class ScopedPath {
 public:
  // /dev/shm/gslice-test-<pid>-<name> (or under `dir`).
  explicit ScopedPath(const std::string& name, const std::string& dir = "/dev/shm")
      : path_(dir + "/gslice-test-" + std::to_string(getpid()) + "-" + name) {
    Remove();
  }
  ~ScopedPath() { Remove(); }
  ScopedPath(const ScopedPath&) = delete;
  ScopedPath& operator=(const ScopedPath&) = delete;

  const std::string& path() const { return path_; }
  const char* c_str() const { return path_.c_str(); }
  void Remove() const {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

 private:
  std::string path_;
};

}  // namespace gslice::test
