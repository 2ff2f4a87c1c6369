#include "peer_identity.h"

#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace gslice {

// The groups come from the peer's /proc/<pid>/status while that pid is still a process of
// the peer's uid (its supplementary groups as it runs), else from the group database.
Caller UnixPeerCaller(int fd, int64_t admin_gid) {
  Caller c;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return c;  // nobody
  c.uid = cred.uid;
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(cred.uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr &&
      ValidateName("user", pw.pw_name).ok()) {
    c.user = pw.pw_name;
  } else {
    c.user = "uid-" + std::to_string(cred.uid);  // no name usable in slice names and URLs
  }
  c.admin = cred.uid == 0;
  if (c.admin || admin_gid < 0) return c;
  if (static_cast<int64_t>(cred.gid) == admin_gid) {
    c.admin = true;
    return c;
  }
  // The peer's own groups, if the pid still names a process of that uid.
  bool from_proc = false;
  if (cred.pid > 0) {
    std::ifstream status("/proc/" + std::to_string(cred.pid) + "/status");
    std::string line;
    bool uid_matches = false;
    std::vector<int64_t> groups;
    while (std::getline(status, line)) {
      std::istringstream in(line);
      std::string key;
      in >> key;
      if (key == "Uid:") {
        int64_t real = -1;
        in >> real;
        uid_matches = real == static_cast<int64_t>(cred.uid);
      } else if (key == "Groups:") {
        for (int64_t g; in >> g;) groups.push_back(g);
      }
    }
    if (uid_matches) {
      from_proc = true;
      c.admin = std::find(groups.begin(), groups.end(), admin_gid) != groups.end();
    }
  }
  if (!from_proc && found != nullptr) {
    int n = 256;
    std::vector<gid_t> groups(static_cast<size_t>(n));
    if (getgrouplist(pw.pw_name, cred.gid, groups.data(), &n) >= 0) {
      groups.resize(static_cast<size_t>(n));
      c.admin = std::find(groups.begin(), groups.end(), static_cast<gid_t>(admin_gid)) != groups.end();
    }
  }
  return c;
}

// A TCP caller with the token: an admin without a kernel identity.

Caller TokenCaller() { return Caller{.user = "token", .uid = -1, .admin = true}; }

}  // namespace gslice
