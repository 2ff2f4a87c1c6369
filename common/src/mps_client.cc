#include "gslice/mps_client.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gslice {

std::vector<std::pair<std::string, std::string>> MpsClientEnvironment(const MpsClientSetting& setting) {
  std::vector<std::pair<std::string, std::string>> env = {
      {"CUDA_MPS_PIPE_DIRECTORY", setting.pipe_directory},
      {"CUDA_MPS_LOG_DIRECTORY", setting.log_directory},
      {"CUDA_MPS_CLIENT_PRIORITY", setting.opportunistic ? "1" : "0"},
  };
  if (setting.compute_cap > 0) {
    // 30% stays 30 however the fraction was written (0.3 * 100 = 30.000000000000004).
    int percent = static_cast<int>(std::ceil(setting.compute_cap * 100 - 1e-6));
    percent = percent < 1 ? 1 : percent > 100 ? 100 : percent;
    env.emplace_back("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(percent));
  }
  return env;
}

std::string MpsTenantPath(const std::string& mps_directory, const std::string& uuid) {
  return mps_directory + "/" + uuid + "/tenant";
}

bool MpsTakes(const MpsTenant& tenant, int64_t uid, SliceClass cls) {
  if (!tenant.serving || tenant.uid < 0 || tenant.uid != uid) return false;
  return !tenant.one_class || tenant.slice_class == cls;
}

std::string_view MpsClassName(std::optional<SliceClass> cls) {
  return cls ? ToString(*cls) : "any";
}

bool WriteMpsTenant(const std::string& mps_directory, const std::string& uuid, const MpsTenant& tenant,
                    std::string* error) {
  const std::string path = MpsTenantPath(mps_directory, uuid);
  if (!tenant.serving) {
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      *error = "cannot remove " + path + ": " + std::strerror(errno);
      return false;
    }
    return true;
  }
  const std::string who = tenant.uid >= 0 ? "uid " + std::to_string(tenant.uid) : "none";
  std::string_view cls = "any";
  if (tenant.one_class) cls = tenant.slice_class ? MpsClassName(tenant.slice_class) : "pending";
  const std::string text = who + " class " + std::string(cls) + "\n";
  const std::string temp = path + ".new";
  unlink(temp.c_str());
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = "cannot write " + temp + ": " + std::strerror(errno);
    return false;
  }
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const bool fixed = fchmod(fd, 0644) == 0;  // whatever the umask: the plugins read it
  close(fd);
  if (!written || !fixed || rename(temp.c_str(), path.c_str()) != 0) {
    *error = "cannot write " + path + ": " + std::strerror(errno);
    unlink(temp.c_str());
    return false;
  }
  return true;
}

MpsTenant ReadMpsTenant(const std::string& mps_directory, const std::string& uuid) {
  const std::string path = MpsTenantPath(mps_directory, uuid);
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat st {};
  char buf[64] = {};
  const bool trusted = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0 && (st.st_mode & 022) == 0;
  const ssize_t n = trusted ? read(fd, buf, sizeof buf - 1) : -1;
  close(fd);
  if (n <= 0) return {};
  std::string text(buf, static_cast<size_t>(n));
  if (text.back() != '\n') return {};
  text.pop_back();
  // "<who>[ class <class>]"; <who> is "none" or "uid N".
  std::string who = text, cls = "any";
  if (const size_t at = text.find(" class "); at != std::string::npos) {
    who = text.substr(0, at);
    cls = text.substr(at + 7);
  }
  MpsTenant tenant{.serving = true};
  if (who != "none") {
    if (who.rfind("uid ", 0) != 0 || who.size() == 4 || who.size() > 14 ||
        who.find_first_not_of("0123456789", 4) != std::string::npos) {
      return {};
    }
    const long long uid = std::strtoll(who.c_str() + 4, nullptr, 10);
    if (uid > 0xfffffffell) return {};
    tenant.uid = uid;
  }
  if (cls == "guaranteed" || cls == "opportunistic") {
    if (tenant.uid < 0) return {};  // a class is chosen with the uid that takes the GPU
    tenant.one_class = true;
    tenant.slice_class = cls == "guaranteed" ? SliceClass::kGuaranteed : SliceClass::kOpportunistic;
  } else if (cls == "pending") {
    tenant.one_class = true;
  } else if (cls != "any") {
    return {};
  }
  return tenant;
}

}  // namespace gslice
