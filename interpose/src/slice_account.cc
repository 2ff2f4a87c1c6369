#include "slice_account.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <string_view>

#include "gslice/clock.h"
#include "gslice/options.h"
#include "gslice/units.h"
#include "log.h"

namespace gslice::shim {
namespace {
SliceAccount* g_forking_account = nullptr;

// A forked child is a new process holding a copy of the parent's slot handle: it must
// neither charge into the parent's slot nor free it when it exits. It runs without limits
// (CUDA itself does not support using the parent's contexts after fork).
void ForgetSlotInChild() {
  if (g_forking_account != nullptr) g_forking_account->OnForkChild();
}
}  // namespace

uint32_t ProtectFromEnvironment() {
  const char* text = OptionValue(Option::Protect);
  if (text[0] == '\0') return 0;
  if (strcmp(OptionValue(Option::Class), "opportunistic") == 0) {
    Log(LogLevel::kWarn, "GSLICE_PROTECT=%s: only guaranteed work has a protection level; ignored (GSLICE_CLASS=opportunistic)",
        text);
    return 0;
  }
  ParsedProtect p = ParseProtect(text);
  if (!p.ok) {
    Log(LogLevel::kError, "GSLICE_PROTECT=%s: %s; a slice made here gets the default level", text, p.error);
    return 0;
  }
  return p.permille;
}

void SliceAccount::OnForkChild() {
  attached_ = false;
  handle_ = SliceHandle{};
  active_.store(false, std::memory_order_release);
}

bool SliceAccount::Init(bool attach) {
  const char* memory = OptionValue(Option::Memory);
  if (memory[0] == '\0') return false;  // no limit: the shim forwards everything
  // Parse "10GiB" or "10GiB,5GiB".
  std::string_view rest(memory);
  int n = 0;
  bool any = false;
  while (n < kMaxDevices) {
    size_t comma = rest.find(',');
    // No substr: it may throw, and the shim links no exception machinery.
    std::string_view item(rest.data(), comma == std::string_view::npos ? rest.size() : comma);
    ParsedSize p = ParseSize(item);
    if (!p.ok || p.bytes == 0 || p.bytes > static_cast<uint64_t>(INT64_MAX)) {
      Log(LogLevel::kError, "GSLICE_MEMORY=%s: entry %d '%.*s' is not a size (%s); that GPU is not limited", memory, n,
          static_cast<int>(item.size()), item.data(), p.ok ? "must be more than 0" : p.error);
      limits_[n] = -1;
    } else {
      limits_[n] = static_cast<int64_t>(p.bytes);
      any = true;
    }
    ++n;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  limit_count_ = n;
  if (!any) return false;

  const char* name = OptionValue(Option::Slice);
  if (name[0] == '\0' || strlen(name) >= sizeof slice_name_) {
    if (name[0] != '\0') Log(LogLevel::kError, "GSLICE_SLICE: longer than %d characters; using a private slice", kLedgerNameSize - 1);
    snprintf(slice_name_, sizeof slice_name_, "pid-%d", static_cast<int>(getpid()));
  } else {
    snprintf(slice_name_, sizeof slice_name_, "%s", name);
  }
  const int64_t start_ns = MonotonicNs();
  const char* path = OptionValue(Option::Ledger);
  uint32_t flags = strcmp(OptionValue(Option::EphemeralSlice), "0") == 0 ? 0u : kSliceEphemeral;
  char note[640] = {};
  int found = -1;
  LedgerError e = OpenSliceLedger(&ledger_, path, OptionValue(Option::LedgerUsage), slice_name_, SliceClass::kGuaranteed,
                                  flags, /*create_slice=*/attach, &found, note, sizeof note,
                                  attach ? ProtectFromEnvironment() : 0);
  slice_ = found;
  // A refused node ledger (a symlink, another user's) is worth a warning; a missing one (no
  // gsliced) is the daemon-less case.
  if (e == LedgerError::kOk && note[0] != '\0') {
    Log(strstr(note, "refused") != nullptr ? LogLevel::kWarn : LogLevel::kInfo, "slice %s: %s", slice_name_, note);
  }
  if (attach) {
    const uint32_t pid = static_cast<uint32_t>(getpid());
    if (e == LedgerError::kOk) e = ledger_.Attach(slice_, pid, ProcessStartTime(pid), &handle_);
    if (e != LedgerError::kOk) {
      Log(LogLevel::kWarn, "slice %s: %s (%s); limits hold within this process only", slice_name_, LedgerErrorString(e),
          note[0] != '\0' ? note : ledger_.detail());
      if (ledger_.OpenPrivate() != LedgerError::kOk ||
          ledger_.AttachByName(slice_name_, SliceClass::kGuaranteed, flags, pid, 0, &handle_) != LedgerError::kOk) {
        return false;
      }
    }
    slice_ = handle_.slice;
    attached_ = true;
    g_forking_account = this;
    pthread_atfork(nullptr, nullptr, ForgetSlotInChild);
    ledger_.MaybeReap(slice_);  // one process of the slice reaps per interval, not every attacher
    Log(LogLevel::kInfo, "init: slice %s attached (slot %d) in %lld us", slice_name_, handle_.slot,
        static_cast<long long>((MonotonicNs() - start_ns) / 1000));
  } else if (e != LedgerError::kOk) {
    slice_ = -1;
  }
  active_.store(true, std::memory_order_release);
  return true;
}

void SliceAccount::Shutdown() {
  if (!attached_ || shut_down_.exchange(true)) return;
  if (attached_) ledger_.Detach(handle_);
}

int64_t SliceAccount::LimitForOrdinal(int ordinal) const {
  if (limit_count_ == 0 || ordinal < 0) return -1;
  if (limit_count_ == 1) return limits_[0];  // one size: every GPU
  return ordinal < limit_count_ ? limits_[ordinal] : -1;
}

int SliceAccount::GpuForUuid(const uint8_t uuid[16], int ordinal) {
  if (!active() || slice_ < 0) return -1;
  int gpu = -1;
  int64_t limit = LimitForOrdinal(ordinal);
  // The slice's limits are its writer's (gsliced, the device plugin, or this user for a
  // daemon-less slice): a GPU they do not list is added only where this process is the writer.
  LedgerError e = ledger_.FindOrAddGpu(slice_, uuid, limit, &gpu);
  if (e != LedgerError::kOk) {
    Log(LogLevel::kError, "slice %s: %s (%s); device %d is not limited", slice_name_, LedgerErrorString(e),
        ledger_.detail(), ordinal);
    return -1;
  }
  int64_t stored = ledger_.Limit(slice_, gpu);
  if (stored != limit) {
    Log(LogLevel::kInfo, "slice %s: device %d limit is %lld bytes in the ledger (environment says %lld); using the ledger's",
        slice_name_, ordinal, static_cast<long long>(stored), static_cast<long long>(limit));
  }
  return gpu;
}

int SliceAccount::FindGpu(const uint8_t uuid[16]) {
  if (!active()) return -1;
  if (slice_ < 0 && !attached_) {
    // A reader (NVML) that started before the slice existed: look again (not a hot path).
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    if (slice_ < 0) {
      int s = -1;
      if (OpenSliceLedger(&ledger_, OptionValue(Option::Ledger), OptionValue(Option::LedgerUsage), slice_name_,
                          SliceClass::kGuaranteed, 0, /*create_slice=*/false, &s, nullptr, 0) == LedgerError::kOk) {
        slice_ = s;
      }
    }
    pthread_mutex_unlock(&mu);
  }
  return slice_ < 0 ? -1 : ledger_.FindGpu(slice_, uuid);
}

ChargeResult SliceAccount::Charge(int gpu, int64_t bytes) {
  if (gpu < 0 || shut_down_.load(std::memory_order_relaxed)) return ChargeResult::kOk;
  ledger_.MaybeReap(slice_);
  return ledger_.Charge(handle_, gpu, bytes);
}

void SliceAccount::ForceCharge(int gpu, int64_t bytes) {
  if (gpu < 0 || shut_down_.load(std::memory_order_relaxed)) return;
  ledger_.ForceCharge(handle_, gpu, bytes);
}

void SliceAccount::Release(int gpu, int64_t bytes) {
  if (gpu < 0 || shut_down_.load(std::memory_order_relaxed)) return;
  ledger_.Release(handle_, gpu, bytes);
}

int64_t SliceAccount::Usage(int gpu) {
  if (gpu < 0 || slice_ < 0) return 0;
  ledger_.MaybeReap(slice_);
  return ledger_.SliceUsage(slice_, gpu);
}

int64_t SliceAccount::Limit(int gpu) const { return gpu < 0 ? -1 : ledger_.Limit(slice_, gpu); }

}  // namespace gslice::shim
