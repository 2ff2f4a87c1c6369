#include "trace_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "gslice/units.h"

namespace gslice {

std::string TraceDir(const DaemonConfig& config) {
  std::filesystem::path parent = std::filesystem::path(config.database).parent_path();
  return (parent.empty() ? std::filesystem::path(".") : parent).string() + "/traces";
}

std::string TracePath(const std::string& trace_dir, const std::string& slice) {
  return trace_dir + "/" + slice + ".json";
}

Result<std::string> ReadTraceFile(const std::string& path, uint64_t max_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return Status::NotFound("no trace at " + path);
    if (errno == ELOOP) return Status::Internal(path + " is a symbolic link; gsliced serves only the trace files it writes");
    return Status::Internal("cannot read the trace " + path + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Status::Internal(path + " is not a regular file; gsliced serves only the trace files it writes");
  }
  char limit[32];
  const std::string too_large = "the trace " + path + " is larger than the " +
                                FormatSize(max_bytes, limit, sizeof limit) +
                                " gsliced serves: read it on the node, or record a shorter one";
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    close(fd);
    return Status::Internal(too_large);
  }
  // The file is replaced by rename, never written in place, but read no more than the bound
  // whatever its size says. One byte more than its size: the end is seen without growing (and
  // so copying) the buffer.
  std::string out;
  out.resize(static_cast<size_t>(st.st_size) + 1);
  size_t have = 0;
  for (;;) {
    if (have == out.size()) {
      if (out.size() > max_bytes) break;
      out.resize(std::min<uint64_t>(out.size() + 65536, max_bytes + 1));
    }
    const ssize_t n = read(fd, out.data() + have, out.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return Status::Internal("cannot read the trace " + path + ": " + std::strerror(err));
    }
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  close(fd);
  if (have > max_bytes) return Status::Internal(too_large);
  out.resize(have);
  return out;
}

}  // namespace gslice
