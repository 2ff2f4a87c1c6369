#include "gslice/k8s/remote_credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <system_error>

#include "token.h"

namespace gslice::k8s {

namespace {

namespace fs = std::filesystem;

// Larger source files are refused: a token is one line, a CA bundle a few dozen certificates.
constexpr off_t kMaxCopy = 1 << 20;

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Reads a source file (following a Secret volume's symlinks) with its status.
bool ReadSource(const std::string& path, std::string* content, struct stat* st, std::string* error) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    *error = Errno(path);
    return false;
  }
  bool ok = fstat(fd, st) == 0 && S_ISREG(st->st_mode) && st->st_size <= kMaxCopy;
  if (!ok) *error = path + ": not a regular file of at most 1 MiB";
  content->clear();
  char buf[8192];
  while (ok) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = Errno(path);
      ok = false;
    }
    if (n <= 0) break;
    content->append(buf, static_cast<size_t>(n));
    ok = content->size() <= static_cast<size_t>(kMaxCopy);
    if (!ok) *error = path + ": larger than 1 MiB";
  }
  close(fd);
  return ok;
}

bool CheckToken(const std::string& path, std::string* content, struct stat* st, std::string* error,
                const char* option = "--remote-token-file") {
  std::string token;
  // The client's own rules, so that what is handed out is what it accepts.
  if (!remote::ReadTokenFile(path, &token, error)) {
    *error = std::string(option) + ": " + *error;
    return false;
  }
  return ReadSource(path, content, st, error);
}

bool CheckCa(const std::string& path, std::string* content, struct stat* st, std::string* error) {
  if (!ReadSource(path, content, st, error)) {
    *error = "--remote-ca: " + *error;
    return false;
  }
  if (content->find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    *error = "--remote-ca: " + path + ": no PEM certificate in it (-----BEGIN CERTIFICATE-----)";
    return false;
  }
  return true;
}

// Pod UIDs are RFC 4122 text; anything else would not be a safe folder name.
bool IsPodUid(const std::string& uid) {
  if (uid.empty() || uid.size() > 64 || uid[0] == '-') return false;
  for (char ch : uid)
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-')) return false;
  return true;
}

// Creates `path` (or finds it) with exactly `mode`, whatever the process's umask: a pod's user
// must be able to pass through its folder.
bool MakeDir(const std::string& path, mode_t mode, std::string* error) {
  if (mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    *error = Errno("cannot create " + path);
    return false;
  }
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = path + ": exists and is not a folder";
    return false;
  }
  if ((st.st_mode & 07777) != mode && chmod(path.c_str(), mode) != 0) {
    *error = Errno("cannot set the mode of " + path);
    return false;
  }
  return true;
}

// Whether `path` is already the copy of a source of `src` status: the copy keeps the source's
// size and modification time (a rotated Secret changes both, or at least the time), and has
// the wanted owner and mode. Decided without reading the copy, which a plugin without
// CAP_DAC_READ_SEARCH may not do once it belongs to the pod's user.
bool IsCurrentCopy(const std::string& path, const struct stat& src, mode_t mode, uid_t owner) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == owner &&
         (st.st_mode & 07777) == mode && st.st_size == src.st_size && st.st_mtim.tv_sec == src.st_mtim.tv_sec &&
         st.st_mtim.tv_nsec == src.st_mtim.tv_nsec;
}

// Writes `content` to dir/name with `mode` and `owner` through a temporary file and a rename.
// The mode is set before the owner: once the file is the pod user's, a plugin without
// CAP_FOWNER can no longer change it.
bool WriteCopy(const std::string& dir, const char* name, const std::string& content, const struct stat& src,
               mode_t mode, uid_t owner, std::string* error) {
  const std::string path = dir + "/" + name;
  if (IsCurrentCopy(path, src, mode, owner)) return true;
  const std::string tmp = dir + "/." + name + ".new";
  unlink(tmp.c_str());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = Errno("cannot create " + tmp);
    return false;
  }
  bool ok = true;
  for (size_t done = 0; ok && done < content.size();) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  if (!ok) *error = Errno("cannot write " + tmp);
  const struct timespec times[2] = {src.st_atim, src.st_mtim};
  if (ok && (fchmod(fd, mode) != 0 || futimens(fd, times) != 0)) {
    *error = Errno("cannot set the mode of " + tmp);
    ok = false;
  }
  if (ok && fchown(fd, owner, 0) != 0) {
    *error = Errno("cannot give " + tmp + " to uid " + std::to_string(owner)) +
             " (the device plugin needs root or CAP_CHOWN)";
    ok = false;
  }
  close(fd);
  if (ok && rename(tmp.c_str(), path.c_str()) != 0) {
    *error = Errno("cannot rename " + tmp + " to " + path);
    ok = false;
  }
  if (!ok) unlink(tmp.c_str());
  return ok;
}

// A Kubernetes namespace name (RFC 1123 label), so never a path of more than one part.
bool IsNamespaceName(const std::string& ns) {
  if (ns.empty() || ns.size() > 63 || ns.front() == '-' || ns.back() == '-') return false;
  for (char ch : ns)
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-')) return false;
  return true;
}

}  // namespace

