#include "node.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>
#include <vector>

#include "gslice/units.h"

namespace gslice::sim {
namespace {

constexpr uint64_t kDefaultMemory = 16ull << 30;
// A holder that keeps the device this long past its slice while others wait is treated
// as stalled (stopped, or starved of CPU) and loses the device, as a real GPU preempts.
constexpr uint64_t kStalledHolderNs = 1'000'000'000;
// How long a waiter trusts that the longest waiter will pick up an idle device before it
// checks whether that waiter is still alive.
constexpr uint64_t kIdleHandoffNs = 50'000'000;

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

bool ParseUint(const char* text, uint64_t max, uint64_t* out) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || v > max || text[0] == '-') return false;
  *out = v;
  return true;
}

uint64_t Fnv1a(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  // splitmix64's finaliser, so that neighbouring seeds give unrelated-looking UUIDs.
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

std::vector<std::string> SplitComma(const char* text) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p == ',') {
      out.push_back(Trim(cur));
      cur.clear();
    } else {
      cur += *p;
    }
  }
  out.push_back(Trim(cur));
  return out;
}

void InitState(NodeState* s, const Config& c) {
  std::memset(static_cast<void*>(s), 0, sizeof(NodeState));
  s->magic = kLayoutMagic;
  s->layout_version = kLayoutVersion;
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&s->lock, &attr);
  pthread_mutexattr_destroy(&attr);
  s->device_count = c.device_count;
  s->timeslice_us = c.timeslice_us;
  s->mps_interference_pct = c.mps_interference_pct;
  for (uint32_t i = 0; i < c.device_count; ++i) {
    DeviceRecord& d = s->devices[i];
    std::snprintf(d.name, sizeof d.name, "%s", c.name.c_str());
    std::memcpy(d.uuid, c.uuids[i], 16);
    std::snprintf(d.uuid_text, sizeof d.uuid_text, "%s", FormatGpuUuid(d.uuid).c_str());
    d.total_memory = c.memory[i];
    d.sm_count = c.sm_count;
    d.pci_bus = 0x10 + i;
  }
}

}  // namespace

std::string FormatGpuUuid(const uint8_t u[16]) {
  char buf[48];
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                u[14], u[15]);
  return buf;
}

