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

namespace gslice {

SuspendBoard::~SuspendBoard() {
  if (layout_ != nullptr) munmap(layout_, sizeof(SuspendBoardLayout));
}

bool SuspendBoard::Open(const char* path) {
  if (layout_ != nullptr) return true;
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
  close(fd);
  if (p == MAP_FAILED) return false;
  auto* l = static_cast<SuspendBoardLayout*>(p);
  if (l->header.initialised.load(std::memory_order_acquire) == 0) {
    l->header.magic = kSuspendBoardMagic;
    l->header.version = kSuspendBoardVersion;
    l->header.size = sizeof(SuspendBoardLayout);
    l->header.initialised.store(1, std::memory_order_release);
  } else if (l->header.magic != kSuspendBoardMagic || l->header.version != kSuspendBoardVersion ||
             l->header.size != sizeof(SuspendBoardLayout)) {
    munmap(p, sizeof(SuspendBoardLayout));
    errno = EPROTO;
    return false;
  }
  layout_ = l;
  return true;
}

SuspendBoardEntry* SuspendBoard::Claim(uint32_t pid, uint64_t start_time) {
  if (layout_ == nullptr || pid == 0) return nullptr;
  SuspendBoardEntry* mine = Find(pid);
  if (mine != nullptr && mine->start_time.load(std::memory_order_acquire) == start_time) return mine;
  // Start the probe at a pid-dependent place so concurrent claimers rarely collide.
  const uint32_t start = (pid * 2654435761u) % kSuspendBoardEntries;
  for (int i = 0; i < kSuspendBoardEntries; ++i) {
    // An entry left by an earlier process with the same pid is taken over first.
    SuspendBoardEntry& e = mine != nullptr && i == 0 ? *mine : layout_->entries[(start + i) % kSuspendBoardEntries];
    uint64_t owner = e.owner.load(std::memory_order_acquire);
    bool reusable = owner == 0 || &e == mine;
    if (!reusable) {
      const uint64_t t = e.start_time.load(std::memory_order_acquire);
      reusable = owner != pid && t != 0 && !ProcessAlive(static_cast<uint32_t>(owner), t);
    }
    if (!reusable) continue;
    if (!e.owner.compare_exchange_strong(owner, pid, std::memory_order_acq_rel)) continue;
    e.start_time.store(0, std::memory_order_relaxed);
    e.gate.store(kGateOpen, std::memory_order_relaxed);
    e.resume_request.store(0, std::memory_order_relaxed);
    e.activity.store(0, std::memory_order_relaxed);
    e.mem_request_seq.store(0, std::memory_order_relaxed);
    e.mem_request_bytes.store(0, std::memory_order_relaxed);
    std::memset(e.mem_request_gpu, 0, sizeof(e.mem_request_gpu));
    e.mem_reply_seq.store(0, std::memory_order_relaxed);
    e.mem_reply.store(0, std::memory_order_relaxed);
    std::memset(e.move_to_gpu, 0, sizeof(e.move_to_gpu));
    e.move_seq.store(0, std::memory_order_relaxed);
    e.move_reply_seq.store(0, std::memory_order_relaxed);
    e.move_reply.store(0, std::memory_order_relaxed);
    e.start_time.store(start_time, std::memory_order_release);
    return &e;
  }
  return nullptr;
}

SuspendBoardEntry* SuspendBoard::Find(uint32_t pid) const {
  if (layout_ == nullptr || pid == 0) return nullptr;
  for (auto& e : layout_->entries) {
    if (e.owner.load(std::memory_order_acquire) == pid) return &e;
  }
  return nullptr;
}

int SuspendBoard::Reap() {
  if (layout_ == nullptr) return 0;
  int n = 0;
  for (auto& e : layout_->entries) {
    uint64_t owner = e.owner.load(std::memory_order_acquire);
    if (owner == 0) continue;
    const uint64_t t = e.start_time.load(std::memory_order_acquire);
    if (t == 0) continue;  // being claimed
    if (!ProcessAlive(static_cast<uint32_t>(owner), t) &&
        e.owner.compare_exchange_strong(owner, 0, std::memory_order_acq_rel)) {
      ++n;
    }
  }
  return n;
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
