#include "gslice/suspend_board.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gslice/ledger.h"
#include "gslice/owner_lock.h"
#include "gslice/pid_namespace.h"

namespace gslice {

namespace {
constexpr auto kAcq = std::memory_order_acquire;
constexpr auto kRel = std::memory_order_release;
constexpr auto kRlx = std::memory_order_relaxed;
constexpr auto kSeq = std::memory_order_seq_cst;

void ResetFields(SuspendBoardEntry& e) {
  e.gate.store(kGateOpen, kRlx);
  e.resume_request.store(0, kRlx);
  e.activity.store(0, kRlx);
  e.mem_request_seq.store(0, kRlx);
  e.mem_request_bytes.store(0, kRlx);
  std::memset(e.mem_request_gpu, 0, sizeof(e.mem_request_gpu));
  e.mem_reply_seq.store(0, kRlx);
  e.mem_reply.store(0, kRlx);
  std::memset(e.move_to_gpu, 0, sizeof(e.move_to_gpu));
  e.move_seq.store(0, kRlx);
  e.move_reply_seq.store(0, kRlx);
  e.move_reply.store(0, kRlx);
}
}  // namespace

SuspendBoard::~SuspendBoard() { Close(); }

void SuspendBoard::Close() {
  if (layout_ != nullptr) munmap(layout_, sizeof(SuspendBoardLayout));
  if (fd_ >= 0) close(fd_);  // drops every lock byte this board holds
  if (probe_fd_ >= 0) close(probe_fd_);
  layout_ = nullptr;
  fd_ = probe_fd_ = -1;
  service_byte_held_ = false;
}

bool SuspendBoard::Open(const char* path) {
  if (layout_ != nullptr) return true;
  if (path == nullptr || *path == '\0') {
    errno = EINVAL;
    return false;
  }
  const mode_t old = umask(0);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  umask(old);
  if (fd < 0) return false;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return false;
  }
  // The file starts as zeros (every entry free); whoever grows it writes the header. Growing
  // twice is harmless: ftruncate to the same size keeps the contents.
  if (static_cast<size_t>(st.st_size) < sizeof(SuspendBoardLayout) &&
      ftruncate(fd, sizeof(SuspendBoardLayout)) != 0) {
    close(fd);
    return false;
  }
  void* p = mmap(nullptr, sizeof(SuspendBoardLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return false;
  }
  auto* l = static_cast<SuspendBoardLayout*>(p);
  if (l->header.initialised.load(kAcq) == 0) {
    l->header.magic = kSuspendBoardMagic;
    l->header.version = kSuspendBoardVersion;
    l->header.size = sizeof(SuspendBoardLayout);
    l->header.initialised.store(1, kRel);
  } else if (l->header.magic != kSuspendBoardMagic || l->header.version != kSuspendBoardVersion ||
             l->header.size != sizeof(SuspendBoardLayout)) {
    munmap(p, sizeof(SuspendBoardLayout));
    close(fd);
    errno = EPROTO;  // another layout version: restart what maps it, or remove the file
    return false;
  }
  // The file stays open (O_CLOEXEC) for the owners' lock bytes; the probe sees every lock.
  const int probe = OpenOwnerProbe(path, fd);
  if (probe < 0) {
    const int saved = errno;
    munmap(p, sizeof(SuspendBoardLayout));
    close(fd);
    errno = saved;
    return false;
  }
  layout_ = l;
  fd_ = fd;
  probe_fd_ = probe;
  return true;
}

bool SuspendBoard::OwnerAlive(const SuspendBoardEntry& e) const {
  if (layout_ == nullptr) return false;
  const uint64_t word = e.owner.load(kSeq);
  if (word == 0) return false;
  const uint32_t pid = BoardOwnerPid(word);
  const uint64_t ns = e.pid_ns.load(kSeq);
  const uint64_t self_ns = SelfPidNamespace();
  const int64_t byte = SuspendBoardEntryLockByte(IndexOf(e));
  if (BoardOwnerLive(word)) return gslice::OwnerAlive(probe_fd_, byte, pid, ns, e.start_time.load(kSeq), self_ns);
  // Being claimed: the claimer takes the byte right after its CAS; until then, the claim's age
  // decides.
  if (ns != 0 && ns == self_ns && !ProcessAlive(pid, 0)) return false;
  if (OwnerByteLocked(probe_fd_, byte)) return true;
  return ClaimWithinGrace(const_cast<std::atomic<int64_t>&>(e.claimed_ns));
}

SuspendBoardEntry* SuspendBoard::Claim(uint32_t pid, uint64_t start_time) {
  if (layout_ == nullptr || pid == 0) return nullptr;
  const uint64_t self_ns = SelfPidNamespace();
  SuspendBoardEntry* mine = Find(self_ns, pid);
  if (mine != nullptr && mine->start_time.load(kAcq) == start_time) return mine;
  // Start the probe at a pid-dependent place so concurrent claimers rarely collide.
  const uint32_t start = (pid * 2654435761u) % kSuspendBoardEntries;
  for (int i = 0; i < kSuspendBoardEntries; ++i) {
    // An entry left by an earlier process with the same pid is taken over first.
    SuspendBoardEntry& e = mine != nullptr && i == 0 ? *mine : layout_->entries[(start + i) % kSuspendBoardEntries];
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
    const int64_t byte = SuspendBoardEntryLockByte(IndexOf(e));
    if (!LockOwnerByte(fd_, byte)) {
      // Another open file still holds the byte: a forked child of a dead earlier owner. The
      // byte frees when that child exits or execs.
      uint64_t expected = claim;
      e.owner.compare_exchange_strong(expected, 0, kSeq);
      continue;
    }
    ResetFields(e);
    e.start_time.store(start_time, kSeq);
    uint64_t expected = claim;
    if (!e.owner.compare_exchange_strong(expected, BoardOwnerWord(pid, tag), kSeq)) {
      // Reaped as a stale claim (we stalled past kClaimGraceNs before locking).
      UnlockOwnerByte(fd_, byte);
      continue;
    }
    return &e;
  }
  return nullptr;
}

SuspendBoardEntry* SuspendBoard::Find(uint64_t pid_ns, uint32_t pid) const {
  if (layout_ == nullptr || pid == 0) return nullptr;
  for (auto& e : layout_->entries) {
    const uint64_t word = e.owner.load(kAcq);
    if (BoardOwnerLive(word) && BoardOwnerPid(word) == pid && e.pid_ns.load(kAcq) == pid_ns) return &e;
  }
  return nullptr;
}

int SuspendBoard::Reap() {
  if (layout_ == nullptr) return 0;
  int n = 0;
  for (auto& e : layout_->entries) {
    uint64_t owner = e.owner.load(kSeq);
    if (owner == 0 || OwnerAlive(e)) continue;
    // The word read before judging: the CAS fails if the entry changed owner since.
    if (e.owner.compare_exchange_strong(owner, 0, kSeq)) ++n;
  }
  return n;
}

void SuspendBoard::SetService() {
  if (layout_ == nullptr) return;
  SuspendBoardHeader& h = layout_->header;
  h.service_pid_ns.store(SelfPidNamespace(), kSeq);
  service_byte_held_ = LockOwnerByte(fd_, kSuspendBoardServiceLockByte);
  h.service_pid.store(static_cast<uint64_t>(getpid()), kSeq);
}

void SuspendBoard::ClearService() {
  if (layout_ == nullptr) return;
  uint64_t me = static_cast<uint64_t>(getpid());
  layout_->header.service_pid.compare_exchange_strong(me, 0, kSeq);
  if (service_byte_held_) UnlockOwnerByte(fd_, kSuspendBoardServiceLockByte);
  service_byte_held_ = false;
}

bool SuspendBoard::ServiceAlive() const {
  if (layout_ == nullptr) return false;
  const SuspendBoardHeader& h = layout_->header;
  const uint64_t pid = h.service_pid.load(kSeq);
  if (pid == 0) return false;
  return gslice::OwnerAlive(probe_fd_, kSuspendBoardServiceLockByte, static_cast<uint32_t>(pid),
                            h.service_pid_ns.load(kSeq), 0, SelfPidNamespace());
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms) {
  timespec ts{};
  timespec* tp = nullptr;
  if (timeout_ms >= 0) {
    ts.tv_sec = timeout_ms / 1000;
    ts.tv_nsec = static_cast<long>(timeout_ms % 1000) * 1'000'000;
    tp = &ts;
  }
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, tp, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void RingDoorbell(SuspendBoardLayout* board) {
  if (board == nullptr) return;
  board->header.doorbell.fetch_add(1, std::memory_order_acq_rel);
  FutexWakeAll(&board->header.doorbell);
}

}  // namespace gslice
