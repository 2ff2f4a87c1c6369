#include "ledger_binding.h"

#include <errno.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <cstring>
#include <map>
#include <mutex>

#include <pwd.h>
#include <unistd.h>

#include "gslice/clock.h"
#include "gslice/ledger.h"
#include "gslice/pid_namespace.h"
#include "gslice/trace_format.h"

namespace gslice {
namespace {

// NVML's "GPU-2b5f0c1e-…" and the ledger's 16 CUuuid bytes are the same UUID.
bool UuidToBytes(const std::string& text, uint8_t out[16]) {
  std::string hex;
  std::string_view t = text;
  if (t.rfind("GPU-", 0) == 0) t.remove_prefix(4);
  for (char c : t) {
    if (c != '-') hex += c;
  }
  if (hex.size() != 32) return false;
  for (int i = 0; i < 16; ++i) {
    unsigned v = 0;
    for (int k = 0; k < 2; ++k) {
      char c = hex[static_cast<size_t>(2 * i + k)];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else return false;
    }
    out[i] = static_cast<uint8_t>(v);
  }
  return true;
}

// The uid that owns a slice's usage file: its user's, when the user is an account here. -1:
// unknown (the slice keeps the owner it has; a new slice belongs to root).
int64_t UidOfUser(const std::string& user) {
  if (user.empty()) return -1;
  struct passwd pw, *found = nullptr;
  char buf[4096];
  if (getpwnam_r(user.c_str(), &pw, buf, sizeof buf, &found) != 0 || found == nullptr) return -1;
  return static_cast<int64_t>(found->pw_uid);
}

std::string UuidToText(const uint8_t b[16]) {
  static const char* digits = "0123456789abcdef";
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += digits[b[i] >> 4];
    out += digits[b[i] & 15];
  }
  return out;
}

// A compute fraction as a LedgerGpu policy word: set, in permille.
uint32_t PolicyWord(double fraction) {
  const double permille = std::clamp(fraction, 0.0, 1.0) * 1000.0 + 0.5;
  return kGpuPolicySet | (static_cast<uint32_t>(permille) & kGpuPolicyMask);
}

class SharedLedger final : public NodeLedger {
 public:
  explicit SharedLedger(std::string path) : path_(std::move(path)) {}
  Status Open() {
    LedgerError e = ledger_.Open(path_.c_str());
    if (e != LedgerError::kOk) {
      return Status::Unavailable("node ledger " + path_ + ": " + LedgerErrorString(e) + ": " + ledger_.detail() +
                                 " (set `ledger` in the config, or GSLICE_LEDGER)");
    }
    if (!ledger_.writable()) {
      return Status::Unavailable("node ledger " + path_ +
                                 ": gsliced must own the ledger directory it publishes limits in (run it as root, or "
                                 "point `ledger` at a directory of its own)");
    }
    // A recording that a gsliced before this one started and never ended (it stopped mid-way):
    // its processes stop recording, and its folder goes.
    for (int i = 0; i < kLedgerMaxSlices; ++i) {
      if (ledger_.TraceRequestWord(i)->load() != 0) ledger_.SetTraceRequest(i, 0);
    }
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(path_, ec)) {
      if (entry.path().filename().string().rfind("trace-", 0) == 0) std::filesystem::remove_all(entry.path(), ec);
    }
    return Status::Ok();
  }

  std::string Describe() const override { return path_; }

