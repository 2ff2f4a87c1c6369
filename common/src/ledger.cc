#include "gslice/ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <new>

#include "gslice/owner_lock.h"
#include "gslice/pid_namespace.h"

namespace gslice {
namespace {

constexpr auto kSeq = std::memory_order_seq_cst;
constexpr auto kAcq = std::memory_order_acquire;
constexpr auto kRel = std::memory_order_release;
constexpr auto kRlx = std::memory_order_relaxed;

void SleepNs(int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  nanosleep(&ts, nullptr);
}

uint64_t Jitter() { return OwnerJitter(); }

bool NameEquals(const char* stored, const char* name) {
  return strncmp(stored, name, kLedgerNameSize) == 0;
}

void InitHeader(LedgerLayout* l) {
  LedgerHeader& h = l->header;
  h.magic = kLedgerMagic;
  h.version = kLedgerVersion;
  h.size = sizeof(LedgerLayout);
  h.max_gpus = kLedgerMaxGpus;
  h.max_slices = kLedgerMaxSlices;
  h.max_slots = kLedgerMaxSlots;
  // The rest of the file is zero (ftruncate / anonymous mapping): every entry FREE.
  h.initialised.store(1, kRel);
}

LedgerError Validate(const LedgerLayout* l) {
  const LedgerHeader& h = l->header;
  if (h.magic != kLedgerMagic || h.version != kLedgerVersion || h.size != sizeof(LedgerLayout) ||
      h.max_gpus != kLedgerMaxGpus || h.max_slices != kLedgerMaxSlices ||
      h.max_slots != kLedgerMaxSlots) {
    return LedgerError::kIncompatible;
  }
  return LedgerError::kOk;
}

void* MapFd(int fd) {
  void* p = mmap(nullptr, sizeof(LedgerLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

const char* LedgerErrorString(LedgerError e) {
  switch (e) {
    case LedgerError::kOk: return "ok";
    case LedgerError::kOpenFailed: return "cannot open or map the ledger file";
    case LedgerError::kIncompatible: return "ledger file has another layout version";
    case LedgerError::kInitTimeout: return "ledger file was never initialised";
    case LedgerError::kNoSliceEntry: return "no free slice entry in the ledger";
    case LedgerError::kNoGpuEntry: return "slice has no free GPU entry";
    case LedgerError::kNoProcessSlot: return "slice has no free process slot";
    case LedgerError::kBadArgument: return "bad argument";
  }
  return "unknown ledger error";
}

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

namespace {
// Reads /proc/<pid>/stat; returns false when missing. state and start_time are set.
bool ReadStat(uint32_t pid, char* state, uint64_t* start_time) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%u/stat", pid);
  return ReadProcStat(path, state, start_time);
}

// A random claim tag for process slot words (bits 8..31), never 0.
uint32_t ClaimTag() { return OwnerClaimTag(); }
}  // namespace

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

Ledger::~Ledger() { Close(); }

void Ledger::Close() {
  if (layout_ != nullptr) munmap(layout_, map_size_);
  if (fd_ >= 0) close(fd_);  // drops every lock byte this Ledger holds
  if (probe_fd_ >= 0) close(probe_fd_);
  layout_ = nullptr;
  map_size_ = 0;
  fd_ = probe_fd_ = -1;
}

Ledger::Ledger(Ledger&& o) noexcept
    : layout_(o.layout_), map_size_(o.map_size_), fd_(o.fd_), probe_fd_(o.probe_fd_) {
  o.layout_ = nullptr;
  o.map_size_ = 0;
  o.fd_ = o.probe_fd_ = -1;
}

Ledger& Ledger::operator=(Ledger&& o) noexcept {
  if (this != &o) {
    Close();
    layout_ = o.layout_;
    map_size_ = o.map_size_;
    fd_ = o.fd_;
    probe_fd_ = o.probe_fd_;
    o.layout_ = nullptr;
    o.map_size_ = 0;
    o.fd_ = o.probe_fd_ = -1;
  }
  return *this;
}

// ---- liveness lock bytes ---------------------------------------------------------------
//
// Open-file-description locks (F_OFD_*) belong to the open file, not to a process: the
// kernel drops them when the last descriptor of it closes, which a killed process's exit
// does, whatever pid namespace it lives in. They conflict between different open files even
// within one process, so the probe descriptor (a second open of the same inode) sees the
// locks of fd_ too. A forked child that keeps the descriptor keeps the locks (hence the
// same-namespace pid check in OwnerAlive), until it exits or execs (O_CLOEXEC).

bool Ledger::LockByte(int64_t offset) { return LockOwnerByte(fd_, offset); }

void Ledger::UnlockByte(int64_t offset) { UnlockOwnerByte(fd_, offset); }

bool Ledger::ByteLocked(int64_t offset) const { return OwnerByteLocked(probe_fd_, offset); }

bool Ledger::OwnerAlive(int64_t lock_byte, uint32_t pid, uint64_t pid_ns, uint64_t start_time,
                        uint64_t self_ns) const {
  if (fd_ < 0) return pid != 0 && ProcessAlive(pid, start_time);  // private ledger: one process, pids
  return gslice::OwnerAlive(probe_fd_, lock_byte, pid, pid_ns, start_time, self_ns);
}

bool Ledger::SlotOwnerAlive(int slice, int slot, uint64_t word, uint64_t self_ns) const {
  const LedgerProcess& p = layout_->slices[slice].slots[slot];
  const EntryState st = StateOf(word);
  const uint32_t pid = PidOf(word);
  const uint64_t ns = p.pid_ns.load(kSeq);
  const int64_t byte = LedgerSlotLockByte(slice, slot);
  switch (st) {
    case EntryState::kAlive:
      return OwnerAlive(byte, pid, ns, p.start_time.load(kSeq), self_ns);
    case EntryState::kReaping:
      return OwnerAlive(byte, pid, ns, 0, self_ns);
    case EntryState::kClaiming: {
      // The claimer takes the byte right after its CAS: until then, the claim's age decides.
      if (fd_ < 0 || (ns != 0 && ns == self_ns)) {
        if (!ProcessAlive(pid, 0)) return false;
        if (fd_ < 0) return true;
      }
      if (ByteLocked(byte)) return true;
      return ClaimWithinGrace(const_cast<std::atomic<int64_t>&>(p.claimed_ns));
    }
    default:
      return false;
  }
}

bool Ledger::SlotOwnerAlive(int slice, int slot) const {
  if (layout_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices || slot < 0 || slot >= kLedgerMaxSlots) return false;
  return SlotOwnerAlive(slice, slot, layout_->slices[slice].slots[slot].state.load(kSeq), SelfPidNamespace());
}

bool Ledger::AcquireComputeEntry(int entry) {
  if (layout_ == nullptr || entry < 0 || entry >= kLedgerMaxComputeEntries) return false;
  LedgerComputeEntry& e = layout_->header.compute[entry];
  e.pid_ns.store(SelfPidNamespace(), kSeq);
  e.start_time.store(ProcessStartTime(static_cast<uint32_t>(getpid())), kSeq);
  return LockByte(LedgerComputeLockByte(entry));
}

void Ledger::ReleaseComputeEntry(int entry) {
  if (layout_ == nullptr || entry < 0 || entry >= kLedgerMaxComputeEntries) return;
  UnlockByte(LedgerComputeLockByte(entry));
}

bool Ledger::ComputeOwnerAlive(int entry) const {
  if (layout_ == nullptr || entry < 0 || entry >= kLedgerMaxComputeEntries) return false;
  const LedgerComputeEntry& e = layout_->header.compute[entry];
  const uint64_t word = e.state.load(kSeq);
  if (StateOf(word) != EntryState::kAlive) return false;
  return OwnerAlive(LedgerComputeLockByte(entry), PidOf(word), e.pid_ns.load(kSeq), e.start_time.load(kSeq),
                    SelfPidNamespace());
}

LedgerError Ledger::OpenPrivate() {
  void* p = mmap(nullptr, sizeof(LedgerLayout), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return LedgerError::kOpenFailed;
  Close();
  layout_ = static_cast<LedgerLayout*>(p);
  map_size_ = sizeof(LedgerLayout);
  InitHeader(layout_);
  return LedgerError::kOk;
}

LedgerError Ledger::Open(const char* path, int init_timeout_ms) {
  if (path == nullptr || path[0] == '\0') return LedgerError::kBadArgument;
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return LedgerError::kOpenFailed;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return LedgerError::kOpenFailed;
  }
  auto* l = static_cast<size_t>(st.st_size) == sizeof(LedgerLayout) ? static_cast<LedgerLayout*>(MapFd(fd)) : nullptr;
  if (l == nullptr || l->header.initialised.load(kAcq) != 1) {
    // Not (yet) initialised: whoever holds the file's exclusive flock sizes and initialises
    // it. The kernel drops the lock of a process killed half-way, and initialisation is
    // idempotent (a zero-filled file plus the header), so the next holder simply finishes it.
    const int64_t deadline = MonotonicNs() + static_cast<int64_t>(init_timeout_ms) * 1'000'000;
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (MonotonicNs() > deadline) {
        if (l != nullptr) munmap(l, sizeof(LedgerLayout));
        close(fd);
        return LedgerError::kInitTimeout;
      }
      SleepNs(200'000);
    }
    LedgerError e = LedgerError::kOk;
    if (fstat(fd, &st) != 0) {
      e = LedgerError::kOpenFailed;
    } else if (st.st_size == 0) {
      fchmod(fd, 0666);  // other users' processes join the same ledger
      if (ftruncate(fd, static_cast<off_t>(sizeof(LedgerLayout))) != 0) e = LedgerError::kOpenFailed;
    } else if (static_cast<size_t>(st.st_size) != sizeof(LedgerLayout)) {
      e = LedgerError::kIncompatible;  // another layout's file: never touched
    }
    if (e == LedgerError::kOk && l == nullptr) {
      l = static_cast<LedgerLayout*>(MapFd(fd));
      if (l == nullptr) e = LedgerError::kOpenFailed;
    }
    if (e == LedgerError::kOk && l->header.initialised.load(kAcq) != 1) InitHeader(l);
    flock(fd, LOCK_UN);
    if (e != LedgerError::kOk) {
      if (l != nullptr) munmap(l, sizeof(LedgerLayout));
      close(fd);
      return e;
    }
  }
  LedgerError v = Validate(l);
  // The probe: a second open file of the same inode, through which F_OFD_GETLK sees the
  // locks of every other open file, this process's fd included.
  int probe = -1;
  if (v == LedgerError::kOk) {
    probe = OpenOwnerProbe(path, fd);
    if (probe < 0) v = LedgerError::kOpenFailed;
  }
  if (v != LedgerError::kOk) {
    if (probe >= 0) close(probe);
    munmap(l, sizeof(LedgerLayout));
    close(fd);
    return v;
  }
  Close();
  layout_ = l;
  map_size_ = sizeof(LedgerLayout);
  fd_ = fd;
  probe_fd_ = probe;
  return LedgerError::kOk;
}

// The create lock: a pid-stamped word plus its lock byte. The holder wins the word's CAS,
// stamps the time and its namespace, then takes the byte (best effort: a holder that stole
// the word from a slow live holder finds the byte still held, which only makes others wait).
bool Ledger::LockCreate(bool* byte_held) {
  LedgerHeader& h = layout_->header;
  *byte_held = false;
  const uint64_t me = static_cast<uint64_t>(getpid());
  const uint64_t self_ns = SelfPidNamespace();
  const int64_t give_up = MonotonicNs() + 4 * kCreateLockStealNs;
  auto took = [&] {
    h.create_lock_ns.store(MonotonicNs(), kRel);
    h.create_lock_pid_ns.store(self_ns, kSeq);
    *byte_held = LockByte(kLedgerCreateLockByte);
    return true;
  };
  for (int spin = 0;; ++spin) {
    uint64_t expected = 0;
    if (h.create_lock.compare_exchange_strong(expected, me, kSeq)) return took();
    int64_t since = h.create_lock_ns.load(kAcq);
    const int64_t now = MonotonicNs();
    const uint32_t holder = static_cast<uint32_t>(expected);
    const uint64_t holder_ns = h.create_lock_pid_ns.load(kSeq);
    bool holder_dead = false;
    if (fd_ < 0 || (holder_ns != 0 && holder_ns == self_ns)) holder_dead = !ProcessAlive(holder, 0);
    if (!holder_dead && fd_ >= 0 && !ByteLocked(kLedgerCreateLockByte)) {
      // Not locked: a holder that has not taken the byte yet, or a dead one.
      if (since == 0) h.create_lock_ns.compare_exchange_strong(since, now, kSeq);  // start its clock
      else holder_dead = now - since > kClaimGraceNs;
    }
    bool held_too_long = since != 0 && now - since > kCreateLockStealNs;
    if ((holder_dead || held_too_long) && h.create_lock.compare_exchange_strong(expected, me, kSeq)) return took();
    if (MonotonicNs() > give_up) return false;
    if (spin < 50) sched_yield();
    else SleepNs(100'000 + static_cast<int64_t>(Jitter() % 100'000));
  }
}

void Ledger::UnlockCreate(bool byte_held) {
  LedgerHeader& h = layout_->header;
  uint64_t me = static_cast<uint64_t>(getpid());
  if (byte_held) UnlockByte(kLedgerCreateLockByte);
  h.create_lock_pid_ns.store(0, kSeq);
  h.create_lock_ns.store(0, kRel);
  h.create_lock.compare_exchange_strong(me, 0, kSeq);
}

int Ledger::FindSlice(const char* name) const {
  if (layout_ == nullptr || name == nullptr) return -1;
  for (int i = 0; i < kLedgerMaxSlices; ++i) {
    const LedgerSlice& s = layout_->slices[i];
    if (StateOf(s.state.load(kAcq)) == EntryState::kReady && NameEquals(s.name, name)) return i;
  }
  return -1;
}

bool Ledger::RecycleIfIdle(int slice) {
  // REQUIRES: the create lock. An ephemeral slice with no live process goes back to FREE.
  LedgerSlice& s = layout_->slices[slice];
  uint64_t word = s.state.load(kAcq);
  if (StateOf(word) != EntryState::kReady || (s.flags & kSliceEphemeral) == 0) return false;
  Reap(slice);
  uint32_t hw = s.slot_high_water.load(kAcq);
  for (uint32_t i = 0; i < hw; ++i) {
    if (StateOf(s.slots[i].state.load(kSeq)) != EntryState::kFree) return false;
  }
  // Attachers re-check the generation after taking a slot, so bumping it first makes a
  // racing attach back off.
  s.generation.fetch_add(1, kSeq);
  if (!s.state.compare_exchange_strong(word, PackState(EntryState::kFree, 0), kSeq)) return false;
  return true;
}

LedgerError Ledger::FindOrCreateSlice(const char* name, SliceClass cls, uint32_t flags, int* slice) {
  if (layout_ == nullptr || name == nullptr || name[0] == '\0' ||
      strlen(name) >= static_cast<size_t>(kLedgerNameSize)) {
    return LedgerError::kBadArgument;
  }
  int found = FindSlice(name);
  if (found >= 0) {
    *slice = found;
    return LedgerError::kOk;
  }
  bool byte_held = false;
  bool locked = LockCreate(&byte_held);  // if it cannot be had, go on without (duplicates are harmless for private slices)
  found = FindSlice(name);
  if (found < 0) {
    int free_entry = -1;
    for (int i = 0; i < kLedgerMaxSlices && free_entry < 0; ++i) {
      if (StateOf(layout_->slices[i].state.load(kAcq)) == EntryState::kFree) free_entry = i;
    }
    for (int i = 0; i < kLedgerMaxSlices && free_entry < 0; ++i) {
      if (RecycleIfIdle(i)) free_entry = i;
    }
    if (free_entry >= 0) {
      LedgerSlice& s = layout_->slices[free_entry];
      uint64_t expected = PackState(EntryState::kFree, 0);
      if (s.state.compare_exchange_strong(expected, PackState(EntryState::kClaiming, static_cast<uint32_t>(getpid())), kSeq)) {
        memset(s.name, 0, sizeof s.name);
        memcpy(s.name, name, strlen(name));
        s.slice_class = static_cast<uint32_t>(cls);
        s.flags = flags;
        s.slot_high_water.store(0, kRlx);
        s.last_reap_ns.store(0, kRlx);
        memset(s.reserved, 0, sizeof s.reserved);
        for (auto& t : s.cap_tat) t.store(0, kRlx);
        for (auto& g : s.gpus) {
          g.state.store(0, kRlx);
          memset(g.uuid, 0, sizeof g.uuid);
          g.limit.store(-1, kRlx);
        }
        for (auto& p : s.slots) {
          p.state.store(0, kRlx);
          p.start_time.store(0, kRlx);
          p.pid_ns.store(0, kRlx);
          p.claimed_ns.store(0, kRlx);
        }
        for (auto& row : s.used)
          for (auto& u : row) u.store(0, kRlx);
        s.state.store(PackState(EntryState::kReady, 0), kSeq);
        found = free_entry;
      }
    }
  }
  if (locked) UnlockCreate(byte_held);
  if (found < 0) {
    found = FindSlice(name);
    if (found < 0) return LedgerError::kNoSliceEntry;
  }
  *slice = found;
  return LedgerError::kOk;
}

int Ledger::FindGpu(int slice, const uint8_t uuid[16]) const {
  if (layout_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices) return -1;
  const LedgerSlice& s = layout_->slices[slice];
  for (int g = 0; g < kLedgerMaxGpus; ++g) {
    if (StateOf(s.gpus[g].state.load(kAcq)) == EntryState::kReady && memcmp(s.gpus[g].uuid, uuid, 16) == 0) return g;
  }
  return -1;
}

LedgerError Ledger::FindOrAddGpu(int slice, const uint8_t uuid[16], int64_t limit, int* gpu) {
  if (layout_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices) return LedgerError::kBadArgument;
  int g = FindGpu(slice, uuid);
  if (g >= 0) {
    *gpu = g;
    return LedgerError::kOk;
  }
  bool byte_held = false;
  bool locked = LockCreate(&byte_held);
  g = FindGpu(slice, uuid);
  if (g < 0) {
    LedgerSlice& s = layout_->slices[slice];
    for (int i = 0; i < kLedgerMaxGpus; ++i) {
      uint64_t expected = PackState(EntryState::kFree, 0);
      if (s.gpus[i].state.compare_exchange_strong(expected, PackState(EntryState::kClaiming, static_cast<uint32_t>(getpid())), kSeq)) {
        memcpy(s.gpus[i].uuid, uuid, 16);
        s.gpus[i].limit.store(limit, kSeq);
        for (auto& u : s.used[i]) u.store(0, kRlx);
        s.gpus[i].state.store(PackState(EntryState::kReady, 0), kSeq);
        g = i;
        break;
      }
    }
  }
  if (locked) UnlockCreate(byte_held);
  if (g < 0) return LedgerError::kNoGpuEntry;
  *gpu = g;
  return LedgerError::kOk;
}

LedgerError Ledger::Attach(int slice, uint32_t pid, uint64_t start_time, SliceHandle* out) {
  if (layout_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices || pid == 0) return LedgerError::kBadArgument;
  LedgerSlice& s = layout_->slices[slice];
  const uint64_t generation = s.generation.load(kSeq);
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
      if (!LockByte(LedgerSlotLockByte(slice, i))) {
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
        UnlockByte(LedgerSlotLockByte(slice, i));
        continue;
      }
      uint32_t hw = s.slot_high_water.load(kSeq);
      while (hw < static_cast<uint32_t>(i + 1) &&
             !s.slot_high_water.compare_exchange_weak(hw, static_cast<uint32_t>(i + 1), kSeq)) {
      }
      out->slice = slice;
      out->slot = i;
      out->generation = generation;
      out->word = alive;
      if (s.generation.load(kSeq) != generation || StateOf(s.state.load(kSeq)) != EntryState::kReady) {
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
  if (layout_ == nullptr || !h.valid()) return;
  LedgerSlice& s = layout_->slices[h.slice];
  LedgerProcess& p = s.slots[h.slot];
  uint64_t word = p.state.load(kSeq);
  if (h.word != 0 && word != h.word) return;  // reaped and taken by another owner: not ours to touch
  for (int g = 0; g < kLedgerMaxGpus; ++g) s.used[g][h.slot].store(0, kSeq);
  p.start_time.store(0, kSeq);
  // Unlock before freeing: once FREE, a claimer sharing our open file may take the byte, and a
  // late unlock would drop its lock. A reaper that sees the unlocked slot first frees it
  // itself (the CAS below then fails), which is the same outcome.
  UnlockByte(LedgerSlotLockByte(h.slice, h.slot));
  p.state.compare_exchange_strong(word, PackState(EntryState::kFree, 0), kSeq);
}

ChargeResult Ledger::Charge(const SliceHandle& h, int gpu, int64_t bytes) {
  if (layout_ == nullptr || !h.valid() || gpu < 0 || gpu >= kLedgerMaxGpus || bytes <= 0) return ChargeResult::kOk;
  LedgerSlice& s = layout_->slices[h.slice];
  std::atomic<int64_t>& mine = s.used[gpu][h.slot];
  for (int attempt = 0;; ++attempt) {
    const int64_t limit = s.gpus[gpu].limit.load(kSeq);
    if (limit < 0) {
      mine.fetch_add(bytes, kSeq);
      return ChargeResult::kOk;
    }
    if (bytes > limit) return ChargeResult::kOverLimit;
    mine.fetch_add(bytes, kSeq);
    if (SliceUsage(h.slice, gpu) <= limit) return ChargeResult::kOk;
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
  if (layout_ == nullptr || !h.valid() || gpu < 0 || gpu >= kLedgerMaxGpus) return;
  layout_->slices[h.slice].used[gpu][h.slot].fetch_add(bytes, kSeq);
}

void Ledger::Release(const SliceHandle& h, int gpu, int64_t bytes) {
  if (layout_ == nullptr || !h.valid() || gpu < 0 || gpu >= kLedgerMaxGpus) return;
  layout_->slices[h.slice].used[gpu][h.slot].fetch_sub(bytes, kSeq);
}

int64_t Ledger::SliceUsage(int slice, int gpu) const {
  if (layout_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices || gpu < 0 || gpu >= kLedgerMaxGpus) return 0;
  const LedgerSlice& s = layout_->slices[slice];
  const uint32_t hw = s.slot_high_water.load(kSeq);
  int64_t sum = 0;
  for (uint32_t i = 0; i < hw && i < static_cast<uint32_t>(kLedgerMaxSlots); ++i) sum += s.used[gpu][i].load(kSeq);
  return sum;
}

int64_t Ledger::SlotUsage(const SliceHandle& h, int gpu) const {
  if (layout_ == nullptr || !h.valid() || gpu < 0 || gpu >= kLedgerMaxGpus) return 0;
  return layout_->slices[h.slice].used[gpu][h.slot].load(kSeq);
}

int64_t Ledger::Limit(int slice, int gpu) const {
  if (layout_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices || gpu < 0 || gpu >= kLedgerMaxGpus) return -1;
  return layout_->slices[slice].gpus[gpu].limit.load(kSeq);
}

void Ledger::SetLimit(int slice, int gpu, int64_t limit) {
  if (layout_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices || gpu < 0 || gpu >= kLedgerMaxGpus) return;
  layout_->slices[slice].gpus[gpu].limit.store(limit, kSeq);
}

int Ledger::Reap(int slice) {
  if (layout_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices) return 0;
  LedgerSlice& s = layout_->slices[slice];
  const uint32_t me = static_cast<uint32_t>(getpid());
  const uint64_t self_ns = SelfPidNamespace();
  const uint32_t hw = s.slot_high_water.load(kSeq);
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
    const int64_t byte = LedgerSlotLockByte(slice, static_cast<int>(i));
    const bool locked = LockByte(byte);
    const uint64_t reaping = PackState(EntryState::kReaping, me, ClaimTag());
    if (!p.state.compare_exchange_strong(word, reaping, kSeq)) {
      // Someone else got there. Drop the byte unless the slot is now this process's own
      // (a claimer sharing our open file, whose lock this is too).
      if (locked && !(PidOf(word) == me && StateOf(word) != EntryState::kFree)) UnlockByte(byte);
      continue;
    }
    p.pid_ns.store(self_ns, kSeq);
    for (int g = 0; g < kLedgerMaxGpus; ++g) s.used[g][i].store(0, kSeq);
    p.start_time.store(0, kSeq);
    p.claimed_ns.store(0, kSeq);
    // Unlock before freeing (see Detach); a reaper that takes over in between redoes the same.
    if (locked) UnlockByte(byte);
    uint64_t mine = reaping;
    p.state.compare_exchange_strong(mine, PackState(EntryState::kFree, 0), kSeq);
    ++reaped;
  }
  return reaped;
}

void Ledger::MaybeReap(int slice) {
  if (layout_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices) return;
  LedgerSlice& s = layout_->slices[slice];
  int64_t now = MonotonicNs();
  int64_t last = s.last_reap_ns.load(kRlx);
  if (now - last < kReapIntervalNs) return;
  if (!s.last_reap_ns.compare_exchange_strong(last, now, kSeq)) return;  // someone else does it
  Reap(slice);
}

int Ledger::AliveCount(int slice) const {
  if (layout_ == nullptr || slice < 0 || slice >= kLedgerMaxSlices) return 0;
  const LedgerSlice& s = layout_->slices[slice];
  const uint64_t self_ns = SelfPidNamespace();
  int n = 0;
  for (int i = 0; i < kLedgerMaxSlots; ++i) {
    uint64_t word = s.slots[i].state.load(kSeq);
    if (StateOf(word) == EntryState::kAlive && SlotOwnerAlive(slice, i, word, self_ns)) ++n;
  }
  return n;
}

}  // namespace gslice
