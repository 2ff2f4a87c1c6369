#include "gslice/suspend_board.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

#include "gslice/clock.h"
#include "gslice/ledger.h"
#include "gslice/owner_lock.h"
#include "gslice/pid_namespace.h"

namespace gslice {

namespace {
constexpr auto kAcq = std::memory_order_acquire;
constexpr auto kRel = std::memory_order_release;
constexpr auto kRlx = std::memory_order_relaxed;
constexpr auto kSeq = std::memory_order_seq_cst;

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

std::string Errno(int e) { return std::strerror(e); }

int Fail(std::string* error, int e, const std::string& what) {
  if (error != nullptr) *error = what;
  errno = e;
  return -1;
}

// Opens the folder `name` of the board (dir_fd) and checks that it belongs to owner. A
// world-writable folder must be sticky (shim/).
int OpenBoardFolder(int dir_fd, const char* name, uid_t owner, std::string* error) {
  int fd = openat(dir_fd, name, kDirFlags);
  if (fd < 0) return Fail(error, errno, std::string("cannot open the board's folder ") + name + ": " + Errno(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != owner ||
      ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)) {
    close(fd);
    return Fail(error, EPERM, std::string("the board's folder ") + name + " is not the board owner's, or others may " +
                                  "replace what is in it: remove the board and let gsliced make it again");
  }
  return fd;
}

// Opens the board directory at path and checks it: a directory (not a link), owned by root
// or the caller, writable by nobody else. *owner: its owner.
int OpenBoardDir(const char* path, uid_t* owner, std::string* error) {
  if (path == nullptr || *path == '\0') return Fail(error, EINVAL, "no suspend board path (GSLICE_SUSPEND_BOARD)");
  int fd = open(path, kDirFlags);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOTDIR) {
      struct stat st;
      if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
        return Fail(error, ELOOP, std::string(path) + " is a symbolic link: refused (the board is never opened through one)");
      }
      return Fail(error, ENOTDIR, std::string(path) + " is not a directory: a suspend board of an older gslice " +
                                      "(version 2 was one file)? Stop what maps it and remove it");
    }
    if (e == ELOOP) return Fail(error, e, std::string(path) + " is a symbolic link: refused (the board is never opened through one)");
    return Fail(error, e, "cannot open the suspend board " + std::string(path) + ": " + Errno(e));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return Fail(error, e, "cannot stat the suspend board " + std::string(path) + ": " + Errno(e));
  }
  if (st.st_uid != 0 && st.st_uid != geteuid()) {
    close(fd);
    return Fail(error, EPERM, "the suspend board " + std::string(path) + " belongs to uid " + std::to_string(st.st_uid) +
                                  ", neither root nor this user: not trusted (remove it; gsliced makes it)");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    close(fd);
    return Fail(error, EPERM, "the suspend board " + std::string(path) + " may be written by others (mode " +
                                  std::to_string(st.st_mode & 07777) + "): not trusted (remove it; gsliced makes it)");
  }
  *owner = st.st_uid;
  return fd;
}