bool ParseGpuUuid(const std::string& text, uint8_t uuid[16]) {
  if (text.size() != 40 || text.compare(0, 4, "GPU-") != 0) return false;
  static constexpr int kDashes[] = {12, 17, 22, 27};
  int byte = 0;
  for (size_t i = 4; i < text.size();) {
    bool dash = false;
    for (int d : kDashes) dash = dash || static_cast<int>(i) == d;
    if (dash) {
      if (text[i] != '-') return false;
      ++i;
      continue;
    }
    if (i + 1 >= text.size() || byte >= 16) return false;
    auto hex = [](char ch) -> int {
      if (ch >= '0' && ch <= '9') return ch - '0';
      if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
      if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
      return -1;
    };
    int hi = hex(text[i]), lo = hex(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    uuid[byte++] = static_cast<uint8_t>(hi * 16 + lo);
    i += 2;
  }
  return byte == 16;
}

bool ReadConfigFromEnv(Config* c, std::string* error) {
  *c = Config{};
  uint64_t v = 0;
  if (const char* t = Env("GSLICE_SIM_DEVICES")) {
    if (!ParseUint(t, kMaxDevices, &v) || v == 0) {
      *error = std::string("GSLICE_SIM_DEVICES=") + t + ": must be a number from 1 to " +
               std::to_string(kMaxDevices);
      return false;
    }
    c->device_count = static_cast<uint32_t>(v);
  }
  for (uint32_t i = 0; i < kMaxDevices; ++i) c->memory[i] = kDefaultMemory;
  if (const char* t = Env("GSLICE_SIM_MEMORY")) {
    std::vector<std::string> parts = SplitComma(t);
    if (parts.size() != 1 && parts.size() != c->device_count) {
      *error = std::string("GSLICE_SIM_MEMORY=") + t +
               ": give one size for every device or a list with one size per device (" +
               std::to_string(c->device_count) + ")";
      return false;
    }
    for (uint32_t i = 0; i < c->device_count; ++i) {
      const std::string& p = parts.size() == 1 ? parts[0] : parts[i];
      ParsedSize s = ParseSize(p);
      if (!s.ok || s.bytes < (1ull << 20)) {
        *error = std::string("GSLICE_SIM_MEMORY=") + t + ": '" + p + "' " +
                 (s.ok ? "is below the 1 MiB minimum" : s.error);
        return false;
      }
      c->memory[i] = s.bytes;
    }
  }
  if (const char* t = Env("GSLICE_SIM_SMS")) {
    if (!ParseUint(t, 1024, &v) || v == 0) {
      *error = std::string("GSLICE_SIM_SMS=") + t + ": must be a number from 1 to 1024";
      return false;
    }
    c->sm_count = static_cast<uint32_t>(v);
  }
  if (const char* t = Env("GSLICE_SIM_NAME")) {
    if (std::strlen(t) >= 64) {
      *error = std::string("GSLICE_SIM_NAME: longer than 63 characters");
      return false;
    }
    c->name = t;
  }
  if (const char* t = Env("GSLICE_SIM_TIMESLICE_US")) {
    if (!ParseUint(t, 1'000'000, &v) || v < 100) {
      *error = std::string("GSLICE_SIM_TIMESLICE_US=") + t + ": must be from 100 to 1000000";
      return false;
    }
    c->timeslice_us = static_cast<uint32_t>(v);
  }
  if (const char* t = Env("GSLICE_SIM_MPS")) {
    if (!ParseUint(t, 1000, &v)) {
      *error = std::string("GSLICE_SIM_MPS=") + t +
               ": must be the percent by which each concurrently running process slows the others' kernels, "
               "from 0 to 1000";
      return false;
    }
    c->mps_interference_pct = static_cast<uint32_t>(v);
  }
  if (const char* t = Env("GSLICE_SIM_UUIDS")) {
    std::vector<std::string> parts = SplitComma(t);
    if (parts.size() != c->device_count) {
      *error = std::string("GSLICE_SIM_UUIDS: needs one UUID per device (") +
               std::to_string(c->device_count) + "), got " + std::to_string(parts.size());
      return false;
    }
    for (uint32_t i = 0; i < c->device_count; ++i) {
      if (!ParseGpuUuid(parts[i], c->uuids[i])) {
        *error = "GSLICE_SIM_UUIDS: '" + parts[i] +
                 "' is not a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)";
        return false;
      }
    }
  } else {
    for (uint32_t i = 0; i < c->device_count; ++i) {
      std::string seed = "gslice-sim-gpu-" + std::to_string(i);
      uint64_t a = Fnv1a(seed, 0), b = Fnv1a(seed, 0x9e3779b97f4a7c15ull);
      for (int k = 0; k < 8; ++k) {
        c->uuids[i][k] = static_cast<uint8_t>(a >> (8 * k));
        c->uuids[i][8 + k] = static_cast<uint8_t>(b >> (8 * k));
      }
    }
  }
  return true;
}

std::string StatePath() {
  if (const char* p = Env("GSLICE_SIM_STATE")) return p;
  return "/dev/shm/gslice-sim-" + std::to_string(getuid());
}

bool ReadProcessId(int32_t pid, ProcessId* out) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // The command name (field 2) may hold spaces and parentheses: parse after the last ')'.
  char* p = std::strrchr(buf, ')');
  if (p == nullptr) return false;
  p += 2;  // ") " then field 3, the state
  char state = *p;
  if (state == 'Z' || state == 'X' || state == 'x') return false;
  int field = 3;
  while (field < 22 && *p != '\0') {
    if (*p == ' ') ++field;
    ++p;
  }
  if (field != 22) return false;
  out->pid = pid;
  out->start_time = std::strtoull(p, nullptr, 10);
  return true;
}

bool ProcessAlive(const ProcessId& id) {
  ProcessId now;
  return ReadProcessId(id.pid, &now) && now.start_time == id.start_time;
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, uint64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000ull),
              static_cast<long>(timeout_ns % 1'000'000'000ull)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr,
          0);
}

NodeLock::NodeLock(Node* node) : mutex_(&node->state_->lock) {
  int rc = pthread_mutex_lock(mutex_);
  if (rc == EOWNERDEAD) {
    // The previous holder died inside a critical section. Every write under this lock is
    // a single store that leaves the state consistent, so the state is usable as is.
    pthread_mutex_consistent(mutex_);
  }
}