  Result<std::vector<PublishedSlice>> Slices() override {
    std::lock_guard lock(mu_);
    std::vector<PublishedSlice> out;
    const LedgerLimits* l = ledger_.limits();
    for (int i = 0; i < kLedgerMaxSlices; ++i) {
      const LedgerSlice& s = l->slices[i];
      if (StateOf(s.state.load()) != EntryState::kReady) continue;
      // The ledger's own (kLedgerUnslicedName) and deleted slices' entries: never registry slices.
      if (s.name[0] == '-' || (s.flags & kSliceSetAside) != 0) continue;
      // A withdrawn (or `gslice run`-made) ephemeral slice with nobody left is free space.
      if ((s.flags & kSliceEphemeral) != 0 && (ledger_.MapUsage(i) != LedgerError::kOk || ledger_.AliveCount(i) == 0)) {
        continue;
      }
      PublishedSlice p;
      p.name.assign(s.name, strnlen(s.name, sizeof s.name));
      p.slice_class = static_cast<SliceClass>(s.slice_class);
      p.protect_permille = s.protect_permille;
      p.owner_uid = s.owner_uid;
      for (int g = 0; g < kLedgerMaxGpus; ++g) {
        if (StateOf(s.gpus[g].state.load()) != EntryState::kReady) continue;
        int64_t limit = s.gpus[g].limit.load();
        p.gpus.push_back(SliceGpu{UuidToText(s.gpus[g].uuid), limit < 0 ? 0 : static_cast<uint64_t>(limit), 0.0});
      }
      p.throttled = throttled_.count(p.name) != 0;
      out.push_back(std::move(p));
    }
    return out;
  }

  // Processes in containers record their container-local pid and their pid namespace; the
  // pid reported is the one gsliced sees (PidResolver), 0 when the process is not visible
  // from gsliced's namespace (its memory still counts). Rows and compute entries are matched
  // by (namespace, pid), never by a bare pid: pid 1 exists in every container.
  Result<std::vector<ProcessUsage>> Processes() override {
    std::lock_guard lock(mu_);
    std::vector<ProcessUsage> out;
    using Owner = std::pair<uint64_t, uint32_t>;  // (pid namespace, pid in it)
    std::vector<Owner> owner_of_row;               // parallel to out
    const LedgerLimits* l = ledger_.limits();
    std::map<Owner, std::string> slice_of_owner;
    for (int i = 0; i < kLedgerMaxSlices; ++i) {
      const LedgerSlice& s = l->slices[i];
      if (StateOf(s.state.load()) != EntryState::kReady) continue;
      if (ledger_.MapUsage(i) != LedgerError::kOk) continue;
      const LedgerUsage& u = *ledger_.usage(i);
      std::string name(s.name, strnlen(s.name, sizeof s.name));
      // A deleted slice's processes run on, but under a name no registry slice has (ValidateName).
      if ((s.flags & kSliceSetAside) != 0) name.insert(0, "~");
      uint32_t hw = u.head.slot_high_water.load();
      for (uint32_t k = 0; k < hw && k < static_cast<uint32_t>(kLedgerMaxSlots); ++k) {
        uint64_t word = u.slots[k].state.load();
        if (StateOf(word) != EntryState::kAlive) continue;
        if (!ledger_.SlotOwnerAlive(i, static_cast<int>(k))) continue;
        const Owner owner{u.slots[k].pid_ns.load(), PidOf(word)};
        const int pid = static_cast<int>(pids_.Resolve(owner.first, owner.second, u.slots[k].start_time.load()));
        slice_of_owner[owner] = name;
        bool any = false;
        for (int g = 0; g < kLedgerMaxGpus; ++g) {
          if (StateOf(s.gpus[g].state.load()) != EntryState::kReady) continue;
          int64_t used = u.used[g][k].load();
          if (used <= 0 && any) continue;
          ProcessUsage p;
          p.pid = pid;
          p.slice = name;
          p.gpu_uuid = UuidToText(s.gpus[g].uuid);
          p.memory_used = used > 0 ? static_cast<uint64_t>(used) : 0;
          out.push_back(p);
          owner_of_row.push_back(owner);
          any = true;
        }
        if (!any) {
          out.push_back(ProcessUsage{pid, name, "", 0, 0, false});
          owner_of_row.push_back(owner);
        }
      }
    }
    // Compute: the launch gates' table, by pid and GPU.
    const int64_t now = MonotonicNs();
    std::map<std::string, bool> guaranteed_active;  // by GPU
    struct Active {
      std::string slice, gpu;
      bool opportunistic;
    };
    std::vector<Active> active;
    for (int i = 0; i < kLedgerMaxComputeEntries; ++i) {
      const LedgerComputeEntry* entry = ledger_.ComputeEntry(i);  // mapped above (its slice's usage)
      if (entry == nullptr) continue;
      const LedgerComputeEntry& e = *entry;
      uint64_t word = e.state.load();
      if (StateOf(word) != EntryState::kAlive || !ledger_.ComputeOwnerAlive(i)) continue;
      const Owner owner{e.pid_ns.load(), PidOf(word)};
      std::string gpu = UuidToText(e.uuid);
      bool is_active = e.active_until_ns.load() > now;
      for (size_t r = 0; r < out.size(); ++r) {
        ProcessUsage& p = out[r];
        if (owner_of_row[r] == owner && (p.gpu_uuid == gpu || p.gpu_uuid.empty())) {
          // The gate keeps virtual time = busy time * 1000 / share (policy.h VtimeIncrement);
          // busy time is what the dashboard and metrics show.
          const uint64_t share = std::max<uint32_t>(e.share_permille.load() & kComputeShareMask, 1);
          const int64_t vtime = e.vtime_ns.load();
          if (vtime > 0) p.busy_ns += static_cast<uint64_t>(vtime) * share / 1000;
          p.active = p.active || is_active;
          if (p.gpu_uuid.empty()) p.gpu_uuid = gpu;
          break;
        }
      }
      if (!is_active) continue;
      bool opportunistic = e.slice_class.load() == static_cast<uint32_t>(SliceClass::kOpportunistic);
      if (!opportunistic) guaranteed_active[gpu] = true;
      auto it = slice_of_owner.find(owner);
      if (it != slice_of_owner.end()) active.push_back(Active{it->second, gpu, opportunistic});
    }
    // Opportunistic work that wants a GPU while guaranteed work runs there is being held back.
    throttled_.clear();
    for (const Active& a : active) {
      if (a.opportunistic && guaranteed_active.count(a.gpu)) throttled_[a.slice] = true;
    }
    return out;
  }

