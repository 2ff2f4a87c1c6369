#include "gslice/atomic_file.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "gslice/clock.h"

namespace gslice {
namespace {

// Attempts at a fresh random name before giving up: a clash means someone else made that name
// (64 random bits), so a few attempts are plenty.
constexpr int kNameAttempts = 16;

// A random name in the folder: ".gslice-<16 hex digits>", hidden, and short whatever the
// target's name (so it stays within NAME_MAX).
std::string RandomName() {
  uint64_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof r)) {
    static uint64_t counter = 0;
    r = (static_cast<uint64_t>(MonotonicNs()) << 20) ^ (static_cast<uint64_t>(getpid()) << 40) ^
        (++counter * 0x9e3779b97f4a7c15ull);
  }
  char name[32];
  snprintf(name, sizeof name, ".gslice-%016llx", static_cast<unsigned long long>(r));
  return name;
}

std::string Why(int err) { return std::strerror(err); }

}  // namespace

AtomicFile::~AtomicFile() { Discard(); }

void AtomicFile::Discard() {
  if (!temp_.empty() && dir_fd_ >= 0) unlinkat(dir_fd_, temp_.c_str(), 0);
  temp_.clear();
  if (fd_ >= 0) close(fd_);
  if (dir_fd_ >= 0) close(dir_fd_);
  fd_ = dir_fd_ = -1;
}

bool AtomicFile::Open(const std::string& path, mode_t mode, std::string* error) {
  Discard();
  path_ = path;
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  base_ = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base_.empty() || base_ == "." || base_ == "..") {
    *error = "cannot write " + path + ": it names a folder; name a file";
    return false;
  }
  dir_fd_ = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0) {
    *error = "cannot write " + path + ": " + dir + ": " + Why(errno);
    return false;
  }
  struct stat st {};
  if (fstat(dir_fd_, &st) != 0) {
    *error = "cannot write " + path + ": " + dir + ": " + Why(errno);
    Discard();
    return false;
  }
  if ((st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0) {
    *error = "cannot write " + path + ": its folder " + dir +
             " is writable by every user and not sticky, so anyone could replace the file; "
             "write it in another folder (or make this one sticky: chmod +t " + dir + ")";
    Discard();
    return false;
  }
  fd_ = openat(dir_fd_, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, mode);
  if (fd_ >= 0) return true;
  if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
    *error = "cannot write " + path + ": " + Why(errno);
    Discard();
    return false;
  }
  // No unnamed files on this file system: a new file of a random name, never an existing one.
  for (int attempt = 0; attempt < kNameAttempts; ++attempt) {
    const std::string name = RandomName();
    fd_ = openat(dir_fd_, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd_ >= 0) {
      temp_ = name;
      return true;
    }
    if (errno != EEXIST) break;
  }
  *error = "cannot write " + path + ": " + Why(errno);
  Discard();
  return false;
}

bool AtomicFile::Write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool AtomicFile::Commit(std::string* error) {
  auto fail = [&](const std::string& why) {
    *error = "cannot write " + path_ + ": " + why;
    Discard();
    return false;
  };
  if (fd_ < 0) return fail("the file was not opened");
  if (fsync(fd_) != 0) return fail(Why(errno));
  if (temp_.empty()) {
    // An unnamed file gets a fresh random name; linkat fails on an existing one.
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd_);
    int err = EEXIST;
    for (int attempt = 0; attempt < kNameAttempts && err == EEXIST; ++attempt) {
      const std::string name = RandomName();
      // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc/self/fd works for anyone.
      if (linkat(fd_, "", dir_fd_, name.c_str(), AT_EMPTY_PATH) == 0 ||
          (errno != EEXIST && linkat(AT_FDCWD, proc, dir_fd_, name.c_str(), AT_SYMLINK_FOLLOW) == 0)) {
        temp_ = name;
        err = 0;
      } else {
        err = errno;
      }
    }
    if (err != 0) return fail("cannot name the new file in its folder: " + Why(err));
  }
  if (renameat(dir_fd_, temp_.c_str(), dir_fd_, base_.c_str()) != 0) return fail(Why(errno));
  temp_.clear();
  // What is at path now must be this file: a mismatch means the folder's owner replaced it.
  struct stat mine {}, there {};
  if (fstat(fd_, &mine) != 0 || fstatat(dir_fd_, base_.c_str(), &there, AT_SYMLINK_NOFOLLOW) != 0 ||
      mine.st_dev != there.st_dev || mine.st_ino != there.st_ino) {
    return fail("another file took its place as it was written");
  }
  fsync(dir_fd_);  // the rename itself survives a crash; best effort
  Discard();
  return true;
}

bool WriteFileAtomically(const std::string& path, std::string_view text, mode_t mode, std::string* error) {
  AtomicFile f;
  if (!f.Open(path, mode, error)) return false;
  if (!f.Write(text)) {
    *error = "cannot write " + path + ": " + Why(errno);
    return false;
  }
  return f.Commit(error);
}

}  // namespace gslice
