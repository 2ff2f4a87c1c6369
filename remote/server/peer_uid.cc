#include "peer_uid.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pwd.h>
#include <string.h>
#include <sys/socket.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

namespace gslice::remote {
namespace {

// An address as /proc/net/tcp writes it: the address's 32-bit words in host order, in hex,
// then ':' and the port in hex.
std::string ProcNetAddress(const sockaddr_storage& sa) {
  char text[64];
  if (sa.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&sa);
    snprintf(text, sizeof text, "%08X:%04X", in->sin_addr.s_addr, ntohs(in->sin_port));
    return text;
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&sa);
  uint32_t words[4];
  memcpy(words, &in6->sin6_addr, sizeof words);
  snprintf(text, sizeof text, "%08X%08X%08X%08X:%04X", words[0], words[1], words[2], words[3], ntohs(in6->sin6_port));
  return text;
}

// The uid owning the socket from `local` to `remote` in table (/proc/net/tcp or tcp6).
bool FindOwner(const std::string& table, const std::string& local, const std::string& remote, uid_t* uid) {
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, l, r, state, queues, timer, retransmits;
    unsigned long owner = 0;
    if (!(fields >> slot >> l >> r >> state >> queues >> timer >> retransmits >> owner)) continue;
    if (l == local && r == remote) {
      *uid = static_cast<uid_t>(owner);
      return true;
    }
  }
  return false;
}

gid_t PrimaryGroup(uid_t uid, gid_t otherwise) {
  passwd pw;
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  getpwuid_r(uid, &pw, buf.data(), buf.size(), &found);
  return found != nullptr ? found->pw_gid : otherwise;
}

}  // namespace

std::string PeerName(int fd) {
  sockaddr_storage peer = {};
  socklen_t len = sizeof peer;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  if (peer.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&peer);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (peer.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&peer);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    return std::string("[") + host + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "a unix socket";
}

bool LocalPeer(int fd, PeerUser* out, std::string* error) {
  sockaddr_storage peer = {}, self = {};
  socklen_t plen = sizeof peer, slen = sizeof self;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&self), &slen) != 0) {
    *error = std::string("the connection is gone: ") + strerror(errno);
    return false;
  }
  if (peer.ss_family == AF_UNIX) {
    ucred cred = {};
    socklen_t clen = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0) {
      *error = std::string("no peer credentials: ") + strerror(errno);
      return false;
    }
    *out = PeerUser{.uid = cred.uid, .gid = PrimaryGroup(cred.uid, cred.gid), .pid = cred.pid};
    return true;
  }
  const std::string table = peer.ss_family == AF_INET6 ? "/proc/net/tcp6" : "/proc/net/tcp";
  uid_t uid = 0;
  if ((peer.ss_family != AF_INET && peer.ss_family != AF_INET6) ||
      !FindOwner(table, ProcNetAddress(peer), ProcNetAddress(self), &uid)) {
    *error = "the client's socket is not in " + table + " (not a local client)";
    return false;
  }
  *out = PeerUser{.uid = uid, .gid = PrimaryGroup(uid, static_cast<gid_t>(uid)), .pid = 0};
  return true;
}

}  // namespace gslice::remote