  Status Publish(const Slice& slice) override {
    std::lock_guard lock(mu_);
    return PublishLocked(slice);
  }

  Status PublishNew(const Slice& slice) override {
    std::lock_guard lock(mu_);
    const int index = ledger_.FindSlice(slice.name.c_str());
    if (index >= 0) {
      if (ledger_.MapUsage(index) == LedgerError::kOk && ledger_.AliveCount(index) > 0) {
        return Status::Conflict("slice '" + slice.name + "' is in use in the node ledger by processes gsliced " +
                                "has not adopted yet (a `gslice run` without the daemon): pick another name, " +
                                "or wait a moment and use theirs");
      }
      // Expired, or left by processes that are gone.
      if (Status st = SetAside(index); !st.ok()) return st;
    }
    return PublishLocked(slice);
  }

  Result<TraceTarget> StartTrace(const std::string& name, uint32_t request) override {
    std::lock_guard lock(mu_);
    const int index = ledger_.FindSlice(name.c_str());
    if (index < 0) return Status::Unavailable("slice " + name + " is not in the node ledger " + path_);
    const LedgerSlice& s = ledger_.limits()->slices[index];
    TraceTarget t;
    t.folder = TraceRequestFolder(path_, index, request);
    // A folder left by an earlier gsliced under this name is not ours to trust: start afresh.
    std::error_code ec;
    std::filesystem::remove_all(t.folder, ec);
    if (mkdir(t.folder.c_str(), 0700) != 0) {
      return Status::Unavailable("cannot make " + t.folder + ": " + strerror(errno));
    }
    if (chown(t.folder.c_str(), s.owner_uid, static_cast<gid_t>(-1)) != 0 && geteuid() == 0) {
      const std::string why = strerror(errno);
      rmdir(t.folder.c_str());
      return Status::Unavailable("cannot give " + t.folder + " to uid " + std::to_string(s.owner_uid) + ": " + why);
    }
    if (ledger_.MapUsage(index) == LedgerError::kOk) t.processes = ledger_.AliveCount(index);
    ledger_.SetTraceRequest(index, request);
    return t;
  }

  Status StopTrace(const std::string& name) override {
    std::lock_guard lock(mu_);
    const int index = ledger_.FindSlice(name.c_str());
    if (index >= 0) ledger_.SetTraceRequest(index, 0);
    return Status::Ok();
  }

