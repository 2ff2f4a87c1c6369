#include "gslice/ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gslice/clock.h"
#include "gslice/owner_lock.h"
#include "gslice/pid_namespace.h"
#include "gslice/shrink_guard.h"

namespace gslice {
namespace {

constexpr auto kSeq = std::memory_order_seq_cst;
constexpr auto kAcq = std::memory_order_acquire;
constexpr auto kRel = std::memory_order_release;
constexpr auto kRlx = std::memory_order_relaxed;
constexpr const char* kLimitsName = "limits";
constexpr const char* kLockName = "lock";

void SleepNs(int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  nanosleep(&ts, nullptr);
}

uint64_t Jitter() { return OwnerJitter(); }

bool NameEquals(const char* stored, const char* name) {
  return strncmp(stored, name, kLedgerNameSize) == 0;
}

void UsageName(int slice, char* out, size_t size) { snprintf(out, size, "slice-%d", slice); }

void InitLimitsHeader(LedgerLimits* l) {
  LedgerLimitsHeader& h = l->header;
  h.magic = kLedgerMagic;
  h.version = kLedgerVersion;
  h.size = sizeof(LedgerLimits);
  h.max_gpus = kLedgerMaxGpus;
  h.max_slices = kLedgerMaxSlices;
  h.max_slots = kLedgerMaxSlots;
  h.compute_per_slice = kLedgerSliceComputeEntries;
  // The rest of the file is zero (ftruncate / anonymous mapping): every entry FREE.
  h.initialised.store(1, kRel);
}

bool LimitsCompatible(const LedgerLimits* l) {
  const LedgerLimitsHeader& h = l->header;
  return h.magic == kLedgerMagic && h.version == kLedgerVersion && h.size == sizeof(LedgerLimits) &&
         h.max_gpus == kLedgerMaxGpus && h.max_slices == kLedgerMaxSlices && h.max_slots == kLedgerMaxSlots &&
         h.compute_per_slice == kLedgerSliceComputeEntries;
}

void WriteUsageHead(LedgerUsageHead* h, int slice, uint64_t generation) {
  h->magic = kLedgerUsageMagic;
  h->version = kLedgerVersion;
  h->size = sizeof(LedgerUsage);
  h->slice = static_cast<uint32_t>(slice);
  h->generation.store(generation, kRlx);
  h->initialised.store(1, kRel);
}

bool UsageCompatible(const LedgerUsageHead* h, int slice, uint64_t generation) {
  return h->magic == kLedgerUsageMagic && h->version == kLedgerVersion && h->size == sizeof(LedgerUsage) &&
         h->initialised.load(kAcq) == 1 && h->slice == static_cast<uint32_t>(slice) &&
         h->generation.load(kAcq) == generation;
}

// A file in a ledger directory is trusted when it is a regular file owned by one of the two
// uids given, that nobody else may write (group/others), of the expected size.
const char* UntrustedFile(const struct stat& st, uid_t a, uid_t b, size_t size) {
  if (!S_ISREG(st.st_mode)) return "is not a regular file";
  if (st.st_uid != a && st.st_uid != b) return "is owned by another user";
  if ((st.st_mode & 022) != 0) return "is writable by group or others";
  if (size != 0 && static_cast<size_t>(st.st_size) != size) return "has another size (another layout version)";
  return nullptr;
}

// A second open file of the same inode (the liveness probe): through /proc/self/fd, so that
// no path can be swapped in between. -1 when /proc is not there (liveness then falls back to
// "assume alive", with the pid check in the owner's namespace).
int OpenProbe(int fd) {
  char p[64];
  snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
  int probe = open(p, O_RDONLY | O_CLOEXEC);
  if (probe < 0) return -1;
  struct stat a, b;
  if (fstat(fd, &a) != 0 || fstat(probe, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
    close(probe);
    return -1;
  }
  return probe;
}

// Reads /proc/<pid>/stat; returns false when missing. state and start_time are set.
bool ReadStat(uint32_t pid, char* state, uint64_t* start_time) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/stat", pid);
  return ReadProcStat(path, state, start_time);
}

// A random claim tag for process slot words (bits 8..31), never 0.
uint32_t ClaimTag() { return OwnerClaimTag(); }

}  // namespace

const char* LedgerErrorString(LedgerError e) {
  switch (e) {
    case LedgerError::kOk: return "ok";
    case LedgerError::kOpenFailed: return "cannot open or map the ledger";
    case LedgerError::kIncompatible: return "the ledger has another layout version";
    case LedgerError::kInitTimeout: return "the ledger was never initialised";
    case LedgerError::kNoSliceEntry: return "no such slice, or no free slice entry in the ledger";
    case LedgerError::kNoGpuEntry: return "slice has no free GPU entry";
    case LedgerError::kNoProcessSlot: return "slice has no free process slot";
    case LedgerError::kBadArgument: return "bad argument";
    case LedgerError::kUntrusted: return "refused: a symlink, or owned or writable by another user";
    case LedgerError::kNotPermitted: return "not permitted: only the ledger's writer (gsliced) creates slices and sets limits";
  }
  return "unknown ledger error";
}

uint64_t ProcessStartTime(uint32_t pid) {
  char state = 0;
  uint64_t st = 0;
  return ReadStat(pid, &state, &st) ? st : 0;
}

bool ProcessAlive(uint32_t pid, uint64_t expected_start_time) {
  if (pid == 0) return false;
  char state = 0;
  uint64_t st = 0;
  if (!ReadStat(pid, &state, &st)) {
    // No /proc (unusual): fall back to kill(0).
    return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
  }
  if (state == 'Z' || state == 'X' || state == 'x') return false;
  if (expected_start_time != 0 && st != expected_start_time) return false;
  return true;
}

int OpenLedgerDirectory(const char* path, bool create, char* why, size_t why_size) {
  auto fail = [&](int err, const char* sep, const char* what) {
    if (why != nullptr && why_size > 0) snprintf(why, why_size, "%s%s%s", path, sep, what);
    errno = err;
    return -1;
  };
  if (path == nullptr || path[0] == '\0') return fail(EINVAL, "", "(empty path)");
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && create) {
    // mkdir never follows a symlink at the last component: a planted link makes it fail.
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return fail(errno, ": cannot create the directory: ", strerror(errno));
    fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) return fail(EPERM, ": ", "is a symlink; refused (remove it: the ledger is never opened through a link)");
    struct stat lst;
    if (err == ENOTDIR && lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
      return fail(EPERM, ": ", "is a symlink; refused (remove it: the ledger is never opened through a link)");
    }
    if (err == ENOTDIR) {
      return fail(ENOTDIR, ": ", "is not a directory: a ledger FILE of version 3 or older; stop what maps it and remove it");
    }
    return fail(err, ": ", strerror(err));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return fail(err, ": ", strerror(err));
  }
  const char* bad = nullptr;
  if (st.st_uid != 0 && st.st_uid != geteuid()) bad = "is owned by another user (neither root nor this user); refused";
  else if ((st.st_mode & 022) != 0) bad = "is writable by group or others; refused (chmod 0755, or remove it)";
  if (bad != nullptr) {
    close(fd);
    char msg[160];
    snprintf(msg, sizeof msg, "%s (uid %u, mode %03o)", bad, static_cast<unsigned>(st.st_uid),
             static_cast<unsigned>(st.st_mode & 07777));
    return fail(EPERM, ": ", msg);
  }
  return fd;
}

bool ParseGpuUuid(const char* text, uint8_t out[16]) {
  if (text == nullptr) return false;
  if (strncmp(text, "GPU-", 4) == 0) text += 4;
  int n = 0;
  for (; *text != '\0'; ++text) {
    const char c = *text;
    if (c == '-') continue;
    int v;
    if (c >= '0' && c <= '9') v = c - '0';
    else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    else return false;
    if (n >= 32) return false;
    if (n % 2 == 0) out[n / 2] = static_cast<uint8_t>(v << 4);
    else out[n / 2] = static_cast<uint8_t>(out[n / 2] | v);
    ++n;
  }
  return n == 32;
}

void PerUserLedgerPath(const char* path, char* out, size_t out_size) {
  snprintf(out, out_size, "%s-u%u", path, static_cast<unsigned>(geteuid()));
}

LedgerError Ledger::Fail(LedgerError e, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail_, sizeof detail_, fmt, ap);
  va_end(ap);
  return e;
}

