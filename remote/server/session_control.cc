#include "session_control.h"

#include <errno.h>
#include <sys/socket.h>

#include <sstream>

namespace gslice::remote {

bool AskListener(int control, const std::string& request, std::string* refusal) {
  ssize_t n;
  do {
    n = send(control, request.data(), request.size(), MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  char answer[kMaxControlMessage];
  if (n == static_cast<ssize_t>(request.size())) {
    do {
      n = recv(control, answer, sizeof answer, 0);
    } while (n < 0 && errno == EINTR);
  } else {
    n = -1;
  }
  if (n <= 0) {
    *refusal = "the server is stopping";
    return false;
  }
  if (answer[0] == kYes[0]) return true;
  refusal->assign(answer + 1, static_cast<size_t>(n - 1));
  return false;
}

std::string TenantRequest(const Tenant& t) {
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (uint8_t b : t.digest) {
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  return "tenant " + t.name + " " + hex + " " + std::to_string(t.uid) + " " + std::to_string(t.gid);
}

bool ParseTenantRequest(const std::string& request, Tenant* t) {
  std::istringstream in(request);
  std::string word, hex;
  unsigned long long uid = 0, gid = 0;
  if (!(in >> word >> t->name >> hex >> uid >> gid) || word != "tenant" || hex.size() != 64) return false;
  for (size_t i = 0; i < 32; ++i) {
    const std::string byte = hex.substr(2 * i, 2);
    if (byte.find_first_not_of("0123456789abcdef") != std::string::npos) return false;
    t->digest[i] = static_cast<uint8_t>(std::stoul(byte, nullptr, 16));
  }
  t->uid = static_cast<uid_t>(uid);
  t->gid = static_cast<gid_t>(gid);
  return true;
}

}  // namespace gslice::remote