  Status SetClass(const std::string& name, SliceClass slice_class) override {
    std::lock_guard lock(mu_);
    const int index = ledger_.FindSlice(name.c_str());
    if (index < 0) return Status::Unavailable("slice " + name + " is no longer in the node ledger " + path_);
    const LedgerSlice& s = ledger_.limits()->slices[index];
    return Update(name, index, slice_class, s.flags);
  }

  Status Resize(const Slice& slice, bool compute, std::map<std::string, uint64_t>* held) override {
    std::lock_guard lock(mu_);
    const int index = ledger_.FindSlice(slice.name.c_str());
    if (index >= 0) {
      struct Lowered {
        int gpu;
        int64_t before;
      };
      std::vector<Lowered> lowered;
      std::map<std::string, uint64_t> over;
      const bool usage_known = ledger_.MapUsage(index) == LedgerError::kOk;
      if (usage_known) ledger_.Reap(index);  // the dead hold nothing
      for (const SliceGpu& g : slice.gpus) {
        uint8_t uuid[16];
        if (!UuidToBytes(g.uuid, uuid)) return Status::Internal("GPU UUID '" + g.uuid + "' is malformed");
        const int gpu = ledger_.FindGpu(index, uuid);
        if (gpu < 0) continue;  // no process used it yet: PublishLocked adds it below
        const int64_t before = ledger_.Limit(index, gpu);
        const int64_t limit = static_cast<int64_t>(g.memory_limit);
        if (before >= 0 && limit >= before) continue;
        ledger_.SetLimit(index, gpu, limit);
        lowered.push_back({gpu, before});
        const int64_t used = usage_known && held != nullptr ? ledger_.SliceUsage(index, gpu) : 0;
        if (used > limit) over[g.uuid] = static_cast<uint64_t>(used);
      }
      if (!over.empty()) {
        for (const Lowered& l : lowered) ledger_.SetLimit(index, l.gpu, l.before);
        *held = std::move(over);
        return Status::Conflict("slice " + slice.name + " holds more than its new limit");
      }
    }
    if (Status st = PublishLocked(slice); !st.ok()) return st;
    if (!compute) return Status::Ok();
    const int published = ledger_.FindSlice(slice.name.c_str());
    for (const SliceGpu& g : slice.gpus) {
      uint8_t uuid[16];
      const int gpu = UuidToBytes(g.uuid, uuid) ? ledger_.FindGpu(published, uuid) : -1;
      if (gpu < 0) continue;
      ledger_.SetComputePolicy(published, gpu, PolicyWord(g.compute_cap), PolicyWord(g.compute_share));
    }
    return Status::Ok();
  }

  Status Withdraw(const std::string& name, Withdrawal how) override {
    std::lock_guard lock(mu_);
    const int index = ledger_.FindSlice(name.c_str());
    if (index < 0) return Status::Ok();
    const LedgerSlice& s = ledger_.limits()->slices[index];
    const uint32_t flags = s.flags;
    // Processes still attached keep their limits until they exit; then the entry is free.
    Status st = how == Withdrawal::kDeleted ? SetAside(index)
                                            : Update(name, index, static_cast<SliceClass>(s.slice_class),
                                                     flags | kSliceEphemeral);
    if (st.ok()) withdrawn_[name] = Undo{index, s.generation.load(), flags};
    return st;
  }

  Status Restore(const std::string& name) override {
    std::lock_guard lock(mu_);
    auto it = withdrawn_.find(name);
    if (it == withdrawn_.end()) return Status::Ok();
    const Undo undo = it->second;
    withdrawn_.erase(it);
    const LedgerSlice& s = ledger_.limits()->slices[undo.index];
    if (StateOf(s.state.load()) != EntryState::kReady || s.generation.load() != undo.generation) {
      return Status::Ok();  // recycled meanwhile: nobody used it
    }
    if ((s.flags & kSliceSetAside) != 0 && ledger_.FindSlice(name.c_str()) >= 0) {
      return Status::Unavailable("node ledger " + path_ + ": slice " + name +
                                 " was started again meanwhile; its old entry stays withdrawn");
    }
    return Update(name, undo.index, static_cast<SliceClass>(s.slice_class), undo.flags);
  }

