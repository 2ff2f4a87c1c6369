#include "peer_identity.h"

#include <grp.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
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

namespace {

// The IPv4 address in `a` when it is one (AF_INET, or AF_INET6 mapped), else nothing.
std::optional<in_addr> Ipv4Of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return reinterpret_cast<const sockaddr_in&>(a).sin_addr;
  const auto& six = reinterpret_cast<const sockaddr_in6&>(a);
  if (a.ss_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&six.sin6_addr)) return std::nullopt;
  in_addr four{};
  std::memcpy(&four, &six.sin6_addr.s6_addr[12], sizeof four);
  return four;
}

uint16_t PortOf(const sockaddr_storage& a) {
  return a.ss_family == AF_INET ? reinterpret_cast<const sockaddr_in&>(a).sin_port
                                : reinterpret_cast<const sockaddr_in6&>(a).sin6_port;
}

// The owner of the TCP socket of `family` whose own end is `src` and whose peer is `dst`
// (addresses in network order, 4 or 16 bytes; ports in network order).
std::optional<int64_t> TcpSocketOwner(uint8_t family, const void* src, uint16_t sport, const void* dst,
                                      uint16_t dport) {
  int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (nl < 0) return std::nullopt;
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } query{};
  query.header.nlmsg_len = sizeof query;
  query.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  query.header.nlmsg_flags = NLM_F_REQUEST;  // one socket by its addresses, not a dump
  query.request.sdiag_family = family;
  query.request.sdiag_protocol = IPPROTO_TCP;
  query.request.idiag_states = ~0u;
  query.request.id.idiag_sport = sport;
  query.request.id.idiag_dport = dport;
  const size_t length = family == AF_INET ? 4 : 16;
  std::memcpy(query.request.id.idiag_src, src, length);
  std::memcpy(query.request.id.idiag_dst, dst, length);
  query.request.id.idiag_cookie[0] = query.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  std::optional<int64_t> owner;
  alignas(nlmsghdr) char reply[8192];
  if (sendto(nl, &query, sizeof query, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) ==
      static_cast<ssize_t>(sizeof query)) {
    ssize_t n = recv(nl, reply, sizeof reply, 0);
    // NLMSG_OK compares a signed length with the header's unsigned one.
    int left = n > 0 ? static_cast<int>(n) : 0;
    for (auto* h = reinterpret_cast<nlmsghdr*>(reply); NLMSG_OK(h, static_cast<unsigned>(left));
         h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) continue;
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) break;
      owner = static_cast<const inet_diag_msg*>(NLMSG_DATA(h))->idiag_uid;
      break;
    }
  }
  close(nl);
  return owner;
}

}  // namespace

std::optional<int64_t> LoopbackPeerUid(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof local, peer_len = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
    return std::nullopt;
  }
  // The peer's socket: its own end is our peer's address, its peer ours.
  std::optional<in_addr> peer4 = Ipv4Of(peer), local4 = Ipv4Of(local);
  if (peer4 && local4) {
    if ((ntohl(peer4->s_addr) >> 24) != 127) return std::nullopt;
    // An IPv4 client of an IPv6 listener has an IPv4 socket; one that connected through an
    // IPv6 socket to the mapped address has an IPv6 one.
    if (auto uid = TcpSocketOwner(AF_INET, &*peer4, PortOf(peer), &*local4, PortOf(local))) return uid;
    if (peer.ss_family != AF_INET6) return std::nullopt;
  } else if (peer.ss_family != AF_INET6 ||
             !IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr)) {
    return std::nullopt;
  }
  if (peer.ss_family != AF_INET6 || local.ss_family != AF_INET6) return std::nullopt;
  return TcpSocketOwner(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr, PortOf(peer),
                        &reinterpret_cast<const sockaddr_in6&>(local).sin6_addr, PortOf(local));
}

Caller TokenCaller() { return Caller{.user = "token", .uid = -1, .admin = true}; }

}  // namespace gslice