Ledger::~Ledger() { Close(); }

void Ledger::UnmapUsage(int slice) {
  UsageMap& u = usage_[slice];
  UnguardMapping(u.guard);
  if (u.map != nullptr) munmap(u.map, sizeof(LedgerUsage));
  if (u.fd >= 0) close(u.fd);  // drops every lock byte this Ledger holds there
  if (u.probe >= 0) close(u.probe);
  u = UsageMap{};
}

void Ledger::Close() {
  for (int i = 0; i < kLedgerMaxSlices; ++i) UnmapUsage(i);
  if (limits_rw_ != nullptr && limits_rw_ != limits_) munmap(limits_rw_, sizeof(LedgerLimits));
  if (limits_ != nullptr) munmap(const_cast<LedgerLimits*>(limits_), sizeof(LedgerLimits));
  for (int* fd : {&dir_fd_, &limits_fd_, &lock_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
  limits_ = nullptr;
  limits_rw_ = nullptr;
  private_ = false;
  dir_owner_ = 0;
}

Ledger::Ledger(Ledger&& o) noexcept { *this = static_cast<Ledger&&>(o); }

Ledger& Ledger::operator=(Ledger&& o) noexcept {
  if (this != &o) {
    Close();
    limits_ = o.limits_;
    limits_rw_ = o.limits_rw_;
    private_ = o.private_;
    dir_fd_ = o.dir_fd_;
    limits_fd_ = o.limits_fd_;
    lock_fd_ = o.lock_fd_;
    dir_owner_ = o.dir_owner_;
    for (int i = 0; i < kLedgerMaxSlices; ++i) {
      usage_[i] = o.usage_[i];
      o.usage_[i] = UsageMap{};
    }
    memcpy(path_, o.path_, sizeof path_);
    memcpy(own_usage_path_, o.own_usage_path_, sizeof own_usage_path_);
    memcpy(detail_, o.detail_, sizeof detail_);
    o.limits_ = nullptr;
    o.limits_rw_ = nullptr;
    o.private_ = false;
    o.dir_fd_ = o.limits_fd_ = o.lock_fd_ = -1;
  }
  return *this;
}

LedgerUsage* Ledger::usage(int slice) const {
  return slice >= 0 && slice < kLedgerMaxSlices ? usage_[slice].map : nullptr;
}

bool Ledger::usage_writable(int slice) const {
  return slice >= 0 && slice < kLedgerMaxSlices && usage_[slice].map != nullptr && usage_[slice].writable;
}

int Ledger::usage_fd(int slice) const { return slice >= 0 && slice < kLedgerMaxSlices ? usage_[slice].fd : -1; }

void Ledger::SetOwnUsagePath(const char* path) {
  snprintf(own_usage_path_, sizeof own_usage_path_, "%s", path == nullptr ? "" : path);
}

// ---- opening ---------------------------------------------------------------------------

LedgerError Ledger::OpenPrivate() {
  void* p = mmap(nullptr, sizeof(LedgerLimits), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return Fail(LedgerError::kOpenFailed, "private ledger: %s", strerror(errno));
  Close();
  limits_rw_ = static_cast<LedgerLimits*>(p);
  limits_ = limits_rw_;
  private_ = true;
  snprintf(path_, sizeof path_, "(private)");
  InitLimitsHeader(limits_rw_);
  return LedgerError::kOk;
}

LedgerError Ledger::Open(const char* path, int init_timeout_ms, bool create) {
  if (path == nullptr || path[0] == '\0' || strlen(path) >= sizeof path_) {
    return Fail(LedgerError::kBadArgument, "ledger path is empty or too long");
  }
  char why[256] = {};
  const int dfd = OpenLedgerDirectory(path, create, why, sizeof why);
  if (dfd < 0) {
    const int err = errno;
    snprintf(detail_, sizeof detail_, "%s", why);
    if (err == EPERM) return LedgerError::kUntrusted;
    if (err == ENOTDIR) return LedgerError::kIncompatible;
    return LedgerError::kOpenFailed;
  }
  struct stat dst;
  fstat(dfd, &dst);
  // The writer owns the directory and may write it: a read-only mount of the node's ledger
  // (a pod's, even one running as root) makes a reader.
  const bool writer = dst.st_uid == geteuid() && faccessat(dfd, ".", W_OK, AT_EACCESS) == 0;
  int lock_fd = -1, fd = -1;
  LedgerLimits* rw = nullptr;
  const LedgerLimits* ro = nullptr;
  LedgerError e = LedgerError::kOk;
  auto cleanup = [&](LedgerError err) {
    if (rw != nullptr) munmap(rw, sizeof(LedgerLimits));
    if (ro != nullptr) munmap(const_cast<LedgerLimits*>(ro), sizeof(LedgerLimits));
    if (fd >= 0) close(fd);
    if (lock_fd >= 0) close(lock_fd);
    close(dfd);
    return err;
  };
  if (writer) {
    // The directory is ours and nobody else may write it, so nothing can be planted here;
    // O_NOFOLLOW all the same.
    lock_fd = openat(dfd, kLockName, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    struct stat lst;
    if (lock_fd < 0 || fstat(lock_fd, &lst) != 0 || UntrustedFile(lst, geteuid(), geteuid(), 0) != nullptr) {
      return cleanup(Fail(LedgerError::kUntrusted, "%s/%s: cannot open the writer's lock file safely: %s", path,
                          kLockName, lock_fd < 0 ? strerror(errno) : "not a regular file of ours"));
    }
    fd = openat(dfd, kLimitsName, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
      fd = openat(dfd, kLimitsName, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (fd < 0 && errno == EEXIST) fd = openat(dfd, kLimitsName, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
      if (fd >= 0) fchmod(fd, 0644);  // whatever the umask: everyone reads the limits
    }
  } else {
    fd = openat(dfd, kLimitsName, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd < 0) {
    const int err = errno;
    return cleanup(Fail(err == ELOOP ? LedgerError::kUntrusted : LedgerError::kOpenFailed, "%s/%s: %s%s", path,
                        kLimitsName, strerror(err),
                        err == ENOENT ? " (the directory's owner creates it: start gsliced, or use gslice run)" : ""));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) return cleanup(Fail(LedgerError::kOpenFailed, "%s/%s: %s", path, kLimitsName, strerror(errno)));
  if (const char* bad = UntrustedFile(st, dst.st_uid, dst.st_uid, 0); bad != nullptr) {
    return cleanup(Fail(LedgerError::kUntrusted, "%s/%s %s (uid %u, mode %03o); refused", path, kLimitsName, bad,
                        static_cast<unsigned>(st.st_uid), static_cast<unsigned>(st.st_mode & 07777)));
  }
  uint32_t initialised = 0;
  if (writer && static_cast<size_t>(st.st_size) == sizeof(LedgerLimits) &&
      pread(fd, &initialised, sizeof initialised, offsetof(LedgerLimitsHeader, initialised)) != sizeof initialised) {
    initialised = 0;
  }
  if (writer && (static_cast<size_t>(st.st_size) != sizeof(LedgerLimits) || initialised != 1)) {
    // Created but not sized yet: the writer that holds the lock sizes and initialises it
    // (idempotent; the kernel drops the flock of a writer killed half-way).
    const int64_t deadline = MonotonicNs() + static_cast<int64_t>(init_timeout_ms) * 1'000'000;
    while (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      if (MonotonicNs() > deadline) return cleanup(Fail(LedgerError::kInitTimeout, "%s: the writer's lock is held", path));
      SleepNs(200'000);
    }
    if (fstat(fd, &st) == 0 && st.st_size == 0 && ftruncate(fd, static_cast<off_t>(sizeof(LedgerLimits))) != 0) {
      e = Fail(LedgerError::kOpenFailed, "%s/%s: %s", path, kLimitsName, strerror(errno));
    }
    if (e == LedgerError::kOk && fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == sizeof(LedgerLimits)) {
      void* p = mmap(nullptr, sizeof(LedgerLimits), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        auto* l = static_cast<LedgerLimits*>(p);
        if (l->header.initialised.load(kAcq) != 1) InitLimitsHeader(l);
        munmap(p, sizeof(LedgerLimits));
      }
    }
    flock(lock_fd, LOCK_UN);
    if (e != LedgerError::kOk) return cleanup(e);
    fstat(fd, &st);
  }
  if (static_cast<size_t>(st.st_size) != sizeof(LedgerLimits)) {
    return cleanup(Fail(LedgerError::kIncompatible, "%s/%s: %lld bytes, this build expects %zu (layout version %u); "
                        "stop what maps the ledger and let gsliced recreate it",
                        path, kLimitsName, static_cast<long long>(st.st_size), sizeof(LedgerLimits), kLedgerVersion));
  }
  void* p = mmap(nullptr, sizeof(LedgerLimits), PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return cleanup(Fail(LedgerError::kOpenFailed, "%s/%s: mmap: %s", path, kLimitsName, strerror(errno)));
  ro = static_cast<const LedgerLimits*>(p);
  for (const int64_t deadline = MonotonicNs() + static_cast<int64_t>(init_timeout_ms) * 1'000'000;
       ro->header.initialised.load(kAcq) != 1;) {
    if (MonotonicNs() > deadline) return cleanup(Fail(LedgerError::kInitTimeout, "%s/%s: never initialised", path, kLimitsName));
    SleepNs(200'000);
  }
  if (!LimitsCompatible(ro)) {
    return cleanup(Fail(LedgerError::kIncompatible, "%s/%s: layout version %u, this build speaks %u; "
                        "stop what maps the ledger and let gsliced recreate it",
                        path, kLimitsName, ro->header.version, kLedgerVersion));
  }
  if (writer) {
    void* w = mmap(nullptr, sizeof(LedgerLimits), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (w == MAP_FAILED) return cleanup(Fail(LedgerError::kOpenFailed, "%s/%s: mmap: %s", path, kLimitsName, strerror(errno)));
    rw = static_cast<LedgerLimits*>(w);
  }
  Close();
  limits_ = ro;
  limits_rw_ = rw;
  dir_fd_ = dfd;
  limits_fd_ = fd;
  lock_fd_ = lock_fd;
  dir_owner_ = dst.st_uid;
  snprintf(path_, sizeof path_, "%s", path);
  detail_[0] = '\0';
  return LedgerError::kOk;
}

bool Ledger::LockWriter() {
  if (private_) return true;
  if (lock_fd_ < 0) return false;
  const int64_t deadline = MonotonicNs() + 4'000'000'000;
  while (flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (MonotonicNs() > deadline) return false;
    SleepNs(100'000 + static_cast<int64_t>(Jitter() % 100'000));
  }
  return true;
}

void Ledger::UnlockWriter() {
  if (lock_fd_ >= 0) flock(lock_fd_, LOCK_UN);
}

// ---- usage files -------------------------------------------------------------------------

LedgerError Ledger::CreateUsage(int slice, uint64_t generation, uint32_t owner_uid) {
  // REQUIRES: the writer's lock.
  UnmapUsage(slice);
  UsageMap u;
  if (private_) {
    void* p = mmap(nullptr, sizeof(LedgerUsage), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return Fail(LedgerError::kOpenFailed, "private usage: %s", strerror(errno));
    u.map = static_cast<LedgerUsage*>(p);
  } else {
    char name[32];
    UsageName(slice, name, sizeof name);
    // A fresh inode per generation: processes of an earlier generation keep theirs, and a
    // reused entry starts clean.
    if (unlinkat(dir_fd_, name, 0) != 0 && errno != ENOENT) {
      return Fail(LedgerError::kOpenFailed, "%s/%s: cannot remove the old usage file: %s", path_, name, strerror(errno));
    }
    u.fd = openat(dir_fd_, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (u.fd < 0) return Fail(LedgerError::kOpenFailed, "%s/%s: %s", path_, name, strerror(errno));
    const uid_t owner = owner_uid == kLedgerOwnerCaller ? geteuid() : static_cast<uid_t>(owner_uid);
    LedgerError e = LedgerError::kOk;
    if (fchmod(u.fd, 0644) != 0 || ftruncate(u.fd, static_cast<off_t>(sizeof(LedgerUsage))) != 0) {
      e = Fail(LedgerError::kOpenFailed, "%s/%s: %s", path_, name, strerror(errno));
    } else {
      // Mapped as the file will be owned (guarded where the owner is another uid), and
      // given away only once its header is written.
      e = MapUsageFile(u.fd, owner, /*writable=*/true, name, &u);
    }
    if (e == LedgerError::kOk) {
      WriteUsageHead(&u.map->head, slice, generation);
      if (owner != geteuid() && fchown(u.fd, owner, static_cast<gid_t>(-1)) != 0) {
        e = Fail(LedgerError::kNotPermitted, "%s/%s: cannot give it to uid %u: %s", path_, name,
                 static_cast<unsigned>(owner), strerror(errno));
      }
    }
    if (e != LedgerError::kOk) {
      UnguardMapping(u.guard);
      if (u.map != nullptr) munmap(u.map, sizeof(LedgerUsage));
      close(u.fd);
      unlinkat(dir_fd_, name, 0);
      return e;
    }
    u.probe = OpenProbe(u.fd);
  }
  if (private_) WriteUsageHead(&u.map->head, slice, generation);
  u.writable = true;
  u.generation = generation;
  usage_[slice] = u;
  return LedgerError::kOk;
}

// A usage file whose owner is another uid can be shrunk by that owner at any moment, and a
// mapping of it would then kill this process (SIGBUS): it is mapped only under the shrink
// guard, which turns such a fault into zeros and tells MapUsage to drop the mapping. The
// directory's owner (the writer: root for the node ledger) is trusted like the caller.
LedgerError Ledger::MapUsageFile(int fd, uid_t file_owner, bool writable, const char* name, UsageMap* u) {
  const bool foreign = file_owner != geteuid() && file_owner != dir_owner_;
  if (foreign && !InstallShrinkGuard()) {
    return Fail(LedgerError::kUntrusted,
                "%s/%s belongs to uid %u, who could shrink it under this process; refused (only gslice's own "
                "programs, with the shrink guard, map other users' usage files)",
                path_, name, static_cast<unsigned>(file_owner));
  }
  const int prot = PROT_READ | (writable ? PROT_WRITE : 0);
  void* p = mmap(nullptr, sizeof(LedgerUsage), prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Fail(LedgerError::kOpenFailed, "%s/%s: mmap: %s", path_, name, strerror(errno));
  if (foreign) {
    u->guard = GuardMapping(p, sizeof(LedgerUsage), prot);
    if (u->guard < 0) {
      munmap(p, sizeof(LedgerUsage));
      return Fail(LedgerError::kOpenFailed, "%s/%s: every shrink guard entry is taken (%d); not mapped", path_, name,
                  kMaxGuardedRanges);
    }
  }
  u->map = static_cast<LedgerUsage*>(p);
  return LedgerError::kOk;
}

LedgerError Ledger::MapUsage(int slice) {
  if (limits_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices) return LedgerError::kBadArgument;
  const LedgerSlice& s = limits_->slices[slice];
  if (StateOf(s.state.load(kAcq)) != EntryState::kReady) return LedgerError::kNoSliceEntry;
  const uint64_t generation = s.generation.load(kAcq);
  UsageMap& cur = usage_[slice];
  if (cur.map != nullptr && cur.generation == generation) {
    if (!MappingShrunk(cur.guard)) return LedgerError::kOk;
    // Its owner shrank the file: what the mapping shows now is zeros, not the file. Map it
    // again, which refuses it until it has its size back.
    UnmapUsage(slice);
  }
  if (private_) return LedgerError::kNoSliceEntry;
  char name[32];
  UsageName(slice, name, sizeof name);
  const uid_t owner = static_cast<uid_t>(s.owner_uid);
  // Candidates: this process's own usage file where one is mounted (pods), then the directory's.
  for (int k = 0; k < 2; ++k) {
    if (k == 0 && own_usage_path_[0] == '\0') continue;
    int fd = -1;
    bool writable = true;
    for (int flags : {O_RDWR, O_RDONLY}) {
      fd = k == 0 ? open(own_usage_path_, flags | O_NOFOLLOW | O_CLOEXEC) : openat(dir_fd_, name, flags | O_NOFOLLOW | O_CLOEXEC);
      writable = flags == O_RDWR;
      if (fd >= 0 || (errno != EACCES && errno != EROFS && errno != EPERM)) break;
    }
    if (fd < 0) {
      if (k == 1) return Fail(errno == ELOOP ? LedgerError::kUntrusted : LedgerError::kOpenFailed, "%s/%s: %s", path_, name, strerror(errno));
      continue;
    }
    struct stat st;
    const char* bad = fstat(fd, &st) != 0 ? "cannot be inspected" : UntrustedFile(st, owner, dir_owner_, sizeof(LedgerUsage));
    if (bad != nullptr) {
      close(fd);
      if (k == 0) continue;
      return Fail(LedgerError::kUntrusted, "%s/%s %s (the slice belongs to uid %u); refused", path_, name, bad,
                  static_cast<unsigned>(owner));
    }
    UsageMap fresh;
    if (LedgerError e = MapUsageFile(fd, st.st_uid, writable, name, &fresh); e != LedgerError::kOk) {
      close(fd);
      if (k == 0) continue;
      return e;
    }
    if (!UsageCompatible(&fresh.map->head, slice, generation) || MappingShrunk(fresh.guard)) {
      UnguardMapping(fresh.guard);
      munmap(fresh.map, sizeof(LedgerUsage));
      close(fd);
      if (k == 0) continue;
      return Fail(LedgerError::kNoSliceEntry, "%s/%s: belongs to another generation of the slice (recycled)", path_, name);
    }
    UnmapUsage(slice);
    cur = fresh;
    cur.fd = fd;
    cur.probe = OpenProbe(fd);
    cur.writable = writable;
    cur.generation = generation;
    return LedgerError::kOk;
  }
  return LedgerError::kOpenFailed;
}

// ---- liveness lock bytes ---------------------------------------------------------------
//
// Open-file-description locks (F_OFD_*) belong to the open file, not to a process: the
// kernel drops them when the last descriptor of it closes, which a killed process's exit
// does, whatever pid namespace it lives in. They conflict between different open files even
// within one process, so the probe descriptor (a second open of the same inode) sees the
// locks of fd too. A forked child that keeps the descriptor keeps the locks (hence the
// same-namespace pid check in OwnerAlive), until it exits or execs (O_CLOEXEC).

bool Ledger::OwnerAlive(const UsageMap& u, int64_t lock_byte, uint32_t pid, uint64_t pid_ns, uint64_t start_time,
                        uint64_t self_ns) const {
  if (private_) return pid != 0 && ProcessAlive(pid, start_time);  // private ledger: one process, pids
  return gslice::OwnerAlive(u.probe, lock_byte, pid, pid_ns, start_time, self_ns);
}

bool Ledger::SlotOwnerAlive(int slice, int slot, uint64_t word, uint64_t self_ns) const {
  const UsageMap& u = usage_[slice];
  LedgerProcess& p = u.map->slots[slot];
  const EntryState st = StateOf(word);
  const uint32_t pid = PidOf(word);
  const uint64_t ns = p.pid_ns.load(kSeq);
  const int64_t byte = LedgerSlotLockByte(slot);
  switch (st) {
    case EntryState::kAlive:
      return OwnerAlive(u, byte, pid, ns, p.start_time.load(kSeq), self_ns);
    case EntryState::kReaping:
      return OwnerAlive(u, byte, pid, ns, 0, self_ns);
    case EntryState::kClaiming: {
      // The claimer takes the byte right after its CAS: until then, the claim's age decides.
      if (private_ || (ns != 0 && ns == self_ns)) {
        if (!ProcessAlive(pid, 0)) return false;
        if (private_) return true;
      }
      if (OwnerByteLocked(u.probe, byte)) return true;
      if (!u.writable) {
        const int64_t at = p.claimed_ns.load(kSeq);
        return at == 0 || MonotonicNs() - at < kClaimGraceNs;
      }
      return ClaimWithinGrace(p.claimed_ns);
    }
    default:
      return false;
  }
}

bool Ledger::SlotOwnerAlive(int slice, int slot) const {
  if (usage(slice) == nullptr || slot < 0 || slot >= kLedgerMaxSlots) return false;
  return SlotOwnerAlive(slice, slot, usage_[slice].map->slots[slot].state.load(kSeq), SelfPidNamespace());
}

LedgerComputeEntry* Ledger::ComputeEntry(int index) const {
  if (index < 0 || index >= kLedgerMaxComputeEntries) return nullptr;
  LedgerUsage* u = usage(ComputeSliceOf(index));
  return u == nullptr ? nullptr : &u->head.compute[ComputeEntryOf(index)];
}

bool Ledger::AcquireComputeEntry(int index) {
  LedgerComputeEntry* e = ComputeEntry(index);
  if (e == nullptr || !usage_writable(ComputeSliceOf(index))) return false;
  e->pid_ns.store(SelfPidNamespace(), kSeq);
  e->start_time.store(ProcessStartTime(static_cast<uint32_t>(getpid())), kSeq);
  return LockOwnerByte(usage_[ComputeSliceOf(index)].fd, LedgerComputeLockByte(ComputeEntryOf(index)));
}

void Ledger::ReleaseComputeEntry(int index) {
  if (ComputeEntry(index) == nullptr) return;
  UnlockOwnerByte(usage_[ComputeSliceOf(index)].fd, LedgerComputeLockByte(ComputeEntryOf(index)));
}

bool Ledger::ComputeOwnerAlive(int index) const {
  const LedgerComputeEntry* e = ComputeEntry(index);
  if (e == nullptr) return false;
  const uint64_t word = e->state.load(kSeq);
  if (StateOf(word) != EntryState::kAlive) return false;
  return OwnerAlive(usage_[ComputeSliceOf(index)], LedgerComputeLockByte(ComputeEntryOf(index)), PidOf(word),
                    e->pid_ns.load(kSeq), e->start_time.load(kSeq), SelfPidNamespace());
}

// ---- slices (the writer) ---------------------------------------------------------------

int Ledger::FindSlice(const char* name) const {
  if (limits_ == nullptr || name == nullptr) return -1;
  for (int i = 0; i < kLedgerMaxSlices; ++i) {
    const LedgerSlice& s = limits_->slices[i];
    if (StateOf(s.state.load(kAcq)) == EntryState::kReady && (s.flags & kSliceSetAside) == 0 &&
        NameEquals(s.name, name)) {
      return i;
    }
  }
  return -1;
}

bool Ledger::RecycleIfIdle(int slice) {
  // REQUIRES: the writer's lock. An ephemeral slice with no live process and no live compute
  // entry goes back to FREE, and its usage file goes away (open descriptors keep the inode).
  LedgerSlice& s = limits_rw_->slices[slice];
  uint64_t word = s.state.load(kAcq);
  if (StateOf(word) != EntryState::kReady || (s.flags & kSliceEphemeral) == 0) return false;
  if (MapUsage(slice) == LedgerError::kOk) {
    LedgerUsage* u = usage_[slice].map;
    Reap(slice);
    const uint32_t hw = u->head.slot_high_water.load(kAcq);
    for (uint32_t i = 0; i < hw && i < static_cast<uint32_t>(kLedgerMaxSlots); ++i) {
      if (StateOf(u->slots[i].state.load(kSeq)) != EntryState::kFree) return false;
    }
    for (int e = 0; e < kLedgerSliceComputeEntries; ++e) {
      if (ComputeOwnerAlive(slice * kLedgerSliceComputeEntries + e)) return false;
    }
  }
  // Attachers re-check the generation after taking a slot, so bumping it first makes a
  // racing attach back off.
  s.generation.fetch_add(1, kSeq);
  if (!s.state.compare_exchange_strong(word, PackState(EntryState::kFree, 0), kSeq)) return false;
  UnmapUsage(slice);
  if (!private_) {
    char name[32];
    UsageName(slice, name, sizeof name);
    unlinkat(dir_fd_, name, 0);
  }
  return true;
}

LedgerError Ledger::FindOrCreateSlice(const char* name, SliceClass cls, uint32_t flags, int* slice, uint32_t owner_uid,
                                      uint32_t protect_permille) {
  if (limits_ == nullptr || name == nullptr || name[0] == '\0' ||
      strlen(name) >= static_cast<size_t>(kLedgerNameSize) || !ValidProtectPermille(protect_permille)) {
    return LedgerError::kBadArgument;
  }
  int found = FindSlice(name);
  if (found >= 0) {
    *slice = found;
    return LedgerError::kOk;
  }
  if (limits_rw_ == nullptr) {
    return Fail(LedgerError::kNotPermitted, "%s: slice %s is not there, and only the directory's owner (uid %u) creates slices",
                path_, name, static_cast<unsigned>(dir_owner_));
  }
  if (!LockWriter()) return Fail(LedgerError::kInitTimeout, "%s: the writer's lock is held by a stuck writer", path_);
  LedgerError e = LedgerError::kOk;
  found = FindSlice(name);
  if (found < 0) {
    int free_entry = -1;
    // Under the lock, a CLAIMING entry is one whose creator died half-way: free.
    for (int i = 0; i < kLedgerMaxSlices && free_entry < 0; ++i) {
      const EntryState st = StateOf(limits_->slices[i].state.load(kAcq));
      if (st == EntryState::kFree || st == EntryState::kClaiming) free_entry = i;
    }
    for (int i = 0; i < kLedgerMaxSlices && free_entry < 0; ++i) {
      if (RecycleIfIdle(i)) free_entry = i;
    }
    if (free_entry < 0) {
      e = Fail(LedgerError::kNoSliceEntry, "%s: all %d slice entries are in use", path_, kLedgerMaxSlices);
    } else {
      LedgerSlice& s = limits_rw_->slices[free_entry];
      s.state.store(PackState(EntryState::kClaiming, static_cast<uint32_t>(getpid())), kSeq);
      const uint64_t generation = s.generation.fetch_add(1, kSeq) + 1;
      memset(s.name, 0, sizeof s.name);
      memcpy(s.name, name, strlen(name));
      s.slice_class = static_cast<uint32_t>(cls);
      s.flags = flags;
      s.owner_uid = owner_uid == kLedgerOwnerCaller ? static_cast<uint32_t>(geteuid()) : owner_uid;
      s.protect_permille = protect_permille;
      s.trace_request.store(0, kRlx);
      s.reserved_trace = 0;
      memset(s.reserved, 0, sizeof s.reserved);
      for (auto& g : s.gpus) {
        g.state.store(0, kRlx);
        memset(g.uuid, 0, sizeof g.uuid);
        g.limit.store(-1, kRlx);
        g.compute_cap.store(0, kRlx);  // not set: the processes' own policy applies
        g.compute_share.store(0, kRlx);
      }
      e = CreateUsage(free_entry, generation, s.owner_uid);
      if (e == LedgerError::kOk) {
        s.state.store(PackState(EntryState::kReady, 0), kSeq);
        found = free_entry;
      } else {
        s.state.store(PackState(EntryState::kFree, 0), kSeq);
      }
    }
  }
  UnlockWriter();
  if (found < 0) return e;
  *slice = found;
  return LedgerError::kOk;
}

LedgerError Ledger::UpdateSlice(int slice, SliceClass cls, uint32_t flags, uint32_t owner_uid,
                                uint32_t protect_permille) {
  if (limits_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices || !ValidProtectPermille(protect_permille)) {
    return LedgerError::kBadArgument;
  }
  if (limits_rw_ == nullptr) return Fail(LedgerError::kNotPermitted, "%s: only the directory's owner changes slices", path_);
  LedgerSlice& s = limits_rw_->slices[slice];
  if (StateOf(s.state.load(kAcq)) != EntryState::kReady) return LedgerError::kNoSliceEntry;
  if (owner_uid == kLedgerOwnerCaller) owner_uid = static_cast<uint32_t>(geteuid());
  if (s.owner_uid != owner_uid && !private_) {
    // Re-own the usage file in place: its counters stay as they are.
    if (LedgerError e = MapUsage(slice); e != LedgerError::kOk) return e;
    UsageMap& u = usage_[slice];
    // Once the file is another uid's, it may shrink under this mapping (MapUsageFile).
    if (static_cast<uid_t>(owner_uid) != geteuid() && static_cast<uid_t>(owner_uid) != dir_owner_ && u.guard < 0) {
      const int prot = PROT_READ | (u.writable ? PROT_WRITE : 0);
      u.guard = InstallShrinkGuard() ? GuardMapping(u.map, sizeof(LedgerUsage), prot) : -1;
      if (u.guard < 0) {
        return Fail(LedgerError::kUntrusted, "%s/slice-%d: not given to uid %u: this process cannot guard its mapping "
                    "against a shrink (shrink_guard.h)", path_, slice, owner_uid);
      }
    }
    if (fchown(u.fd, static_cast<uid_t>(owner_uid), static_cast<gid_t>(-1)) != 0) {
      return Fail(LedgerError::kNotPermitted, "%s/slice-%d: cannot give it to uid %u: %s", path_, slice, owner_uid,
                  strerror(errno));
    }
  }
  s.slice_class = static_cast<uint32_t>(cls);
  s.flags = flags;
  s.owner_uid = owner_uid;
  s.protect_permille = protect_permille;
  return LedgerError::kOk;
}

int Ledger::FindGpu(int slice, const uint8_t uuid[16]) const {
  if (limits_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices) return -1;
  const LedgerSlice& s = limits_->slices[slice];
  for (int g = 0; g < kLedgerMaxGpus; ++g) {
    if (StateOf(s.gpus[g].state.load(kAcq)) == EntryState::kReady && memcmp(s.gpus[g].uuid, uuid, 16) == 0) return g;
  }
  return -1;
}

LedgerError Ledger::FindOrAddGpu(int slice, const uint8_t uuid[16], int64_t limit, int* gpu) {
  if (limits_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices) return LedgerError::kBadArgument;
  int g = FindGpu(slice, uuid);
  if (g >= 0) {
    *gpu = g;
    return LedgerError::kOk;
  }
  if (limits_rw_ == nullptr) {
    return Fail(LedgerError::kNotPermitted, "%s: slice %s has no limit for this GPU, and only the directory's owner adds one",
                path_, limits_->slices[slice].name);
  }
  if (!LockWriter()) return Fail(LedgerError::kInitTimeout, "%s: the writer's lock is held by a stuck writer", path_);
  g = FindGpu(slice, uuid);
  if (g < 0) {
    LedgerSlice& s = limits_rw_->slices[slice];
    for (int i = 0; i < kLedgerMaxGpus; ++i) {
      const EntryState st = StateOf(s.gpus[i].state.load(kAcq));
      if (st != EntryState::kFree && st != EntryState::kClaiming) continue;  // CLAIMING: its adder died
      s.gpus[i].state.store(PackState(EntryState::kClaiming, static_cast<uint32_t>(getpid())), kSeq);
      memcpy(s.gpus[i].uuid, uuid, 16);
      s.gpus[i].limit.store(limit, kSeq);
      s.gpus[i].compute_cap.store(0, kSeq);
      s.gpus[i].compute_share.store(0, kSeq);
      if (LedgerUsage* u = usage(slice); u != nullptr && usage_writable(slice)) {
        for (auto& c : u->used[i]) c.store(0, kRlx);
      }
      s.gpus[i].state.store(PackState(EntryState::kReady, 0), kSeq);
      g = i;
      break;
    }
  }
  UnlockWriter();
  if (g < 0) return LedgerError::kNoGpuEntry;
  *gpu = g;
  return LedgerError::kOk;
}

// ---- processes -------------------------------------------------------------------------

LedgerError Ledger::Attach(int slice, uint32_t pid, uint64_t start_time, SliceHandle* out) {
  if (limits_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices || pid == 0) return LedgerError::kBadArgument;
  const uint64_t generation = limits_->slices[slice].generation.load(kSeq);
  if (LedgerError e = MapUsage(slice); e != LedgerError::kOk) return e;
  if (!usage_[slice].writable) {
    return Fail(LedgerError::kNotPermitted, "%s/slice-%d: slice %s belongs to uid %u; this process (uid %u) may not charge into it",
                path_, slice, limits_->slices[slice].name, limits_->slices[slice].owner_uid,
                static_cast<unsigned>(geteuid()));
  }
  UsageMap& u = usage_[slice];
  LedgerUsage& s = *u.map;
  const uint64_t self_ns = SelfPidNamespace();
  for (int attempt = 0; attempt < 2; ++attempt) {
    // Start the search at a pid-dependent slot so that 64 processes attaching at once mostly
    // hit different slots on their first CAS.
    for (int k = 0; k < kLedgerMaxSlots; ++k) {
      int i = static_cast<int>((pid + static_cast<uint32_t>(k)) % kLedgerMaxSlots);
      LedgerProcess& p = s.slots[i];
      uint64_t expected = PackState(EntryState::kFree, 0);
      if (StateOf(p.state.load(kRlx)) != EntryState::kFree) continue;
      // Claim (CAS), stamp, take the lock byte, then publish ALIVE: an ALIVE slot's byte is
      // always held. Only the CAS winner touches the byte, so a claimer sharing our open file
      // (another thread, a forked child) never has its lock dropped under it.
      const uint32_t tag = ClaimTag();
      const uint64_t claim = PackState(EntryState::kClaiming, pid, tag);
      if (!p.state.compare_exchange_strong(expected, claim, kSeq)) continue;
      p.claimed_ns.store(MonotonicNs(), kSeq);
      p.pid_ns.store(self_ns, kSeq);
      if (!LockOwnerByte(u.fd, LedgerSlotLockByte(i))) {
        // Another open file still holds the byte: a forked child of a dead earlier owner.
        // The slot was reaped by pid; the byte frees when that child exits or execs.
        p.claimed_ns.store(0, kSeq);
        expected = claim;
        p.state.compare_exchange_strong(expected, PackState(EntryState::kFree, 0), kSeq);
        continue;
      }
      p.start_time.store(start_time, kSeq);
      const uint64_t alive = PackState(EntryState::kAlive, pid, tag);
      expected = claim;
      if (!p.state.compare_exchange_strong(expected, alive, kSeq)) {
        // Reaped as a stale claim (we stalled past kClaimGraceNs before locking): the reaper
        // frees it; our byte kept other files' claimers off it meanwhile.
        UnlockOwnerByte(u.fd, LedgerSlotLockByte(i));
        continue;
      }
      uint32_t hw = s.head.slot_high_water.load(kSeq);
      while (hw < static_cast<uint32_t>(i + 1) &&
             !s.head.slot_high_water.compare_exchange_weak(hw, static_cast<uint32_t>(i + 1), kSeq)) {
      }
      out->slice = slice;
      out->slot = i;
      out->generation = generation;
      out->word = alive;
      const LedgerSlice& l = limits_->slices[slice];
      if (l.generation.load(kSeq) != generation || StateOf(l.state.load(kSeq)) != EntryState::kReady ||
          s.head.generation.load(kSeq) != generation) {
        Detach(*out);  // the slice was recycled under us
        *out = SliceHandle{};
        return LedgerError::kNoSliceEntry;
      }
      return LedgerError::kOk;
    }
    Reap(slice);  // full: dead processes may be holding slots
  }
  return LedgerError::kNoProcessSlot;
}

LedgerError Ledger::AttachByName(const char* name, SliceClass cls, uint32_t flags, uint32_t pid,
                                 uint64_t start_time, SliceHandle* out) {
  LedgerError e = LedgerError::kNoSliceEntry;
  for (int attempt = 0; attempt < 8; ++attempt) {
    int slice = -1;
    e = FindOrCreateSlice(name, cls, flags, &slice);
    if (e != LedgerError::kOk) return e;
    e = Attach(slice, pid, start_time, out);
    if (e != LedgerError::kNoSliceEntry) return e;
  }
  return e;
}

void Ledger::Detach(const SliceHandle& h) {
  if (!h.valid() || !usage_writable(h.slice)) return;
  UsageMap& u = usage_[h.slice];
  LedgerProcess& p = u.map->slots[h.slot];
  uint64_t word = p.state.load(kSeq);
  if (h.word != 0 && word != h.word) return;  // reaped and taken by another owner: not ours to touch
  for (int g = 0; g < kLedgerMaxGpus; ++g) u.map->used[g][h.slot].store(0, kSeq);
  p.start_time.store(0, kSeq);
  // Unlock before freeing: once FREE, a claimer sharing our open file may take the byte, and a
  // late unlock would drop its lock. A reaper that sees the unlocked slot first frees it
  // itself (the CAS below then fails), which is the same outcome.
  UnlockOwnerByte(u.fd, LedgerSlotLockByte(h.slot));
  p.state.compare_exchange_strong(word, PackState(EntryState::kFree, 0), kSeq);
}

ChargeResult Ledger::Charge(const SliceHandle& h, int gpu, int64_t bytes) {
  if (!h.valid() || gpu < 0 || gpu >= kLedgerMaxGpus || bytes <= 0) return ChargeResult::kOk;
  LedgerUsage* u = usage_[h.slice].map;
  if (u == nullptr) return ChargeResult::kOk;
  const std::atomic<int64_t>& limit_word = limits_->slices[h.slice].gpus[gpu].limit;
  std::atomic<int64_t>& mine = u->used[gpu][h.slot];
  for (int attempt = 0;; ++attempt) {
    const int64_t limit = limit_word.load(kSeq);
    if (limit < 0) {
      mine.fetch_add(bytes, kSeq);
      return ChargeResult::kOk;
    }
    if (bytes > limit) return ChargeResult::kOverLimit;
    mine.fetch_add(bytes, kSeq);
    // Checked against the limit as it is after the sum too: a writer that lowers the limit
    // and then sums the usage (gsliced's shrink) either sees this add or is seen by this load
    // (seq_cst), so no charge slips past a lower limit it raced with.
    const int64_t now = limit_word.load(kSeq);
    const int64_t bound = now >= 0 && now < limit ? now : limit;
    if (SliceUsage(h.slice, gpu) <= bound) return ChargeResult::kOk;
    mine.fetch_sub(bytes, kSeq);
    if (attempt == 0) {
      if (Reap(h.slice) > 0) continue;  // a dead process was holding memory
    }
    if (attempt >= 2) return ChargeResult::kOverLimit;
    // A racing charger's transient add may have caused this refusal: back off and retry.
    SleepNs(20'000 + static_cast<int64_t>(Jitter() % 80'000));
  }
}

void Ledger::ForceCharge(const SliceHandle& h, int gpu, int64_t bytes) {
  if (!h.valid() || gpu < 0 || gpu >= kLedgerMaxGpus || usage_[h.slice].map == nullptr) return;
  usage_[h.slice].map->used[gpu][h.slot].fetch_add(bytes, kSeq);
}

void Ledger::Release(const SliceHandle& h, int gpu, int64_t bytes) {
  if (!h.valid() || gpu < 0 || gpu >= kLedgerMaxGpus || usage_[h.slice].map == nullptr) return;
  usage_[h.slice].map->used[gpu][h.slot].fetch_sub(bytes, kSeq);
}

int64_t Ledger::SliceUsage(int slice, int gpu) const {
  const LedgerUsage* u = usage(slice);
  if (u == nullptr || gpu < 0 || gpu >= kLedgerMaxGpus) return 0;
  const uint32_t hw = u->head.slot_high_water.load(kSeq);
  int64_t sum = 0;
  for (uint32_t i = 0; i < hw && i < static_cast<uint32_t>(kLedgerMaxSlots); ++i) sum += u->used[gpu][i].load(kSeq);
  return sum;
}

int64_t Ledger::SlotUsage(const SliceHandle& h, int gpu) const {
  if (!h.valid() || gpu < 0 || gpu >= kLedgerMaxGpus || usage(h.slice) == nullptr) return 0;
  return usage_[h.slice].map->used[gpu][h.slot].load(kSeq);
}

int64_t Ledger::Limit(int slice, int gpu) const {
  if (limits_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices || gpu < 0 || gpu >= kLedgerMaxGpus) return -1;
  return limits_->slices[slice].gpus[gpu].limit.load(kSeq);
}

void Ledger::SetLimit(int slice, int gpu, int64_t limit) {
  if (limits_rw_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices || gpu < 0 || gpu >= kLedgerMaxGpus) return;
  limits_rw_->slices[slice].gpus[gpu].limit.store(limit, kSeq);
}

const std::atomic<uint32_t>* Ledger::TraceRequestWord(int slice) const {
  if (limits_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices) return nullptr;
  return &limits_->slices[slice].trace_request;
}

void Ledger::SetTraceRequest(int slice, uint32_t request) {
  if (limits_rw_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices) return;
  limits_rw_->slices[slice].trace_request.store(request, kSeq);
}

uint32_t Ledger::ComputeCapWord(int slice, int gpu) const {
  if (limits_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices || gpu < 0 || gpu >= kLedgerMaxGpus) return 0;
  return limits_->slices[slice].gpus[gpu].compute_cap.load(kSeq);
}

uint32_t Ledger::ComputeShareWord(int slice, int gpu) const {
  if (limits_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices || gpu < 0 || gpu >= kLedgerMaxGpus) return 0;
  return limits_->slices[slice].gpus[gpu].compute_share.load(kSeq);
}

void Ledger::SetComputePolicy(int slice, int gpu, uint32_t cap_word, uint32_t share_word) {
  if (limits_rw_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices || gpu < 0 || gpu >= kLedgerMaxGpus) return;
  limits_rw_->slices[slice].gpus[gpu].compute_cap.store(cap_word, kSeq);
  limits_rw_->slices[slice].gpus[gpu].compute_share.store(share_word, kSeq);
}

int Ledger::Reap(int slice) {
  if (!usage_writable(slice)) return 0;
  UsageMap& u = usage_[slice];
  LedgerUsage& s = *u.map;
  const uint32_t me = static_cast<uint32_t>(getpid());
  const uint64_t self_ns = SelfPidNamespace();
  const uint32_t hw = s.head.slot_high_water.load(kSeq);
  int reaped = 0;
  for (uint32_t i = 0; i < hw && i < static_cast<uint32_t>(kLedgerMaxSlots); ++i) {
    LedgerProcess& p = s.slots[i];
    uint64_t word = p.state.load(kSeq);
    EntryState st = StateOf(word);
    if (st != EntryState::kAlive && st != EntryState::kReaping && st != EntryState::kClaiming) continue;
    if (st == EntryState::kReaping && PidOf(word) == me && p.pid_ns.load(kSeq) == self_ns) continue;  // ours, in progress
    if (SlotOwnerAlive(slice, static_cast<int>(i), word, self_ns)) continue;
    // Dead. Hold the byte while reaping (best effort: a forked child of the dead owner may
    // still hold it; then it is that child's lock that keeps our REAPING alive to others).
    const int64_t byte = LedgerSlotLockByte(static_cast<int>(i));
    const bool locked = LockOwnerByte(u.fd, byte);
    const uint64_t reaping = PackState(EntryState::kReaping, me, ClaimTag());
    if (!p.state.compare_exchange_strong(word, reaping, kSeq)) {
      // Someone else got there. Drop the byte unless the slot is now this process's own
      // (a claimer sharing our open file, whose lock this is too).
      if (locked && !(PidOf(word) == me && StateOf(word) != EntryState::kFree)) UnlockOwnerByte(u.fd, byte);
      continue;
    }
    p.pid_ns.store(self_ns, kSeq);
    for (int g = 0; g < kLedgerMaxGpus; ++g) s.used[g][i].store(0, kSeq);
    p.start_time.store(0, kSeq);
    p.claimed_ns.store(0, kSeq);
    // Unlock before freeing (see Detach); a reaper that takes over in between redoes the same.
    if (locked) UnlockOwnerByte(u.fd, byte);
    uint64_t mine = reaping;
    p.state.compare_exchange_strong(mine, PackState(EntryState::kFree, 0), kSeq);
    ++reaped;
  }
  return reaped;
}

void Ledger::MaybeReap(int slice) {
  if (!usage_writable(slice)) return;
  LedgerUsageHead& h = usage_[slice].map->head;
  int64_t now = MonotonicNs();
  int64_t last = h.last_reap_ns.load(kRlx);
  if (now - last < kReapIntervalNs) return;
  if (!h.last_reap_ns.compare_exchange_strong(last, now, kSeq)) return;  // someone else does it
  Reap(slice);
}

int Ledger::AliveCount(int slice) const {
  const LedgerUsage* u = usage(slice);
  if (u == nullptr) return 0;
  const uint64_t self_ns = SelfPidNamespace();
  int n = 0;
  for (int i = 0; i < kLedgerMaxSlots; ++i) {
    uint64_t word = u->slots[i].state.load(kSeq);
    if (StateOf(word) == EntryState::kAlive && SlotOwnerAlive(slice, i, word, self_ns)) ++n;
  }
  return n;
}

// ---- the compute window ----------------------------------------------------------------

ComputeWindow::~ComputeWindow() {
  for (int s = 0; s < kLedgerMaxSlices; ++s) {
    if (pages_ != nullptr && probe_[s] >= 0) close(probe_[s]);
  }
  if (pages_ != nullptr) munmap(pages_, sizeof(LedgerUsageHead) * kLedgerMaxSlices);
  if (staging_ != nullptr) munmap(staging_, sizeof(LedgerUsageHead));
}

bool ComputeWindow::Init(Ledger* ledger, int own_slice) {
  // Writable private memory: the gate thread copies other slices' pages into it.
  void* p = mmap(nullptr, sizeof(LedgerUsageHead) * kLedgerMaxSlices, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  void* st = mmap(nullptr, sizeof(LedgerUsageHead), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (st == MAP_FAILED) {
    munmap(p, sizeof(LedgerUsageHead) * kLedgerMaxSlices);
    return false;
  }
  pages_ = static_cast<LedgerUsageHead*>(p);
  staging_ = static_cast<LedgerUsageHead*>(st);
  ledger_ = ledger;
  for (int& fd : probe_) fd = -1;
  own_slice_ = -1;
  if (own_slice >= 0 && own_slice < kLedgerMaxSlices && ledger->usage_writable(own_slice) && ledger->usage_fd(own_slice) >= 0) {
    own_slice_ = own_slice;
    MapOwnSlice(ledger->usage_fd(own_slice), ledger->usage(own_slice)->head.generation.load());
  }
  return true;
}

int ComputeWindow::index_of(const LedgerComputeEntry* e) const {
  if (pages_ == nullptr) return -1;
  const auto* base = reinterpret_cast<const uint8_t*>(pages_);
  const auto* at = reinterpret_cast<const uint8_t*>(e);
  if (at < base || at >= base + sizeof(LedgerUsageHead) * kLedgerMaxSlices) return -1;
  const size_t off = static_cast<size_t>(at - base);
  const int slice = static_cast<int>(off / sizeof(LedgerUsageHead));
  const size_t in = off % sizeof(LedgerUsageHead) - offsetof(LedgerUsageHead, compute);
  return slice * kLedgerSliceComputeEntries + static_cast<int>(in / sizeof(LedgerComputeEntry));
}

void ComputeWindow::MapOwnSlice(int fd, uint64_t generation) {
  // MAP_FIXED replaces the page atomically: readers see the old page or the new, never a hole.
  void* want = &pages_[own_slice_];
  void* p = mmap(want, sizeof(LedgerUsageHead), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) return;
  if (probe_[own_slice_] >= 0) close(probe_[own_slice_]);
  probe_[own_slice_] = OpenProbe(fd);
  generation_[own_slice_] = generation;
  mapped_[own_slice_] = true;
}

void ComputeWindow::AdoptSlice(int slice, int fd, uint64_t generation) {
  const int probe = OpenProbe(fd);
  if (probe < 0) return;
  if (probe_[slice] >= 0) close(probe_[slice]);
  probe_[slice] = probe;
  generation_[slice] = generation;
  mapped_[slice] = true;
  CopySlice(slice);
}

void ComputeWindow::StorePage(int slice, const LedgerUsageHead* from) {
  // Word by word with atomic stores: launching threads load these words concurrently.
  auto* to = reinterpret_cast<uint64_t*>(&pages_[slice]);
  const auto* src = reinterpret_cast<const uint64_t*>(from);
  for (size_t i = 0; i < sizeof(LedgerUsageHead) / sizeof(uint64_t); ++i) {
    const uint64_t v = from == nullptr ? 0 : src[i];
    if (__atomic_load_n(&to[i], __ATOMIC_RELAXED) != v) __atomic_store_n(&to[i], v, __ATOMIC_RELAXED);
  }
}

void ComputeWindow::CopySlice(int slice) {
  // A short read is a file its owner shrank: its entries count as gone until it is whole
  // again (the same for a header that no longer names this slice and generation).
  const bool whole = pread(probe_[slice], staging_, sizeof(LedgerUsageHead), 0) == static_cast<ssize_t>(sizeof(LedgerUsageHead)) &&
                     UsageCompatible(staging_, slice, generation_[slice]);
  StorePage(slice, whole ? staging_ : nullptr);
}

void ComputeWindow::ClearSlice(int slice) {
  StorePage(slice, nullptr);
  if (probe_[slice] >= 0) close(probe_[slice]);
  probe_[slice] = -1;
  mapped_[slice] = false;
}

void ComputeWindow::Refresh() {
  if (pages_ == nullptr || ledger_ == nullptr || ledger_->dir_fd() < 0) return;
  std::lock_guard<std::mutex> lock(refresh_mu_);
  const LedgerLimits* l = ledger_->limits();
  for (int s = 0; s < kLedgerMaxSlices; ++s) {
    if (s == own_slice_) continue;
    const LedgerSlice& e = l->slices[s];
    const bool ready = StateOf(e.state.load(kAcq)) == EntryState::kReady;
    const uint64_t generation = e.generation.load(kAcq);
    if (!ready) {
      if (mapped_[s]) ClearSlice(s);
      continue;
    }
    if (generation_[s] == generation) {  // adopted (copied again here), or tried and refused
      if (mapped_[s]) CopySlice(s);
      continue;
    }
    if (mapped_[s]) ClearSlice(s);
    generation_[s] = generation;
    char name[32];
    UsageName(s, name, sizeof name);
    const int fd = openat(ledger_->dir_fd(), name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      generation_[s] = 0;  // not there yet: look again next time
      continue;
    }
    struct stat st, dst;
    const bool ok = fstat(fd, &st) == 0 && fstat(ledger_->dir_fd(), &dst) == 0 &&
                    UntrustedFile(st, static_cast<uid_t>(e.owner_uid), dst.st_uid, sizeof(LedgerUsage)) == nullptr;
    if (ok) AdoptSlice(s, fd, generation);
    close(fd);  // the probe keeps the inode
  }
}

void ComputeWindow::Sync(uint64_t slices) {
  if (pages_ == nullptr) return;
  std::lock_guard<std::mutex> lock(refresh_mu_);
  for (int s = 0; slices != 0 && s < kLedgerMaxSlices; ++s, slices >>= 1) {
    if ((slices & 1) != 0 && s != own_slice_ && mapped_[s]) CopySlice(s);
  }
}

bool ComputeWindow::OwnerAlive(int index) const {
  if (pages_ == nullptr || index < 0 || index >= kLedgerMaxComputeEntries) return false;
  const LedgerComputeEntry& e = entry(index);
  const uint64_t word = e.state.load(kSeq);
  if (StateOf(word) != EntryState::kAlive) return false;
  return gslice::OwnerAlive(probe_[ComputeSliceOf(index)], LedgerComputeLockByte(ComputeEntryOf(index)), PidOf(word),
                            e.pid_ns.load(kSeq), e.start_time.load(kSeq), SelfPidNamespace());
}

LedgerComputeEntry* ComputeWindow::ClaimEntry(const uint8_t uuid[16], SliceClass cls, uint32_t share_word) {
  if (pages_ == nullptr || own_slice_ < 0) return nullptr;
  const uint32_t pid = static_cast<uint32_t>(getpid());
  const int first = own_slice_ * kLedgerSliceComputeEntries;
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = first; i < first + kLedgerSliceComputeEntries; ++i) {
      LedgerComputeEntry& e = entry(i);
      uint64_t s = e.state.load(kAcq);
      if (StateOf(s) != EntryState::kFree) {
        // Second pass: free entries whose owner died.
        if (pass == 1 && StateOf(s) == EntryState::kAlive && !OwnerAlive(i)) {
          e.state.compare_exchange_strong(s, PackState(EntryState::kFree, 0));
          s = e.state.load(kAcq);
        }
        if (StateOf(s) != EntryState::kFree) continue;
      }
      if (!e.state.compare_exchange_strong(s, PackState(EntryState::kClaiming, pid))) continue;
      if (!ledger_->AcquireComputeEntry(i)) {  // its lock byte is still held elsewhere
        e.state.store(PackState(EntryState::kFree, 0), std::memory_order_release);
        continue;
      }
      memcpy(e.uuid, uuid, 16);
      e.slice_class.store(static_cast<uint32_t>(cls), std::memory_order_relaxed);
      e.share_permille.store(share_word, std::memory_order_relaxed);
      e.active_until_ns.store(0, std::memory_order_relaxed);
      e.inflight_until_ns.store(0, std::memory_order_relaxed);
      e.vtime_ns.store(0, std::memory_order_relaxed);
      e.launches.store(0, std::memory_order_relaxed);
      e.cap_slice.store(0, std::memory_order_relaxed);
      e.kernel_signal.store(0, std::memory_order_relaxed);
      e.state.store(PackState(EntryState::kAlive, pid), std::memory_order_release);
      return &e;
    }
  }
  return nullptr;
}

void ComputeWindow::ReleaseEntry(LedgerComputeEntry* e) {
  const int index = e == nullptr ? -1 : index_of(e);
  if (index < 0 || !writable(index)) return;
  e->inflight_until_ns.store(0, std::memory_order_relaxed);
  e->active_until_ns.store(0, std::memory_order_relaxed);
  ledger_->ReleaseComputeEntry(index);
  e->state.store(PackState(EntryState::kFree, 0), std::memory_order_release);
}

bool ComputeWindow::OwnerAliveElseFree(int index) {
  if (pages_ == nullptr || index < 0 || index >= kLedgerMaxComputeEntries) return false;
  LedgerComputeEntry& e = entry(index);
  // The word judged is the word freed: a new owner that claimed the entry meanwhile keeps it.
  uint64_t s = e.state.load(kAcq);
  if (StateOf(s) != EntryState::kAlive) return false;
  if (OwnerAlive(index)) return true;
  if (writable(index)) e.state.compare_exchange_strong(s, PackState(EntryState::kFree, 0));
  return false;
}

}  // namespace gslice

namespace gslice {

LedgerError OpenSliceLedger(Ledger* ledger, const char* path, const char* own_usage_path, const char* name,
                            SliceClass cls, uint32_t flags, bool create_slice, int* slice, char* note,
                            size_t note_size, uint32_t protect_permille) {
  char why[512] = {};
  *slice = -1;
  // The node ledger: created only by its rightful writer (root); anyone else finding it
  // missing must not squat its name.
  LedgerError e = ledger->Open(path, 2000, /*create=*/geteuid() == 0);
  if (e == LedgerError::kOk) {
    ledger->SetOwnUsagePath(own_usage_path);
    int s = ledger->FindSlice(name);
    if (s < 0 && ledger->writable() && create_slice) {
      e = ledger->FindOrCreateSlice(name, cls, flags, &s, kLedgerOwnerCaller, protect_permille);
    }
    if (s >= 0) e = ledger->MapUsage(s);
    if (e == LedgerError::kOk && s >= 0 && (ledger->usage_writable(s) || !create_slice)) {
      *slice = s;
      return LedgerError::kOk;
    }
    if (e == LedgerError::kOk && s >= 0) {
      snprintf(why, sizeof why, "slice %s in %s belongs to uid %u", name, path, ledger->limits()->slices[s].owner_uid);
    } else if (e == LedgerError::kOk) {
      snprintf(why, sizeof why, "slice %s is not in %s (gsliced creates the slices there)", name, path);
    } else {
      snprintf(why, sizeof why, "%s: %s", LedgerErrorString(e), ledger->detail());
    }
  } else {
    snprintf(why, sizeof why, "%s", ledger->detail());
  }
  char own[256];
  PerUserLedgerPath(path, own, sizeof own);
  e = ledger->Open(own, 2000, /*create=*/create_slice);
  int s = -1;
  if (e == LedgerError::kOk) {
    s = ledger->FindSlice(name);
    if (s < 0 && create_slice) e = ledger->FindOrCreateSlice(name, cls, flags, &s, kLedgerOwnerCaller, protect_permille);
    else if (s < 0) e = LedgerError::kNoSliceEntry;
  }
  if (e == LedgerError::kOk) e = ledger->MapUsage(s);
  if (e == LedgerError::kOk && create_slice && !ledger->usage_writable(s)) e = LedgerError::kNotPermitted;
  if (note != nullptr && note_size > 0) {
    if (e == LedgerError::kOk) snprintf(note, note_size, "%s; using the per-user ledger %s", why, own);
    else snprintf(note, note_size, "%s; the per-user ledger %s: %s: %s", why, own, LedgerErrorString(e), ledger->detail());
  }
  if (e != LedgerError::kOk) return e;
  *slice = s;
  return LedgerError::kOk;
}

}  // namespace gslice
