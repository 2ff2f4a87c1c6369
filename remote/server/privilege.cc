#include "privilege.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "syscall_filter.h"

namespace gslice::remote {
namespace {

std::string Errno(const std::string& what) { return what + ": " + strerror(errno); }

// The calling process's permitted and effective capabilities, or false.
bool Capabilities(uint64_t* permitted, uint64_t* effective) {
  __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  *permitted = data[0].permitted | (static_cast<uint64_t>(data[1].permitted) << 32);
  *effective = data[0].effective | (static_cast<uint64_t>(data[1].effective) << 32);
  return true;
}

// Step 1: a private mount namespace with the hidden files covered.
bool HideFiles(const Confinement& c, std::string* error) {
  if (unshare(CLONE_NEWNS) != 0) return (*error = Errno("cannot make a mount namespace of its own")), false;
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    *error = Errno("cannot make its mounts private");
    return false;
  }
  for (const std::string& path : c.hidden) {
    if (mount(c.placeholder.c_str(), path.c_str(), nullptr, MS_BIND, nullptr) == 0 || errno == ENOENT) continue;
    *error = Errno("cannot hide " + path);
    return false;
  }
  return true;
}

// Step 2: the identity, and no capabilities left to a uid other than 0.
bool BecomeIdentity(const Identity& id, std::string* error) {
  if (id.uid != 0) {
    for (int cap = 0; cap <= 63; ++cap) {
      if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
        *error = Errno("cannot drop capability " + std::to_string(cap) + " from the bounding set");
        return false;
      }
    }
  }
  if (setgroups(0, nullptr) != 0) return (*error = Errno("cannot clear the supplementary groups")), false;
  if (setresgid(id.gid, id.gid, id.gid) != 0) return (*error = Errno("cannot become gid " + std::to_string(id.gid))), false;
  if (setresuid(id.uid, id.uid, id.uid) != 0) return (*error = Errno("cannot become uid " + std::to_string(id.uid))), false;
  uint64_t permitted = 0, effective = 0;
  if (!Capabilities(&permitted, &effective)) return (*error = Errno("cannot read its capabilities")), false;
  if (id.uid != 0 && (permitted != 0 || effective != 0)) {
    *error = "capabilities are left after becoming uid " + std::to_string(id.uid);
    return false;
  }
  return true;
}

}  // namespace

bool MakePlaceholder(std::string* file, std::string* folder, std::string* error) {
  file->clear();
  folder->clear();
  if (geteuid() != 0) return true;
  for (const char* base : {"/run", "/tmp"}) {
    std::string pattern = std::string(base) + "/gslice-remoted-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) continue;
    const std::string path = pattern + "/hidden";
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0);
    if (fd >= 0 && fchmod(fd, 0) == 0) {
      close(fd);
      *file = path;
      *folder = pattern;
      return true;
    }
    if (fd >= 0) close(fd);
    *error = Errno("cannot make " + path);
    rmdir(pattern.c_str());
    return false;
  }
  *error = Errno("cannot make a folder in /run or /tmp for the files workers must not see");
  return false;
}

void RemovePlaceholder(const std::string& file, const std::string& folder) {
  if (!file.empty()) unlink(file.c_str());
  if (!folder.empty()) rmdir(folder.c_str());
}

bool Confine(const Confinement& c, std::string* error) {
  if (geteuid() == 0) {
    if (!HideFiles(c, error) || !BecomeIdentity(c.identity, error)) return false;
  } else if (c.identity.uid != geteuid()) {
    *error = "gslice-remoted runs as uid " + std::to_string(geteuid()) + " and cannot run a worker as uid " +
             std::to_string(c.identity.uid);
    return false;
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return (*error = Errno("cannot set no_new_privs")), false;
  if (!c.syscall_log.empty() && !StartSyscallLog(c.syscall_log, error)) return false;
  return !c.syscall_filter || InstallSyscallFilter(error);
}

}  // namespace gslice::remote