NodeLock::~NodeLock() { pthread_mutex_unlock(mutex_); }

bool Node::Open(Node* out, std::string* error) {
  std::string path = StatePath();
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = "cannot open simulator state " + path + ": " + std::strerror(errno);
    return false;
  }
  // flock only serialises initialisation; a creator that dies releases it with its fd.
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      *error = "cannot lock simulator state " + path + ": " + std::strerror(errno);
      close(fd);
      return false;
    }
  }
  struct stat st;
  fstat(fd, &st);
  const size_t size = sizeof(NodeState);
  bool fresh = static_cast<size_t>(st.st_size) < size;
  if (!fresh) {
    // Check the existing file before trusting it.
    void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      *error = "cannot map simulator state " + path + ": " + std::strerror(errno);
      flock(fd, LOCK_UN);
      close(fd);
      return false;
    }
    auto* s = static_cast<NodeState*>(m);
    if (s->magic == kLayoutMagic && s->layout_version == kLayoutVersion &&
        s->ready.load(std::memory_order_acquire) == 1) {
      flock(fd, LOCK_UN);
      close(fd);
      out->state_ = s;
      return true;
    }
    if (s->ready.load() == 1 || static_cast<size_t>(st.st_size) != size) {
      *error = "simulator state " + path +
               " was written by another version of the simulator; remove it (no process may "
               "be using it) or set GSLICE_SIM_STATE to another path";
      munmap(m, size);
      flock(fd, LOCK_UN);
      close(fd);
      return false;
    }
    munmap(m, size);  // a creator died half-way: initialise again
  }
  Config config;
  if (!ReadConfigFromEnv(&config, error)) {
    flock(fd, LOCK_UN);
    close(fd);
    return false;
  }
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    *error = "cannot size simulator state " + path + ": " + std::strerror(errno);
    flock(fd, LOCK_UN);
    close(fd);
    return false;
  }
  void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    *error = "cannot map simulator state " + path + ": " + std::strerror(errno);
    flock(fd, LOCK_UN);
    close(fd);
    return false;
  }
  auto* s = static_cast<NodeState*>(m);
  InitState(s, config);
  s->ready.store(1, std::memory_order_release);
  flock(fd, LOCK_UN);
  close(fd);
  out->state_ = s;
      return true;
}

bool Node::SlotAlive(int i) {
  ProcessSlot& s = state_->slots[i];
  if (s.state.load(std::memory_order_acquire) != static_cast<uint32_t>(SlotState::kLive)) {
    return false;
  }
  return ProcessAlive(ProcessId{s.pid, s.start_time});
}

int Node::ClaimSlot() {
  ProcessId me;
  if (!ReadProcessId(getpid(), &me)) return -1;
  NodeLock lock(this);
  ReapLocked();
  int free_slot = -1;
  for (int i = 0; i < static_cast<int>(kMaxProcesses); ++i) {
    ProcessSlot& s = state_->slots[i];
    if (s.state.load() == static_cast<uint32_t>(SlotState::kLive)) {
      if (s.pid == me.pid && s.start_time == me.start_time) return i;
    } else if (free_slot < 0) {
      free_slot = i;
    }
  }
  if (free_slot < 0) return -1;
  ProcessSlot& s = state_->slots[free_slot];
  s.pid = me.pid;
  s.start_time = me.start_time;
  for (uint32_t d = 0; d < kMaxDevices; ++d) {
    s.used[d].store(0);
    s.contexts[d].store(0);
    s.busy_ns[d].store(0);
  }
  s.process_state.store(static_cast<uint32_t>(Checkpoint::kRunning));
  s.service_tid.store(0);
  s.mailbox_owner.store(0);
  s.response_seq.store(s.request_seq.load());  // no stale request survives a reused slot
  s.generation.fetch_add(1);
  s.state.store(static_cast<uint32_t>(SlotState::kLive), std::memory_order_release);
  return free_slot;
}

int Node::FindSlot(int32_t pid) {
  ProcessId id;
  if (!ReadProcessId(pid, &id)) return -1;
  for (int i = 0; i < static_cast<int>(kMaxProcesses); ++i) {
    ProcessSlot& s = state_->slots[i];
    if (s.state.load(std::memory_order_acquire) == static_cast<uint32_t>(SlotState::kLive) &&
        s.pid == id.pid && s.start_time == id.start_time) {
      return i;
    }
  }
  return -1;
}

