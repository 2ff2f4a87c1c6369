#include "token.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wire.h"

namespace gslice::remote {

bool ReadTokenFile(const std::string& path, std::string* token, std::string* error) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    *error = "token file " + path + ": " + strerror(errno);
    return false;
  }
  struct stat st;
  char buf[kMaxToken + 2];
  ssize_t n = -1;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *error = "token file " + path + ": not a regular file";
  } else if ((st.st_mode & 077) != 0) {
    *error = "token file " + path + ": group or others may access it; it holds a secret (chmod 600 " + path + ")";
  } else {
    do {
      n = read(fd, buf, sizeof buf);
    } while (n < 0 && errno == EINTR);
    if (n < 0) *error = "token file " + path + ": " + strerror(errno);
  }
  close(fd);
  if (n < 0) return false;
  std::string text(buf, static_cast<size_t>(n));
  text = text.substr(0, text.find('\n'));
  const size_t first = text.find_first_not_of(" \t\r");
  const size_t last = text.find_last_not_of(" \t\r");
  *token = first == std::string::npos ? "" : text.substr(first, last - first + 1);
  if (token->size() < kMinToken || token->size() > kMaxToken) {
    *error = "token file " + path + ": the token (its first line) must be " + std::to_string(kMinToken) + " to " +
             std::to_string(kMaxToken) + " characters (openssl rand -hex 32 > FILE)";
    token->clear();
    return false;
  }
  return true;
}

bool TokenEquals(const std::string& expected, const uint8_t* got, size_t n) {
  // Every byte of the peer's token is compared (against the expected one, or against itself
  // past the expected length), and differences are accumulated, never branched on.
  unsigned diff = expected.size() == n ? 0u : 1u;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t want = i < expected.size() ? static_cast<uint8_t>(expected[i]) : got[i];
    diff |= static_cast<unsigned>(want ^ got[i]);
  }
  volatile unsigned result = diff;
  return result == 0 && n != 0;
}

}  // namespace gslice::remote