// mkdirat + open + check, for CreateSuspendBoard: the folder exists afterwards with mode.
int MakeFolder(int dir_fd, const char* name, mode_t mode, std::string* error) {
  if (mkdirat(dir_fd, name, mode) != 0 && errno != EEXIST) {
    return Fail(error, errno, std::string("cannot make the board's folder ") + name + ": " + Errno(errno));
  }
  int fd = openat(dir_fd, name, kDirFlags);
  if (fd < 0) return Fail(error, errno, std::string("cannot open the board's folder ") + name + ": " + Errno(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_uid != geteuid()) {
    close(fd);
    return Fail(error, EPERM, std::string("the board's folder ") + name + " belongs to somebody else: remove the board");
  }
  if ((st.st_mode & 07777) != mode && fchmod(fd, mode) != 0) {
    const int e = errno;
    close(fd);
    return Fail(error, e, std::string("cannot set the mode of the board's folder ") + name + ": " + Errno(e));
  }
  return fd;
}

// Opens (creating with O_EXCL when create) a regular file `name` in dir_fd, never through a
// link, and checks that it is one file (no hard links) owned by one of the given owners.
int OpenBoardFile(int dir_fd, const char* name, int flags, bool create, mode_t mode, uid_t owner_a, uid_t owner_b,
                  bool* created, std::string* error) {
  if (created != nullptr) *created = false;
  int fd = -1;
  if (create) {
    const mode_t old = umask(0);
    fd = openat(dir_fd, name, flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    umask(old);
    if (fd >= 0 && created != nullptr) *created = true;
    if (fd < 0 && errno != EEXIST) return Fail(error, errno, std::string("cannot make ") + name + ": " + Errno(errno));
  }
  if (fd < 0) fd = openat(dir_fd, name, flags | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    return Fail(error, e, std::string("cannot open ") + name + ": " + (e == ELOOP ? "a symbolic link, refused" : Errno(e)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || (st.st_uid != owner_a && st.st_uid != owner_b)) {
    close(fd);
    return Fail(error, EPERM, std::string(name) + " is not a plain file of the board's owner or this user: not trusted");
  }
  return fd;
}

template <typename Layout>
bool SizeFile(int fd, std::string* error, const char* what) {
  struct stat st;
  if (fstat(fd, &st) != 0) return Fail(error, errno, std::string("cannot stat ") + what), false;
  if (static_cast<size_t>(st.st_size) < sizeof(Layout) && ftruncate(fd, sizeof(Layout)) != 0) {
    return Fail(error, errno, std::string("cannot size ") + what + ": " + Errno(errno)), false;
  }
  return true;
}

template <typename Header>
bool CheckOrInitHeader(Header* h, uint32_t magic, uint64_t size, bool may_init, const char* what, std::string* error) {
  if (h->initialised.load(kAcq) == 0) {
    if (!may_init) return Fail(error, EAGAIN, std::string(what) + " is not ready yet"), false;
    // Equal values from every initialiser: writing them twice is harmless.
    h->magic = magic;
    h->version = kSuspendBoardVersion;
    h->size = size;
    h->initialised.store(1, kRel);
    return true;
  }
  if (h->magic != magic || h->version != kSuspendBoardVersion || h->size != size) {
    return Fail(error, EPROTO, std::string(what) + " has layout version " + std::to_string(h->version) +
                                   ", this gslice " + std::to_string(kSuspendBoardVersion) +
                                   ": restart what maps the board, or remove it once nothing does"),
           false;
  }
  return true;
}

void* MapFile(int fd, size_t size, bool writable) {
  void* p = mmap(nullptr, size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : p;
}

bool FileSizeAtLeast(int fd, size_t size) {
  struct stat st;
  return fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= size;
}

// The gates file of partition p (dev, ino) in gates_fd: made (or remade, when it paired with
// an earlier file of that name) when manage, else opened as it is. Mapped read-write.
SuspendGatesLayout* OpenGates(int gates_fd, const char* name, uid_t owner, uint64_t dev, uint64_t ino, bool manage,
                              std::string* error) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool created = false;
    int fd = OpenBoardFile(gates_fd, name, O_RDWR, manage, 0644, owner, owner, &created, error);
    if (fd < 0) return nullptr;
    if ((manage && !SizeFile<SuspendGatesLayout>(fd, error, name)) || !FileSizeAtLeast(fd, sizeof(SuspendGatesLayout))) {
      close(fd);
      return nullptr;
    }
    auto* g = static_cast<SuspendGatesLayout*>(MapFile(fd, sizeof(SuspendGatesLayout), true));
    close(fd);
    if (g == nullptr) return Fail(error, errno, std::string("cannot map gates ") + name), nullptr;
    SuspendGatesHeader& h = g->header;
    if (h.initialised.load(kAcq) == 0 && manage) {
      h.partition_dev = dev;
      h.partition_ino = ino;
    }
    if (!CheckOrInitHeader(&h, kSuspendGatesMagic, sizeof(SuspendGatesLayout), manage, name, error)) {
      munmap(g, sizeof(SuspendGatesLayout));
      return nullptr;
    }
    if (h.partition_dev == dev && h.partition_ino == ino) return g;
    munmap(g, sizeof(SuspendGatesLayout));
    if (!manage) return Fail(error, ESTALE, std::string("gates ") + name + " belong to an earlier partition"), nullptr;
    // The partition was made again: processes of the old one keep their mapping of the old
    // gates; new ones get fresh gates.
    unlinkat(gates_fd, name, 0);
  }
  return Fail(error, ESTALE, std::string("cannot make gates ") + name), nullptr;
}

int64_t MtimeNs(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return -2;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

// "uid-N" or "uid-N.X": N.
bool UidOfPartitionName(const char* name, uid_t* uid) {
  if (std::strncmp(name, "uid-", 4) != 0) return false;
  const char* p = name + 4;
  if (*p < '0' || *p > '9') return false;
  uint64_t v = 0;
  for (; *p >= '0' && *p <= '9'; ++p) {
    v = v * 10 + static_cast<uint64_t>(*p - '0');
    if (v > 0xffffffffu) return false;
  }
  if (*p != '\0' && *p != '.') return false;
  *uid = static_cast<uid_t>(v);
  return true;
}

void ResetShimFields(SuspendShimEntry& e) {
  e.resume_request.store(0, kRlx);
  e.attached.store(0, kRlx);
  e.activity.store(0, kRlx);
  e.mem_request_seq.store(0, kRlx);
  e.mem_request_bytes.store(0, kRlx);
  std::memset(e.mem_request_gpu, 0, sizeof(e.mem_request_gpu));
}

// "a file of uid 65534": what a name in the board holds, for a log line.
std::string DescribeObject(const struct stat& st) {
  const char* kind = S_ISLNK(st.st_mode)   ? "a symbolic link"
                     : S_ISDIR(st.st_mode) ? "a directory"
                     : S_ISREG(st.st_mode) ? "a file"
                                           : "a special file";
  return std::string(kind) + " of uid " + std::to_string(st.st_uid);
}

// A uid partition's fallback name (uid-N.X), as opposed to uid-N itself.
bool IsFallbackName(const std::string& name) { return name.find('.') != std::string::npos; }

// The names in dir_fd that start with prefix and are plain files of owner (at most max).
std::vector<std::string> OwnedNamesWithPrefix(int dir_fd, const std::string& prefix, uid_t owner, size_t max) {
  std::vector<std::string> out;
  int fd = openat(dir_fd, ".", kDirFlags);
  DIR* d = fd < 0 ? nullptr : fdopendir(fd);
  if (d == nullptr) {
    if (fd >= 0) close(fd);
    return out;
  }
  while (dirent* de = readdir(d)) {
    struct stat st;
    if (std::strncmp(de->d_name, prefix.c_str(), prefix.size()) != 0 ||
        fstatat(dir_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) || st.st_uid != owner) {
      continue;
    }
    out.emplace_back(de->d_name);
    if (out.size() >= max) break;
  }
  closedir(d);
  return out;
}

// Marks fd's partition as held by this open file for as long as it is open (a shared lock on
// its presence byte), then checks that the file still has its name: a remover unlinks only
// while it holds the byte exclusively, so afterwards the file stays.
bool HoldPresence(int fd) {
  struct flock fl {};
  fl.l_type = F_RDLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = kSuspendPartitionPresenceByte;
  fl.l_len = 1;
  struct stat st;
  return fcntl(fd, F_OFD_SETLK, &fl) == 0 && fstat(fd, &st) == 0 && st.st_nlink == 1;
}

// Opens (makes, when create) the caller's own uid partition `name` in shim_fd: a plain file
// of the caller's with mode 0600 (the mode also keeps out a taken name the service is in the
// middle of removing: it is root's and 0 by then), held (HoldPresence).
int OpenOwnPartition(int shim_fd, const std::string& name, bool create, std::string* error) {
  const uid_t me = geteuid();
  int fd = OpenBoardFile(shim_fd, name.c_str(), O_RDWR, create, 0600, me, me, nullptr, error);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || (st.st_mode & 07777) != 0600) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    close(fd);
    return Fail(error, EPERM, name + " has mode " + mode + ", not 0600: not trusted");
  }
  if (!HoldPresence(fd)) {
    close(fd);
    return Fail(error, ESTALE, name + " was removed while it was opened");
  }
  return fd;
}

// Removes the partition `name` of `owner` from dir_fd if no process holds it: nobody holds its
// presence byte (taken exclusively here first, so no opener can start holding it meanwhile)
// or any entry's lock byte (a claim holds that). True when it was removed.
bool RemoveIfUnused(int dir_fd, const char* name, uid_t owner) {
  int fd = openat(dir_fd, name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  bool removed = false;
  struct stat st, now;
  struct flock presence {};
  presence.l_type = F_WRLCK;
  presence.l_whence = SEEK_SET;
  presence.l_start = kSuspendPartitionPresenceByte;
  presence.l_len = 1;
  struct flock entries {};
  entries.l_type = F_WRLCK;
  entries.l_whence = SEEK_SET;
  entries.l_start = SuspendEntryLockByte(0);
  entries.l_len = kSuspendPartitionEntries;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 && st.st_uid == owner &&
      fcntl(fd, F_OFD_SETLK, &presence) == 0 && fcntl(fd, F_OFD_GETLK, &entries) == 0 && entries.l_type == F_UNLCK &&
      fstatat(dir_fd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev) {
    removed = unlinkat(dir_fd, name, 0) == 0;
  }
  close(fd);  // drops the exclusive lock: an opener that waited finds nlink 0
  return removed;
}

// The caller's fallback partition in shim_fd: one of its uid-N.X that some process holds
// (joined), else a new uid-N.<pid>-<tag>. Those no process holds are removed on the way, so
// a user has one fallback at a time. *name: the one opened.
int OpenFallbackPartition(int shim_fd, std::string* name, std::string* error) {
  const uid_t me = geteuid();
  const std::string prefix = DefaultPartitionName() + ".";
  int fd = -1;
  for (const std::string& candidate : OwnedNamesWithPrefix(shim_fd, prefix, me, 2 * kSuspendPartitionsPerUid)) {
    if (RemoveIfUnused(shim_fd, candidate.c_str(), me)) continue;
    if (fd < 0 && (fd = OpenOwnPartition(shim_fd, candidate, false, nullptr)) >= 0) *name = candidate;
  }
  // A name we make can be removed before we hold it (by a process that falls back at the same
  // moment): then another.
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    *name = prefix + std::to_string(getpid()) + "-" + std::to_string(OwnerClaimTag());
    fd = OpenOwnPartition(shim_fd, *name, true, error);
  }
  return fd;
}

// Makes a directory that is root's (the caller's) and 0700 empty: nobody else can change the
// names in it, and each folder below is made so before it is read. False when it is not empty
// yet (more names than *budget, deeper than depth, a name that would not go).
bool EmptyFrozenDir(int fd, int depth, int* budget) {
  std::vector<std::string> names;
  int list = openat(fd, ".", kDirFlags);
  DIR* d = list < 0 ? nullptr : fdopendir(list);
  if (d == nullptr) {
    if (list >= 0) close(list);
    return false;
  }
  bool complete = true;
  while (dirent* de = readdir(d)) {
    if (std::strcmp(de->d_name, ".") == 0 || std::strcmp(de->d_name, "..") == 0) continue;
    if (static_cast<int>(names.size()) >= *budget) {
      complete = false;
      break;
    }
    names.emplace_back(de->d_name);
  }
  closedir(d);
  *budget -= static_cast<int>(names.size());
  const uid_t me = geteuid();
  for (const std::string& n : names) {
    struct stat st;
    if (fstatat(fd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISDIR(st.st_mode)) {
      complete &= unlinkat(fd, n.c_str(), 0) == 0;
      continue;
    }
    int sub = depth > 0 ? openat(fd, n.c_str(), kDirFlags) : -1;
    const bool emptied = sub >= 0 && fchown(sub, me, me) == 0 && fchmod(sub, 0700) == 0 &&
                         EmptyFrozenDir(sub, depth - 1, budget);
    if (sub >= 0) close(sub);
    complete &= emptied && unlinkat(fd, n.c_str(), AT_REMOVEDIR) == 0;
  }
  return complete;
}

enum class TakenName {
  kRemoved,
  kPending,  // a directory not empty yet: more at the next scan
  kMoved,    // not at the name any more, or the named uid's own now: look again
  kLeft,     // left in place (*why)
};

// shim/NAME (dir_fd, name), named for uid `named`, is somebody else's (*found: what it was).
// Makes it the caller's (root's), so that its maker can no longer replace what is at the name,
// with mode 0, so that no shim trusts it meanwhile (the caller's own shims included); checks
// that it is still at the name; then removes it (a directory emptied first). Something with
// other names (hard links) is left alone: making it root's would take it from whoever owns
// those names. Never opens what it removes for reading (a lease of its maker's would stall
// that): an O_PATH descriptor names it.
TakenName RemoveTaken(int dir_fd, const char* name, uid_t named, struct stat* found, std::string* why) {
  int fd = openat(dir_fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *why = Errno(errno);
    return errno == ENOENT ? TakenName::kMoved : TakenName::kLeft;
  }
  int dir = -1;
  auto done = [&](TakenName r) {
    if (dir >= 0) close(dir);
    close(fd);
    return r;
  };
  auto left = [&](const std::string& reason) {
    *why = reason;
    return done(TakenName::kLeft);
  };
  if (fstat(fd, found) != 0) return left(Errno(errno));
  if (found->st_uid == named) return done(TakenName::kMoved);
  const bool is_dir = S_ISDIR(found->st_mode);
  if (!is_dir && found->st_nlink != 1) return left("it has other names (hard links)");
  if (is_dir && (dir = openat(fd, ".", kDirFlags)) < 0) return left(Errno(errno));
  const uid_t me = geteuid();
  if (fchownat(fd, "", me, me, AT_EMPTY_PATH) != 0) return left("cannot take it: " + Errno(errno));
  if (is_dir && fchmod(dir, 0700) != 0) return left("cannot take it: " + Errno(errno));
  if (S_ISREG(found->st_mode)) {
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    // Only our own shims would trust a file of ours (when the name is ours): for them it must
    // not look like a partition even for the moment before it goes.
    if (fchmodat(AT_FDCWD, self.c_str(), 0, 0) != 0 && named == me) return left("cannot take it: " + Errno(errno));
  }
  // Its maker may have moved it away before it became ours: then what is at the name now is
  // for the next scan to judge.
  struct stat now;
  if (fstatat(dir_fd, name, &now, AT_SYMLINK_NOFOLLOW) != 0 || now.st_ino != found->st_ino ||
      now.st_dev != found->st_dev) {
    return done(TakenName::kMoved);
  }
  if (is_dir) {
    int budget = 4096;
    if (!EmptyFrozenDir(dir, 8, &budget)) return budget > 0 ? left("cannot empty it") : done(TakenName::kPending);
  }
  if (unlinkat(dir_fd, name, is_dir ? AT_REMOVEDIR : 0) != 0) return left(Errno(errno));
  return done(TakenName::kRemoved);
}

}  // namespace

bool ValidPartitionName(const char* name) {
  if (name == nullptr || *name == '\0' || *name == '.') return false;
  size_t n = 0;
  for (const char* p = name; *p != '\0'; ++p, ++n) {
    const char c = *p;
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok || n >= kSuspendPartitionNameMax) return false;
  }
  return true;
}

std::string DefaultPartitionName() { return "uid-" + std::to_string(geteuid()); }

bool CreateSuspendBoard(const char* path, std::string* error) {
  if (path == nullptr || *path == '\0') return Fail(error, EINVAL, "no suspend board path"), false;
  if (mkdir(path, 0755) != 0 && errno != EEXIST) {
    return Fail(error, errno, "cannot make the suspend board " + std::string(path) + ": " + Errno(errno)), false;
  }
  uid_t owner = 0;
  int dir = OpenBoardDir(path, &owner, error);
  if (dir < 0) return false;
  if (owner != geteuid()) {
    close(dir);
    return Fail(error, EPERM, "the suspend board " + std::string(path) + " belongs to uid " + std::to_string(owner) +
                                  ", not to this user: remove it, or run as its owner"),
           false;
  }
  bool ok = true;
  for (auto [name, mode] : {std::pair<const char*, mode_t>{"gates", 0755}, {"shim", 01777}, {"pods", 0700}}) {
    int fd = MakeFolder(dir, name, mode, error);
    if (fd < 0) {
      ok = false;
      break;
    }
    close(fd);
  }
  if (ok) {
    const uid_t me = geteuid();
    int fd = OpenBoardFile(dir, "service", O_RDWR, true, 0644, me, me, nullptr, error);
    if (fd < 0) {
      ok = false;
    } else {
      ok = SizeFile<SuspendServiceHeader>(fd, error, "service");
      auto* h = ok ? static_cast<SuspendServiceHeader*>(MapFile(fd, sizeof(SuspendServiceHeader), true)) : nullptr;
      if (ok && h == nullptr) {
        Fail(error, errno, "cannot map the board's service file");
        ok = false;
      }
      if (h != nullptr) {
        if (h->initialised.load(kAcq) == 0) h->attach.store(kGateOpen, kRlx);
        ok = CheckOrInitHeader(h, kSuspendServiceMagic, sizeof(SuspendServiceHeader), true, "the board's service file",
                               error);
        munmap(h, sizeof(SuspendServiceHeader));
      }
      close(fd);
    }
  }
  close(dir);
  return ok;
}

bool CreatePodPartition(const char* board, const char* name, std::string* error) {
  if (!ValidPartitionName(name) || std::strncmp(name, "uid-", 4) == 0) {
    return Fail(error, EINVAL, std::string("bad partition name '") + (name ? name : "") + "'"), false;
  }
  if (!CreateSuspendBoard(board, error)) return false;
  uid_t owner = 0;
  int dir = OpenBoardDir(board, &owner, error);
  if (dir < 0) return false;
  int pods = OpenBoardFolder(dir, "pods", owner, error);
  int gates = pods < 0 ? -1 : OpenBoardFolder(dir, "gates", owner, error);
  bool ok = gates >= 0;
  int fd = -1;
  if (ok) {
    fd = OpenBoardFile(pods, name, O_RDWR, true, 0666, owner, owner, nullptr, error);
    ok = fd >= 0 && SizeFile<SuspendPartitionLayout>(fd, error, name);
  }
  if (ok && fchmod(fd, 0666) != 0) {
    Fail(error, errno, "cannot set the partition's mode");
    ok = false;
  }
  if (ok) {
    auto* p = static_cast<SuspendPartitionLayout*>(MapFile(fd, sizeof(SuspendPartitionHeader), true));
    if (p == nullptr) {
      Fail(error, errno, "cannot map the partition");
      ok = false;
    } else {
      ok = CheckOrInitHeader(&p->header, kSuspendPartitionMagic, sizeof(SuspendPartitionLayout), true, name, error);
      munmap(p, sizeof(SuspendPartitionHeader));
    }
  }
  if (ok) {
    struct stat st;
    fstat(fd, &st);
    SuspendGatesLayout* g = OpenGates(gates, name, owner, st.st_dev, st.st_ino, true, error);
    ok = g != nullptr;
    if (g != nullptr) munmap(g, sizeof(SuspendGatesLayout));
  }
  for (int f : {fd, gates, pods, dir}) {
    if (f >= 0) close(f);
  }
  return ok;
}

bool ProcessMapsFileWritable(const std::string& proc_root, int pid, uint64_t dev, uint64_t ino) {
  if (pid <= 0) return false;
  const std::string path = proc_root + "/" + std::to_string(pid) + "/maps";
  FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return false;
  char line[4096];
  bool found = false;
  const unsigned want_major = major(static_cast<dev_t>(dev)), want_minor = minor(static_cast<dev_t>(dev));
  while (!found && std::fgets(line, sizeof line, f) != nullptr) {
    // start-end perms offset major:minor inode [path]
    char perms[8] = {};
    unsigned maj = 0, min = 0;
    unsigned long long start = 0, end = 0, offset = 0, inode = 0;
    if (std::sscanf(line, "%llx-%llx %7s %llx %x:%x %llu", &start, &end, perms, &offset, &maj, &min, &inode) != 7) {
      continue;
    }
    found = inode == ino && maj == want_major && min == want_minor && perms[1] == 'w' && perms[3] == 's';
    // Lines longer than the buffer continue on the next read: harmless, they fail to parse.
  }
  std::fclose(f);
  return found;
}

// ---------------------------------------------------------------------------------------
// SuspendShimBoard

SuspendShimBoard::~SuspendShimBoard() { Close(); }

void SuspendShimBoard::Close() {
  if (part_ != nullptr) munmap(part_, sizeof(SuspendPartitionLayout));
  if (gates_ != nullptr) munmap(const_cast<SuspendGatesLayout*>(gates_), sizeof(SuspendGatesLayout));
  if (service_ != nullptr) munmap(const_cast<SuspendServiceHeader*>(service_), sizeof(SuspendServiceHeader));
  for (int fd : {dir_fd_, part_fd_, probe_fd_}) {
    if (fd >= 0) close(fd);  // part_fd_ drops every lock byte this board holds
  }
  part_ = nullptr;
  gates_ = nullptr;
  service_ = nullptr;
  dir_fd_ = part_fd_ = probe_fd_ = -1;
}

bool SuspendShimBoard::Open(const char* path, const char* partition, std::string* error) {
  if (part_ != nullptr) return true;
  const bool chosen = partition != nullptr && *partition != '\0';
  std::string name = chosen ? partition : DefaultPartitionName();
  if (!ValidPartitionName(name.c_str())) return Fail(error, EINVAL, "bad partition name '" + name + "'"), false;
  uid_t owner = 0;
  int dir = OpenBoardDir(path, &owner, error);
  if (dir < 0) return false;
  auto fail = [&](int fd1, int fd2) {
    const int e = errno;
    for (int fd : {fd1, fd2, dir}) {
      if (fd >= 0) close(fd);
    }
    errno = e;
    return false;
  };
  // D/service, read-only.
  int sfd = OpenBoardFile(dir, "service", O_RDONLY, false, 0, owner, owner, nullptr, error);
  if (sfd < 0) return fail(-1, -1);
  auto* service = FileSizeAtLeast(sfd, sizeof(SuspendServiceHeader))
                      ? static_cast<SuspendServiceHeader*>(MapFile(sfd, sizeof(SuspendServiceHeader), false))
                      : nullptr;
  close(sfd);
  if (service == nullptr) return Fail(error, EPROTO, "the board's service file is not ready"), fail(-1, -1);
  if (!CheckOrInitHeader(service, kSuspendServiceMagic, sizeof(SuspendServiceHeader), false, "the board's service file",
                         error)) {
    munmap(service, sizeof(SuspendServiceHeader));
    return fail(-1, -1);
  }
  auto drop_service = [&] { munmap(service, sizeof(SuspendServiceHeader)); };
  int shim = OpenBoardFolder(dir, "shim", owner, error);
  if (shim < 0) return drop_service(), fail(-1, -1);
  notice_.clear();
  int fd = -1;
  if (chosen) {
    // A container's: made by the board's owner (the device plugin) and bind-mounted in, or
    // made now by the caller.
    const uid_t me = geteuid();
    fd = OpenBoardFile(shim, name.c_str(), O_RDWR, true, 0600, me, owner, nullptr, error);
    if (fd >= 0 && !HoldPresence(fd)) {
      close(fd);
      fd = Fail(error, ESTALE, "the partition " + name + " was removed while it was opened");
    }
  } else {
    std::string why;
    fd = OpenOwnPartition(shim, name, true, &why);
    if (fd < 0) {
      // Somebody else took the name (a file, link or directory of theirs) or it is unfit: the
      // user's fallback, which the service serves as well.
      struct stat st;
      const bool theirs = fstatat(shim, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_uid != geteuid();
      const std::string taken = theirs ? "shim/" + name + " is " + DescribeObject(st) + ", not this user's partition"
                                       : "shim/" + name + ": " + why;
      fd = OpenFallbackPartition(shim, &name, error);
      if (fd >= 0) notice_ = taken + ": using shim/" + name + " instead (gsliced removes names other users take)";
    }
  }
  if (fd < 0) return drop_service(), fail(shim, -1);
  if (!SizeFile<SuspendPartitionLayout>(fd, error, name.c_str())) return drop_service(), fail(shim, fd);
  auto* part = static_cast<SuspendPartitionLayout*>(MapFile(fd, sizeof(SuspendPartitionLayout), true));
  if (part == nullptr) return Fail(error, errno, "cannot map the partition " + name), drop_service(), fail(shim, fd);
  if (!CheckOrInitHeader(&part->header, kSuspendPartitionMagic, sizeof(SuspendPartitionLayout), true, name.c_str(),
                         error)) {
    munmap(part, sizeof(SuspendPartitionLayout));
    return drop_service(), fail(shim, fd);
  }
  // The probe: the same file opened again (by name, never through a link, checked by inode).
  struct stat st, pst;
  int probe = openat(shim, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (probe < 0 || fstat(fd, &st) != 0 || fstat(probe, &pst) != 0 || st.st_ino != pst.st_ino || st.st_dev != pst.st_dev) {
    if (probe >= 0) close(probe);
    munmap(part, sizeof(SuspendPartitionLayout));
    return Fail(error, ESTALE, "the partition " + name + " changed while it was opened"), drop_service(), fail(shim, fd);
  }
  close(shim);
  dir_fd_ = dir;
  part_fd_ = fd;
  probe_fd_ = probe;
  part_ = part;
  service_ = service;
  part_dev_ = st.st_dev;
  part_ino_ = st.st_ino;
  board_owner_ = owner;
  std::snprintf(name_, sizeof name_, "%s", name.c_str());
  Attach();
  return true;
}

bool SuspendShimBoard::Attach() {
  if (gates_ != nullptr) return true;
  if (dir_fd_ < 0) return false;
  int gates = openat(dir_fd_, "gates", kDirFlags);
  if (gates < 0) return false;
  struct stat st;
  bool ok = fstat(gates, &st) == 0 && st.st_uid == board_owner_ && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
  int fd = ok ? OpenBoardFile(gates, name_, O_RDONLY, false, 0, board_owner_, board_owner_, nullptr, nullptr) : -1;
  close(gates);
  if (fd < 0) return false;
  const SuspendGatesLayout* g = nullptr;
  if (FileSizeAtLeast(fd, sizeof(SuspendGatesLayout))) {
    g = static_cast<const SuspendGatesLayout*>(MapFile(fd, sizeof(SuspendGatesLayout), false));
  }
  close(fd);
  if (g == nullptr) return false;
  const SuspendGatesHeader& h = g->header;
  if (h.initialised.load(kAcq) == 0 || h.magic != kSuspendGatesMagic || h.version != kSuspendBoardVersion ||
      h.partition_dev != part_dev_ || h.partition_ino != part_ino_) {
    munmap(const_cast<SuspendGatesLayout*>(g), sizeof(SuspendGatesLayout));
    return false;
  }
  gates_ = g;
  return true;
}

const std::atomic<uint32_t>* SuspendShimBoard::GateWord(const SuspendShimEntry& e) const {
  if (gates_ != nullptr) return &gates_->entries[IndexOf(e)].gate;
  return &service_->attach;
}

const SuspendGateEntry* SuspendShimBoard::GateOf(const SuspendShimEntry& e) const {
  return gates_ != nullptr ? &gates_->entries[IndexOf(e)] : nullptr;
}

bool SuspendShimBoard::OwnerAlive(const SuspendShimEntry& e) const {
  if (part_ == nullptr) return false;
  const uint64_t word = e.owner.load(kSeq);
  if (word == 0) return false;
  const uint32_t pid = BoardOwnerPid(word);
  const uint64_t ns = e.pid_ns.load(kSeq);
  const uint64_t self_ns = SelfPidNamespace();
  const int64_t byte = SuspendEntryLockByte(IndexOf(e));
  if (BoardOwnerLive(word)) return gslice::OwnerAlive(probe_fd_, byte, pid, ns, e.start_time.load(kSeq), self_ns);
  // Being claimed: the claimer takes the byte right after its CAS; until then, the claim's age
  // decides.
  if (ns != 0 && ns == self_ns && !ProcessAlive(pid, 0)) return false;
  if (OwnerByteLocked(probe_fd_, byte)) return true;
  return ClaimWithinGrace(const_cast<std::atomic<int64_t>&>(e.claimed_ns));
}

SuspendShimEntry* SuspendShimBoard::Claim(uint32_t pid, uint64_t start_time) {
  if (part_ == nullptr || pid == 0) return nullptr;
  const uint64_t self_ns = SelfPidNamespace();
  SuspendShimEntry* mine = Find(self_ns, pid);
  if (mine != nullptr && mine->start_time.load(kAcq) == start_time) return mine;
  // Start the probe at a pid-dependent place so concurrent claimers rarely collide.
  const uint32_t start = (pid * 2654435761u) % kSuspendPartitionEntries;
  for (int i = 0; i < kSuspendPartitionEntries; ++i) {
    // An entry left by an earlier process with the same pid is taken over first.
    SuspendShimEntry& e = mine != nullptr && i == 0 ? *mine : part_->entries[(start + i) % kSuspendPartitionEntries];
    uint64_t owner = e.owner.load(kSeq);
    if (owner != 0 && &e != mine && OwnerAlive(e)) continue;
    // Claim (CAS), stamp, take the lock byte, reset, publish: a published entry's byte is
    // always held. Only the CAS winner touches the byte.
    const uint32_t tag = OwnerClaimTag();
    const uint64_t claim = BoardOwnerWord(pid, tag) | kBoardOwnerClaiming;
    if (!e.owner.compare_exchange_strong(owner, claim, kSeq)) continue;
    e.claimed_ns.store(MonotonicNs(), kSeq);
    e.start_time.store(0, kSeq);
    e.pid_ns.store(self_ns, kSeq);
    const int64_t byte = SuspendEntryLockByte(IndexOf(e));
    if (!LockOwnerByte(part_fd_, byte)) {
      // Another open file still holds the byte: a forked child of a dead earlier owner. The
      // byte frees when that child exits or execs.
      uint64_t expected = claim;
      e.owner.compare_exchange_strong(expected, 0, kSeq);
      continue;
    }
    ResetShimFields(e);
    e.start_time.store(start_time, kSeq);
    uint64_t expected = claim;
    if (!e.owner.compare_exchange_strong(expected, BoardOwnerWord(pid, tag), kSeq)) {
      // Reaped as a stale claim (we stalled past kClaimGraceNs before locking).
      UnlockOwnerByte(part_fd_, byte);
      continue;
    }
    const uint32_t hw = static_cast<uint32_t>(IndexOf(e)) + 1;
    uint32_t seen = part_->header.high_water.load(kAcq);
    while (seen < hw && !part_->header.high_water.compare_exchange_weak(seen, hw, std::memory_order_acq_rel)) {
    }
    return &e;
  }
  return nullptr;
}

SuspendShimEntry* SuspendShimBoard::Find(uint64_t pid_ns, uint32_t pid) const {
  if (part_ == nullptr || pid == 0) return nullptr;
  for (auto& e : part_->entries) {
    const uint64_t word = e.owner.load(kAcq);
    if (BoardOwnerLive(word) && BoardOwnerPid(word) == pid && e.pid_ns.load(kAcq) == pid_ns) return &e;
  }
  return nullptr;
}

int SuspendShimBoard::Reap() {
  if (part_ == nullptr) return 0;
  int n = 0;
  for (auto& e : part_->entries) {
    uint64_t owner = e.owner.load(kSeq);
    if (owner == 0 || OwnerAlive(e)) continue;
    // The word read before judging: the CAS fails if the entry changed owner since.
    if (e.owner.compare_exchange_strong(owner, 0, kSeq)) ++n;
  }
  return n;
}

bool ServiceHeaderAlive(const SuspendServiceHeader* h) {
  if (h == nullptr || h->service_pid.load(kAcq) == 0) return false;
  const int64_t beat = h->heartbeat_ns.load(kAcq);
  const int64_t now = MonotonicNs();
  return beat != 0 && now - beat < kSuspendServiceStaleNs && beat - now < kSuspendServiceStaleNs;
}

bool SuspendShimBoard::ServiceAlive() const { return ServiceHeaderAlive(service_); }

void SuspendShimBoard::RingDoorbell() {
  if (part_ == nullptr) return;
  part_->header.doorbell.fetch_add(1, std::memory_order_acq_rel);
  FutexWakeAll(&service_->wake);
}

// ---------------------------------------------------------------------------------------
// SuspendServiceBoard

SuspendServiceBoard::~SuspendServiceBoard() { Close(); }

void SuspendServiceBoard::Close() {
  for (Partition& p : parts_) {
    if (p.gates != nullptr) munmap(p.gates, sizeof(SuspendGatesLayout));
    if (p.fd >= 0) close(p.fd);
  }
  parts_.clear();
  if (service_ != nullptr) munmap(service_, sizeof(SuspendServiceHeader));
  service_ = nullptr;
  for (int fd : {dir_fd_, shim_fd_, pods_fd_, gates_fd_}) {
    if (fd >= 0) close(fd);
  }
  dir_fd_ = shim_fd_ = pods_fd_ = gates_fd_ = -1;
}

bool SuspendServiceBoard::Open(const char* path, bool manage, std::string* error) {
  if (service_ != nullptr) return true;
  if (manage && !CreateSuspendBoard(path, error)) return false;
  uid_t owner = 0;
  dir_fd_ = OpenBoardDir(path, &owner, error);
  if (dir_fd_ < 0) return false;
  owner_ = owner;
  manage_ = manage;
  auto fail = [&] {
    const int e = errno;
    Close();
    errno = e;
    return false;
  };
  if (manage && owner != geteuid()) {
    return Fail(error, EPERM, "the suspend board belongs to uid " + std::to_string(owner) + ", not to this user"), fail();
  }
  int sfd = OpenBoardFile(dir_fd_, "service", O_RDWR, false, 0, owner, owner, nullptr, error);
  if (sfd < 0) return fail();
  service_ = FileSizeAtLeast(sfd, sizeof(SuspendServiceHeader))
                 ? static_cast<SuspendServiceHeader*>(MapFile(sfd, sizeof(SuspendServiceHeader), true))
                 : nullptr;
  close(sfd);
  if (service_ == nullptr) return Fail(error, EPROTO, "the board's service file is not ready"), fail();
  if (!CheckOrInitHeader(service_, kSuspendServiceMagic, sizeof(SuspendServiceHeader), false, "the board's service file",
                         error)) {
    return fail();
  }
  if ((shim_fd_ = OpenBoardFolder(dir_fd_, "shim", owner, error)) < 0) return fail();
  if ((gates_fd_ = OpenBoardFolder(dir_fd_, "gates", owner, error)) < 0) return fail();
  pods_fd_ = OpenBoardFolder(dir_fd_, "pods", owner, error);  // root-only: `gslice move` as a user lacks it
  if (pods_fd_ < 0 && manage) return fail();
  Refresh(true);
  if (manage) {
    // What processes that ended while no service ran left behind.
    Prune();
    RemoveOrphanGates();
  }
  return true;
}

SuspendGatesLayout* SuspendServiceBoard::MapGates(const Partition& p) {
  std::string error;
  SuspendGatesLayout* g = OpenGates(gates_fd_, p.name.c_str(), owner_, p.dev, p.ino, manage_, &error);
  if (g == nullptr && manage_) {
    std::fprintf(stderr, "gslice suspend: partition %s: %s\n", p.name.c_str(), error.c_str());
  }
  return g;
}

bool SuspendServiceBoard::AddPartition(int dir_fd, const char* name, bool pod) {
  struct stat st;
  if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) return false;
  for (const Partition& p : parts_) {
    if (p.ino == st.st_ino && p.dev == st.st_dev) return false;  // known
  }
  if (!ValidPartitionName(name)) return false;
  uid_t uid = 0;
  if (pod) {
    // Only the board's owner makes files in pods/; uid- names belong to shim/.
    if (UidOfPartitionName(name, &uid) || st.st_uid != owner_) return false;
  } else {
    // uid-N[.X] owned by N: anything else in the sticky folder is somebody's litter.
    if (!UidOfPartitionName(name, &uid) || uid != st.st_uid) return false;
    int of_uid = 0;
    for (const Partition& p : parts_) of_uid += !p.pod && p.uid == uid;
    if (of_uid >= kSuspendPartitionsPerUid) {
      if (manage_ && logged_.insert({st.st_dev, st.st_ino}).second) {
        std::fprintf(stderr,
                     "gslice suspend: uid %u has %d partitions already: shim/%s is not served, so its processes are "
                     "not suspended when idle\n",
                     static_cast<unsigned>(uid), of_uid, name);
      }
      return false;
    }
  }
  int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat fst;
  if (fstat(fd, &fst) != 0 || fst.st_ino != st.st_ino || fst.st_dev != st.st_dev || !S_ISREG(fst.st_mode)) {
    close(fd);
    return false;
  }
  Partition p;
  p.name = name;
  p.pod = pod;
  p.fd = fd;
  p.dev = fst.st_dev;
  p.ino = fst.st_ino;
  p.uid = fst.st_uid;
  p.gates = MapGates(p);
  parts_.push_back(std::move(p));
  return true;
}

void SuspendServiceBoard::Scan(int dir_fd, bool pod) {
  if (dir_fd < 0) return;
  int dup_fd = openat(dir_fd, ".", kDirFlags);
  if (dup_fd < 0) return;
  DIR* d = fdopendir(dup_fd);
  if (d == nullptr) {
    close(dup_fd);
    return;
  }
  std::vector<std::string> names;
  while (dirent* de = readdir(d)) {
    if (de->d_name[0] != '.') names.emplace_back(de->d_name);
  }
  closedir(d);
  for (const std::string& name : names) {
    uid_t named = 0;
    struct stat st;
    if (!pod && manage_ && UidOfPartitionName(name.c_str(), &named) &&
        fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_uid != named) {
      RemoveTakenName(name.c_str(), named);
      continue;
    }
    AddPartition(dir_fd, name.c_str(), pod);
  }
}

void SuspendServiceBoard::RemoveTakenName(const char* name, uid_t named) {
  struct stat found {};
  std::string why;
  const unsigned n = static_cast<unsigned>(named);
  switch (RemoveTaken(shim_fd_, name, named, &found, &why)) {
    case TakenName::kRemoved:
      std::fprintf(stderr,
                   "gslice suspend: shim/%s was %s, not uid %u's (another user took the name): removed, so uid %u's "
                   "processes get their own partition again\n",
                   name, DescribeObject(found).c_str(), n, n);
      break;
    case TakenName::kPending:
    case TakenName::kMoved:
      rescan_ = true;
      break;
    case TakenName::kLeft:
      if (logged_.insert({found.st_dev, found.st_ino}).second) {
        std::fprintf(stderr,
                     "gslice suspend: shim/%s is %s, not uid %u's (another user took the name): cannot remove it (%s); "
                     "uid %u's processes use a partition shim/uid-%u.* instead\n",
                     name, DescribeObject(found).c_str(), n, why.c_str(), n, n);
      }
      break;
  }
}

bool SuspendServiceBoard::Prune() {
  if (service_ == nullptr || !manage_) return false;
  bool dropped = false;
  for (size_t i = 0; i < parts_.size();) {
    const Partition& p = parts_[i];
    const int dir_fd = p.pod ? pods_fd_ : shim_fd_;
    struct stat st;
    bool gone = dir_fd < 0 || fstatat(dir_fd, p.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_ino != p.ino ||
                st.st_dev != p.dev;
    // A fallback goes once no process holds it (its presence byte is free: all have ended).
    if (!gone && !p.pod && IsFallbackName(p.name) && !OwnerByteLocked(p.fd, kSuspendPartitionPresenceByte)) {
      gone = RemoveIfUnused(dir_fd, p.name.c_str(), p.uid);
    }
    if (!gone) {
      ++i;
      continue;
    }
    DropPartition(i);
    dropped = true;
  }
  if (logged_.size() > 10'000) logged_.clear();
  return dropped;
}

void SuspendServiceBoard::DropPartition(size_t i) {
  Partition& p = parts_[i];
  if (p.gates != nullptr) munmap(p.gates, sizeof(SuspendGatesLayout));
  // Its gates file, unless that was made again for a newer partition of the same name.
  int fd = openat(gates_fd_, p.name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    SuspendGatesHeader h;
    if (pread(fd, static_cast<void*>(&h), sizeof h, 0) == static_cast<ssize_t>(sizeof h) && h.partition_dev == p.dev &&
        h.partition_ino == p.ino) {
      unlinkat(gates_fd_, p.name.c_str(), 0);
    }
    close(fd);
  }
  if (p.fd >= 0) close(p.fd);
  parts_.erase(parts_.begin() + static_cast<std::ptrdiff_t>(i));
}

void SuspendServiceBoard::RemoveOrphanGates() {
  int dup_fd = openat(gates_fd_, ".", kDirFlags);
  DIR* d = dup_fd < 0 ? nullptr : fdopendir(dup_fd);
  if (d == nullptr) {
    if (dup_fd >= 0) close(dup_fd);
    return;
  }
  std::vector<std::string> orphans;
  while (dirent* de = readdir(d)) {
    uid_t uid = 0;
    struct stat st;
    // Gates of a uid partition that is gone. (A container's are the device plugin's.)
    if (UidOfPartitionName(de->d_name, &uid) && fstatat(shim_fd_, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 &&
        errno == ENOENT) {
      orphans.emplace_back(de->d_name);
    }
  }
  closedir(d);
  for (const std::string& name : orphans) unlinkat(gates_fd_, name.c_str(), 0);
}

void SuspendServiceBoard::ReadPartition(Partition& p) {
  SuspendPartitionHeader h;
  const ssize_t n = pread(p.fd, &h, sizeof h, 0);
  if (n != static_cast<ssize_t>(sizeof h) || h.magic != kSuspendPartitionMagic || h.version != kSuspendBoardVersion) {
    p.count = 0;
    return;
  }
  p.doorbell = h.doorbell.load(kRlx);
  // high_water is the owner's word: never read past the layout whatever it says.
  const uint32_t hw = std::min<uint32_t>(h.high_water.load(kRlx), kSuspendPartitionEntries);
  if (!p.entries) p.entries = std::make_unique<SuspendShimEntry[]>(kSuspendPartitionEntries);
  p.count = 0;
  if (hw == 0) return;
  const size_t want = hw * sizeof(SuspendShimEntry);
  const ssize_t got = pread(p.fd, static_cast<void*>(p.entries.get()), want, sizeof(SuspendPartitionHeader));
  if (got == static_cast<ssize_t>(want)) p.count = static_cast<int>(hw);  // else truncated under us: nothing to serve
}

void SuspendServiceBoard::Refresh(bool force_scan) {
  if (service_ == nullptr) return;
  const int64_t now = MonotonicNs();
  if (force_scan || now - last_scan_ns_ >= 100'000'000) {
    const int64_t shim_m = MtimeNs(shim_fd_), pods_m = pods_fd_ >= 0 ? MtimeNs(pods_fd_) : -1;
    if (force_scan || rescan_ || shim_m != shim_mtime_ns_ || pods_m != pods_mtime_ns_) {
      last_scan_ns_ = now;
      shim_mtime_ns_ = shim_m;
      pods_mtime_ns_ = pods_m;
      rescan_ = false;
      Scan(shim_fd_, false);
      Scan(pods_fd_, true);
    }
  }
  for (Partition& p : parts_) {
    if (p.gates == nullptr) p.gates = MapGates(p);
    ReadPartition(p);
  }
}

SuspendGateEntry* SuspendServiceBoard::Gate(const Ref& r) const {
  if (r.part < 0 || r.part >= static_cast<int>(parts_.size()) || parts_[r.part].gates == nullptr) return nullptr;
  return &parts_[r.part].gates->entries[r.index];
}

bool SuspendServiceBoard::Alive(const Ref& r) const {
  if (r.part < 0 || r.part >= static_cast<int>(parts_.size())) return false;
  const Partition& p = parts_[r.part];
  if (r.index < 0 || r.index >= p.count) return false;
  const SuspendShimEntry& e = p.entries[r.index];
  const uint64_t word = e.owner.load(kRlx);
  if (!BoardOwnerLive(word) || word != r.owner) return false;
  return OwnerAlive(p.fd, SuspendEntryLockByte(r.index), BoardOwnerPid(word), e.pid_ns.load(kRlx),
                    e.start_time.load(kRlx), SelfPidNamespace());
}

std::vector<SuspendServiceBoard::Ref> SuspendServiceBoard::LiveEntries() const {
  std::vector<Ref> out;
  for (int pi = 0; pi < static_cast<int>(parts_.size()); ++pi) {
    const Partition& p = parts_[pi];
    for (int i = 0; i < p.count; ++i) {
      const uint64_t word = p.entries[i].owner.load(kRlx);
      if (!BoardOwnerLive(word)) continue;
      Ref r{pi, i, word};
      if (Alive(r)) out.push_back(r);
    }
  }
  return out;
}

bool SuspendServiceBoard::Reread(const Ref& r, SuspendShimEntry* out) const {
  if (r.part < 0 || r.part >= static_cast<int>(parts_.size())) return false;
  const off_t at = static_cast<off_t>(sizeof(SuspendPartitionHeader) + r.index * sizeof(SuspendShimEntry));
  return pread(parts_[r.part].fd, static_cast<void*>(out), sizeof *out, at) == static_cast<ssize_t>(sizeof *out) &&
         out->owner.load(kRlx) == r.owner;
}

uint64_t SuspendServiceBoard::Doorbells() const {
  uint64_t sum = 0;
  for (const Partition& p : parts_) {
    uint32_t bell = 0;
    if (pread(p.fd, &bell, sizeof bell, offsetof(SuspendPartitionHeader, doorbell)) == sizeof bell) sum += bell;
  }
  return sum;
}

void SuspendServiceBoard::Own(const Ref& r) {
  SuspendGateEntry* g = Gate(r);
  if (g == nullptr || g->owner.load(kAcq) == r.owner) return;
  // A new owner: the fields spoke to the previous one. Reset them, then name the owner (a
  // shim trusts them only once they name it).
  g->owner.store(0, kRel);
  g->gate.store(kGateOpen, kRel);
  g->mem_reply.store(0, kRel);
  g->mem_reply_seq.store(0, kRel);
  g->move_reply.store(kMoveReplyRefused, kRel);
  g->move_reply_seq.store(g->move_seq.load(kAcq), kRel);
  FutexWakeAll(&g->gate);
  FutexWakeAll(&g->move_reply);
  g->owner.store(r.owner, kRel);
}

void SuspendServiceBoard::SetGate(const Ref& r, bool closed) {
  SuspendGateEntry* g = Gate(r);
  if (g == nullptr) return;
  Own(r);
  g->gate.store(closed ? kGateClosed : kGateOpen, kRel);
  if (!closed) FutexWakeAll(&g->gate);
  // A process that has not found its gates yet reads the attach word: close it so that its
  // next call looks.
  if (closed && Entry(r).attached.load(kRlx) == 0) service_->attach.store(kGateClosed, kRel);
}

void SuspendServiceBoard::UpdateAttach() {
  if (service_ == nullptr) return;
  bool waiting = false;
  for (const Ref& r : LiveEntries()) {
    if (parts_[r.part].gates != nullptr && Entry(r).attached.load(kRlx) == 0) waiting = true;
  }
  service_->attach.store(waiting ? kGateClosed : kGateOpen, kRel);
}

void SuspendServiceBoard::SetService() {
  if (service_ == nullptr) return;
  service_->service_pid_ns.store(SelfPidNamespace(), kSeq);
  service_->heartbeat_ns.store(MonotonicNs(), kSeq);
  service_->service_pid.store(static_cast<uint64_t>(getpid()), kSeq);
}

void SuspendServiceBoard::Heartbeat() {
  if (service_ != nullptr) service_->heartbeat_ns.store(MonotonicNs(), kRel);
}

void SuspendServiceBoard::ClearService() {
  if (service_ == nullptr) return;
  uint64_t me = static_cast<uint64_t>(getpid());
  service_->service_pid.compare_exchange_strong(me, 0, kSeq);
  service_->attach.store(kGateOpen, kRel);
}

void SuspendServiceBoard::WakeService() {
  if (service_ == nullptr) return;
  service_->wake.fetch_add(1, std::memory_order_acq_rel);
  FutexWakeAll(&service_->wake);
}

void SuspendServiceBoard::WaitForWork(uint32_t seen_wake, int timeout_ms) {
  if (service_ != nullptr) FutexWait(&service_->wake, seen_wake, timeout_ms);
}

// ---------------------------------------------------------------------------------------

void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms) {
  timespec ts{};
  timespec* tp = nullptr;
  if (timeout_ms >= 0) {
    ts.tv_sec = timeout_ms / 1000;
    ts.tv_nsec = static_cast<long>(timeout_ms % 1000) * 1'000'000;
    tp = &ts;
  }
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAIT, expected, tp, nullptr, 0);
}

void FutexWakeAll(const std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace gslice