void Node::ReleaseSlot(int i) {
  NodeLock lock(this);
  ProcessSlot& s = state_->slots[i];
  for (uint32_t d = 0; d < kMaxDevices; ++d) s.used[d].store(0);
  s.state.store(static_cast<uint32_t>(SlotState::kFree), std::memory_order_release);
}

int Node::ReapLocked() {
  int reaped = 0;
  for (int i = 0; i < static_cast<int>(kMaxProcesses); ++i) {
    ProcessSlot& s = state_->slots[i];
    if (s.state.load() != static_cast<uint32_t>(SlotState::kLive)) continue;
    if (ProcessAlive(ProcessId{s.pid, s.start_time})) continue;
    // Its usage is simply no longer summed once the slot is free.
    s.state.store(static_cast<uint32_t>(SlotState::kFree), std::memory_order_release);
    ++reaped;
  }
  if (reaped > 0) {
    for (uint32_t d = 0; d < state_->device_count; ++d) FutexWakeAll(&state_->devices[d].sched_word);
  }
  return reaped;
}

int Node::Reap() {
  NodeLock lock(this);
  return ReapLocked();
}

uint64_t Node::UsedLocked(uint32_t dev) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    ProcessSlot& s = state_->slots[i];
    if (s.state.load() == static_cast<uint32_t>(SlotState::kLive)) sum += s.used[dev].load();
  }
  return sum;
}

uint64_t Node::Used(uint32_t dev) {
  NodeLock lock(this);
  ReapLocked();
  return UsedLocked(dev);
}

bool Node::Charge(int slot, uint32_t dev, uint64_t bytes) {
  uint64_t all[kMaxDevices] = {};
  all[dev] = bytes;
  return ChargeAll(slot, all);
}

bool Node::ChargeAll(int slot, const uint64_t bytes[kMaxDevices]) {
  NodeLock lock(this);
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool fits = true;
    for (uint32_t d = 0; d < state_->device_count; ++d) {
      if (bytes[d] == 0) continue;
      uint64_t used = UsedLocked(d);
      uint64_t total = state_->devices[d].total_memory;
      if (used > total || bytes[d] > total - used) fits = false;
    }
    if (fits) {
      for (uint32_t d = 0; d < state_->device_count; ++d) {
        if (bytes[d] != 0) state_->slots[slot].used[d].fetch_add(bytes[d]);
      }
      return true;
    }
    if (attempt == 0 && ReapLocked() == 0) break;
  }
  return false;
}

void Node::Uncharge(int slot, uint32_t dev, uint64_t bytes) {
  NodeLock lock(this);
  std::atomic<uint64_t>& used = state_->slots[slot].used[dev];
  uint64_t cur = used.load();
  used.store(cur >= bytes ? cur - bytes : 0);
}

uint64_t Node::MakeContextCode(int slot, uint32_t serial) const {
  uint64_t gen = state_->slots[slot].generation.load() & 0xffffu;
  return (static_cast<uint64_t>(slot + 1) << 48) | (gen << 32) | serial;
}

namespace {
int CodeSlot(uint64_t code) { return static_cast<int>(code >> 48) - 1; }
}  // namespace