std::string TokenFileFor(const RemoteCredentials& c, const std::string& ns, std::string* error) {
  if (!c.token_file.empty()) return c.token_file;
  if (c.token_dir.empty()) {
    *error = "no token to give: start the device plugin with --remote-token-file or --remote-token-dir";
    return "";
  }
  if (!IsNamespaceName(ns)) {
    *error = "namespace \"" + ns + "\" is not a Kubernetes namespace name";
    return "";
  }
  const std::string path = c.token_dir + "/" + ns;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    *error = "no token for namespace " + ns + " (" + path + ": " + std::strerror(errno) +
             "): add a key \"" + ns + "\" to the Secret mounted at --remote-token-dir, and its token to the "
             "GPU nodes' --tenants file (docs/kubernetes.md, \"Remote GPUs\")";
    return "";
  }
  return path;
}

bool CheckRemoteCredentials(const RemoteCredentials& c, std::string* error) {
  std::string content;
  struct stat st;
  if (!c.token_file.empty() && !c.token_dir.empty()) {
    *error = "--remote-token-file and --remote-token-dir: give one (every pod's token, or each namespace's)";
    return false;
  }
  if (!c.has_tokens() && !c.ca_file.empty()) {
    *error = "--remote-ca " + c.ca_file + " without --remote-token-file or --remote-token-dir: a tls:// GPU node "
             "wants both";
    return false;
  }
  if (!c.token_file.empty() && !CheckToken(c.token_file, &content, &st, error)) return false;
  if (!c.token_dir.empty() && (stat(c.token_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))) {
    *error = "--remote-token-dir " + c.token_dir + ": not a folder (mount the Secret of the namespaces' tokens there)";
    return false;
  }
  if (!c.ca_file.empty() && !CheckCa(c.ca_file, &content, &st, error)) return false;
  if (c.ca_file.empty() && !c.has_tokens()) return true;
  if (c.host_dir.empty() || c.host_dir[0] != '/') {
    *error = "--remote-credentials-dir " + c.host_dir + ": must be an absolute path on the host";
    return false;
  }
  std::error_code ec;
  fs::create_directories(c.host_dir, ec);
  if (ec) {
    *error = "--remote-credentials-dir: cannot create " + c.host_dir + ": " + ec.message();
    return false;
  }
  // Only the plugin lists the folder; containers reach their own folder through their mount.
  if (chmod(c.host_dir.c_str(), 0711) != 0) {
    *error = Errno("--remote-credentials-dir: " + c.host_dir);
    return false;
  }
  return true;
}

std::string WriteContainerCredentials(const RemoteCredentials& c, const std::string& pod_uid,
                                      const std::string& pod_namespace, size_t index, uint32_t owner,
                                      std::string* error) {
  if (!IsPodUid(pod_uid)) {
    *error = "pod UID \"" + pod_uid + "\" is not a UID";
    return "";
  }
  const std::string token_file = TokenFileFor(c, pod_namespace, error);
  if (token_file.empty()) return "";
  std::string token, ca;
  struct stat token_st, ca_st;
  if (!CheckToken(token_file, &token, &token_st, error, c.token_file.empty() ? "--remote-token-dir" : "--remote-token-file"))
    return "";
  if (!c.ca_file.empty() && !CheckCa(c.ca_file, &ca, &ca_st, error)) return "";
  const std::string pod_dir = c.host_dir + "/" + pod_uid;
  const std::string dir = pod_dir + "/" + std::to_string(index);
  if (!MakeDir(c.host_dir, 0711, error) || !MakeDir(pod_dir, 0755, error) || !MakeDir(dir, 0755, error)) return "";
  if (!WriteCopy(dir, kRemoteTokenName, token, token_st, 0400, owner, error)) return "";
  if (!c.ca_file.empty() && !WriteCopy(dir, kRemoteCaName, ca, ca_st, 0444, 0, error)) return "";
  return dir;
}

std::string TidyContainerCredentials(const RemoteCredentials& c, const std::map<std::string, std::string>& live_pods) {
  std::string errors;
  auto note = [&](const std::string& e) { errors += (errors.empty() ? "" : "; ") + e; };
  std::error_code ec;
  fs::directory_iterator pods(c.host_dir, ec);
  if (ec) return ec == std::errc::no_such_file_or_directory ? "" : c.host_dir + ": " + ec.message();
  for (const auto& pod : pods) {
    const std::string uid = pod.path().filename().string();
    const auto live = live_pods.find(uid);
    if (live == live_pods.end()) {
      fs::remove_all(pod.path(), ec);  // symlinks are removed, never followed
      if (ec) note("cannot remove " + pod.path().string() + ": " + ec.message());
      continue;
    }
    if (!c.has_tokens()) continue;
    std::string why;
    if (TokenFileFor(c, live->second, &why).empty()) {
      // Its namespace's token was revoked: the pod's copies go (its client is refused by the
      // GPU node anyway once the node's --tenants file drops the token).
      fs::remove_all(pod.path(), ec);
      note(why);
      continue;
    }
    for (const auto& container : fs::directory_iterator(pod.path(), ec)) {
      const std::string name = container.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos || name.size() > 6) continue;
      struct stat st;
      if (lstat((container.path() / kRemoteTokenName).c_str(), &st) != 0) continue;
      if (WriteContainerCredentials(c, uid, live->second, std::stoul(name), st.st_uid, &why).empty()) note(why);
    }
  }
  return errors;
}

}  // namespace gslice::k8s