 private:
  // REQUIRES: mu_ held. Marks the entry kSliceSetAside (ledger.h): found and listed by no one,
  // freed (ephemeral) once its last process is gone. Its processes hold it by index, so they
  // run on with their limits.
  Status SetAside(int index) {
    const LedgerSlice& s = ledger_.limits()->slices[index];
    return Update(s.name, index, static_cast<SliceClass>(s.slice_class), s.flags | kSliceEphemeral | kSliceSetAside);
  }

  // REQUIRES: mu_ held. The writer's update of an entry's class and flags (owner and
  // protection level kept).
  Status Update(const std::string& name, int index, SliceClass cls, uint32_t flags) {
    const LedgerSlice& s = ledger_.limits()->slices[index];
    if (LedgerError e = ledger_.UpdateSlice(index, cls, flags, s.owner_uid, s.protect_permille); e != LedgerError::kOk) {
      return Status::Unavailable("node ledger " + path_ + ": slice " + name + ": " + LedgerErrorString(e) + ": " +
                                 ledger_.detail());
    }
    return Status::Ok();
  }

  // REQUIRES: mu_ held.
  Status PublishLocked(const Slice& slice) {
    int index = -1;
    const int64_t uid = UidOfUser(slice.user);
    // The shims read the level of guaranteed slices only; an opportunistic slice has none.
    const uint32_t protect = slice.slice_class == SliceClass::kGuaranteed ? slice.protect_permille : 0;
    LedgerError e = ledger_.FindOrCreateSlice(slice.name.c_str(), slice.slice_class, 0, &index,
                                              uid >= 0 ? static_cast<uint32_t>(uid) : 0u, protect);
    if (e != LedgerError::kOk) {
      return Status::Unavailable("node ledger " + path_ + ": cannot hold slice " + slice.name + ": " +
                                 LedgerErrorString(e) + ": " + ledger_.detail());
    }
    const LedgerSlice& s = ledger_.limits()->slices[index];
    // The daemon owns it now (never recycled); its usage stays as it is.
    e = ledger_.UpdateSlice(index, slice.slice_class, s.flags & ~kSliceEphemeral,
                            uid >= 0 ? static_cast<uint32_t>(uid) : s.owner_uid, protect);
    if (e != LedgerError::kOk) {
      return Status::Unavailable("node ledger: slice " + slice.name + ": " + LedgerErrorString(e) + ": " + ledger_.detail());
    }
    withdrawn_.erase(slice.name);
    for (const SliceGpu& g : slice.gpus) {
      uint8_t uuid[16];
      if (!UuidToBytes(g.uuid, uuid)) return Status::Internal("GPU UUID '" + g.uuid + "' is malformed");
      int gpu = -1;
      int64_t limit = static_cast<int64_t>(g.memory_limit);
      e = ledger_.FindOrAddGpu(index, uuid, limit, &gpu);
      if (e != LedgerError::kOk) {
        return Status::Unavailable("node ledger: slice " + slice.name + ": " + LedgerErrorString(e));
      }
      if (ledger_.Limit(index, gpu) != limit) ledger_.SetLimit(index, gpu, limit);
    }
    return Status::Ok();
  }

  struct Undo {
    int index;
    uint64_t generation;
    uint32_t flags;
  };

  std::string path_;
  std::mutex mu_;
  std::map<std::string, Undo> withdrawn_;  // for Restore
  Ledger ledger_;
  PidResolver pids_;  // (namespace, pid) -> the pid gsliced sees
  std::map<std::string, bool> throttled_;
};

}  // namespace

Result<std::unique_ptr<NodeLedger>> OpenNodeLedger(const std::string& path) {
  if (path == "none") return MakeMemoryLedger();
  auto ledger = std::make_unique<SharedLedger>(path);
  if (Status s = ledger->Open(); !s.ok()) return s;
  return std::unique_ptr<NodeLedger>(std::move(ledger));
}

}  // namespace gslice
