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
  // The partition: ours (made now, or made earlier by us or by the board's owner for us).
  const uid_t me = geteuid();
  int fd = OpenBoardFile(shim, name.c_str(), O_RDWR, true, 0600, me, owner, nullptr, error);
  if (fd < 0 && !chosen) {
    // Somebody else holds the name (a file of theirs, a link): take a private one.
    for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
      name = DefaultPartitionName() + "." + std::to_string(getpid()) + "-" + std::to_string(OwnerClaimTag());
      bool created = false;
      fd = OpenBoardFile(shim, name.c_str(), O_RDWR, true, 0600, me, me, &created, error);
      if (fd >= 0 && !created) {
        close(fd);
        fd = -1;
      }
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
    if (of_uid >= kSuspendPartitionsPerUid) return false;
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
  while (dirent* de = readdir(d)) {
    if (de->d_name[0] == '.') continue;
    AddPartition(dir_fd, de->d_name, pod);
  }
  closedir(d);
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
    if (force_scan || shim_m != shim_mtime_ns_ || pods_m != pods_mtime_ns_) {
      last_scan_ns_ = now;
      shim_mtime_ns_ = shim_m;
      pods_mtime_ns_ = pods_m;
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
