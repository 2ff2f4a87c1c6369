#include "gslice/owner_lock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "gslice/clock.h"
#include "gslice/ledger.h"  // ProcessAlive

namespace gslice {
namespace {

struct flock ByteLock(short type, int64_t offset) {
  struct flock fl{};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(offset);
  fl.l_len = 1;
  return fl;
}

}  // namespace

bool LockOwnerByte(int fd, int64_t offset) {
  if (fd < 0) return true;
  struct flock fl = ByteLock(F_WRLCK, offset);
  return fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

void UnlockOwnerByte(int fd, int64_t offset) {
  if (fd < 0) return;
  struct flock fl = ByteLock(F_UNLCK, offset);
  fcntl(fd, F_OFD_SETLK, &fl);
}

bool OwnerByteLocked(int probe_fd, int64_t offset) {
  if (probe_fd < 0) return true;
  struct flock fl = ByteLock(F_WRLCK, offset);
  if (fcntl(probe_fd, F_OFD_GETLK, &fl) != 0) return true;  // cannot tell: assume alive
  return fl.l_type != F_UNLCK;
}

int OpenOwnerProbe(const char* path, int fd) {
  struct stat st, pst;
  if (fstat(fd, &st) != 0) return -1;
  int probe = open(path, O_RDWR | O_CLOEXEC);
  if (probe < 0) return -1;
  struct flock fl = ByteLock(F_WRLCK, 0);
  if (fstat(probe, &pst) != 0 || pst.st_ino != st.st_ino || pst.st_dev != st.st_dev ||
      fcntl(probe, F_OFD_GETLK, &fl) != 0) {  // another file under the name, or no OFD locks
    const int saved = errno;
    close(probe);
    errno = saved != 0 ? saved : ESTALE;
    return -1;
  }
  return probe;
}

bool OwnerAlive(int probe_fd, int64_t lock_byte, uint32_t pid, uint64_t pid_ns, uint64_t start_time,
                uint64_t self_ns) {
  if (pid == 0) return false;
  // In the owner's namespace the pid speaks too: it catches a dead owner whose lock a forked
  // child still holds. Elsewhere the pid means nothing and the lock alone decides.
  if (pid_ns != 0 && pid_ns == self_ns && !ProcessAlive(pid, start_time)) return false;
  return OwnerByteLocked(probe_fd, lock_byte);
}

uint64_t OwnerJitter() {
  static thread_local uint64_t x = 0;
  if (x == 0) {
    x = static_cast<uint64_t>(MonotonicNs()) ^ (static_cast<uint64_t>(getpid()) << 20) ^ 0x9e3779b97f4a7c15ull;
  }
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

uint32_t OwnerClaimTag() { return static_cast<uint32_t>(OwnerJitter() % 0xffffffu) + 1; }

bool ClaimWithinGrace(std::atomic<int64_t>& claimed_ns) {
  int64_t at = claimed_ns.load(std::memory_order_seq_cst);
  const int64_t now = MonotonicNs();
  if (at == 0) {
    claimed_ns.compare_exchange_strong(at, now, std::memory_order_seq_cst);
    return true;
  }
  return now - at < kClaimGraceNs;
}

}  // namespace gslice