void Node::AcquireDevice(uint32_t dev, uint64_t code) {
  DeviceRecord& d = state_->devices[dev];
  uint64_t my_ticket = 0;
  int my_index = -1;
  for (;;) {
    {
      NodeLock lock(this);
      if (my_index < 0) {
        // Register as a waiter (unless the device is idle and nobody else waits).
        if (d.holder == 0 && d.waiter_count.load() == 0) {
          d.holder = code;
          d.holder_since_ns = MonotonicNs();
          d.sched_word.fetch_add(1);
          return;
        }
        for (uint32_t i = 0; i < kMaxWaiters; ++i) {
          if (d.waiter_code[i] == 0) {
            my_index = static_cast<int>(i);
            break;
          }
        }
        if (my_index >= 0) {
          my_ticket = d.next_ticket++;
          d.waiter_code[my_index] = code;
          d.waiter_ticket[my_index] = my_ticket;
          d.waiter_count.fetch_add(1);
        }
      }
      uint64_t now = MonotonicNs();
      if (d.holder != 0) {
        // Holders renew their lease at every slice boundary (KeepDevice); one that has not
        // for a while is dead or stalled.
        uint64_t held = now - d.holder_since_ns;
        if (held > 20'000'000ull + 2ull * state_->timeslice_us * 1000ull) {
          int hs = CodeSlot(d.holder);
          bool gone = hs < 0 || hs >= static_cast<int>(kMaxProcesses) || !SlotAlive(hs) ||
                      ((d.holder >> 32) & 0xffffu) !=
                          (state_->slots[hs].generation.load() & 0xffffu);
          if (gone || held > kStalledHolderNs) {
            d.holder = 0;
            d.released_at_ns = now;
            d.sched_word.fetch_add(1);
          }
        }
      }
      if (d.holder == 0) {
        // The longest waiter (smallest ticket) goes next.
        int best = -1;
        for (uint32_t i = 0; i < kMaxWaiters; ++i) {
          if (d.waiter_code[i] == 0) continue;
          if (best < 0 || d.waiter_ticket[i] < d.waiter_ticket[best]) best = static_cast<int>(i);
        }
        if (my_index < 0 || best == my_index) {
          if (my_index >= 0) {
            d.waiter_code[my_index] = 0;
            d.waiter_count.fetch_sub(1);
          }
          d.holder = code;
          d.holder_since_ns = now;
          d.sched_word.fetch_add(1);
          return;
        }
        if (best >= 0 && now - d.released_at_ns > kIdleHandoffNs) {
          int ws = CodeSlot(d.waiter_code[best]);
          if (ws < 0 || ws >= static_cast<int>(kMaxProcesses) || !SlotAlive(ws)) {
            d.waiter_code[best] = 0;
            d.waiter_count.fetch_sub(1);
            continue;
          }
        }
      }
    }
    uint32_t seen = d.sched_word.load(std::memory_order_acquire);
    FutexWait(&d.sched_word, seen, 5'000'000);
  }
}

bool Node::KeepDevice(uint32_t dev, uint64_t code) {
  NodeLock lock(this);
  DeviceRecord& d = state_->devices[dev];
  if (d.holder != code) return false;
  d.holder_since_ns = MonotonicNs();
  return true;
}

void Node::ReleaseDevice(uint32_t dev, uint64_t code) {
  DeviceRecord& d = state_->devices[dev];
  {
    NodeLock lock(this);
    if (d.holder != code) return;
    d.holder = 0;
    d.released_at_ns = MonotonicNs();
    d.sched_word.fetch_add(1);
  }
  FutexWakeAll(&d.sched_word);
}

void Node::AddBusy(int slot, uint32_t dev, uint64_t ns) {
  DeviceRecord& d = state_->devices[dev];
  d.busy_ns_total.fetch_add(ns);
  if (slot >= 0) state_->slots[slot].busy_ns[dev].fetch_add(ns);
  uint64_t epoch = MonotonicNs() / kUtilBucketNs;
  uint32_t b = static_cast<uint32_t>(epoch % kUtilBuckets);
  uint64_t old = d.bucket_epoch[b].load();
  if (old != epoch && d.bucket_epoch[b].compare_exchange_strong(old, epoch)) {
    d.bucket_busy_ns[b].store(0);
  }
  d.bucket_busy_ns[b].fetch_add(ns);
}

uint32_t Node::MpsOthersRunning(int slot, uint32_t dev, uint64_t now) const {
  uint32_t n = 0;
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    if (static_cast<int>(i) == slot) continue;
    if (state_->slots[i].mps_running_until_ns[dev].load(std::memory_order_relaxed) > now) ++n;
  }
  return n;
}

double Node::Utilization(uint32_t dev) {
  DeviceRecord& d = state_->devices[dev];
  uint64_t now_epoch = MonotonicNs() / kUtilBucketNs;
  uint64_t busy = 0;
  // The current bucket is still filling: use the last kUtilBuckets-1 complete ones.
  for (uint32_t b = 0; b < kUtilBuckets; ++b) {
    uint64_t e = d.bucket_epoch[b].load();
    if (e < now_epoch && now_epoch - e < kUtilBuckets) busy += d.bucket_busy_ns[b].load();
  }
  double window = static_cast<double>((kUtilBuckets - 1) * kUtilBucketNs);
  double u = static_cast<double>(busy) / window;
  return u > 1.0 ? 1.0 : u;
}

}  // namespace gslice::sim
