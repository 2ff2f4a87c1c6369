#include "registry.h"

#include <grp.h>
#include <pwd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <tuple>

#include "admission.h"
#include "gslice/clock.h"
#include "gslice/k8s/pod_annotations.h"
#include "gslice/units.h"

namespace gslice {
namespace {

void Log(const std::string& line) { std::fprintf(stderr, "gsliced: %s\n", line.c_str()); }

class UnavailableSuspender final : public Suspender {
 public:
  Status Suspend(const Slice& slice, const std::vector<int>&) override {
    return Status::NotImplemented("cannot suspend slice " + slice.name +
                                  ": this gsliced has no suspend mechanism (driver checkpointing "
                                  "is not built in); the slice keeps running");
  }
  Status Resume(const Slice& slice, const std::vector<int>&) override {
    return Status::NotImplemented("cannot resume slice " + slice.name +
                                  ": this gsliced has no suspend mechanism (driver checkpointing "
                                  "is not built in)");
  }
};

// The change applied to a copy of `slice`; what changed, for the event log ("memory 8 GiB ->
// 4 GiB on GPU-…; class opportunistic"), in *what.
Status ApplyChange(const SliceChange& change, Slice* slice, std::string* what) {
  auto add = [what](const std::string& item) { *what += (what->empty() ? "" : "; ") + item; };
  if (!change.memory.empty()) {
    if (change.memory.size() != 1 && change.memory.size() != slice->gpus.size()) {
      return Status::BadRequest("memory: " + std::to_string(change.memory.size()) + " sizes for the " +
                                std::to_string(slice->gpus.size()) + " GPUs of slice '" + slice->name +
                                "': give one size for all, or one per GPU in the slice's order");
    }
    for (size_t k = 0; k < slice->gpus.size(); ++k) {
      const uint64_t limit = change.memory.size() == 1 ? change.memory[0] : change.memory[k];
      if (limit == 0) return Status::BadRequest("memory: must be more than 0, e.g. \"8GiB\"");
      SliceGpu& g = slice->gpus[k];
      if (limit != g.memory_limit) add("memory " + SizeText(g.memory_limit) + " -> " + SizeText(limit) + " on " + g.uuid);
      g.memory_limit = limit;
    }
  }
  for (auto [value, field, name] : {std::tuple{change.compute_cap, &SliceGpu::compute_cap, "compute cap"},
                                     std::tuple{change.compute_share, &SliceGpu::compute_share, "compute share"}}) {
    if (!value) continue;
    bool changed = false;
    for (SliceGpu& g : slice->gpus) {
      changed = changed || g.*field != *value;
      g.*field = *value;
    }
    if (changed) add(std::string(name) + " " + (*value > 0 ? PercentText(*value) : std::string("none")));
  }
  if (change.slice_class && *change.slice_class != slice->slice_class) {
    slice->slice_class = *change.slice_class;
    add("class " + std::string(ToString(slice->slice_class)));
  }
  if (change.protect_permille) {
    if (Status s = ValidateProtect(slice->slice_class, *change.protect_permille); !s.ok()) return s;
    if (*change.protect_permille != slice->protect_permille) {
      slice->protect_permille = *change.protect_permille;
      add("protection level " + FormatProtect(slice->protect_permille));
    }
  }
  if (change.idle_timeout_s && *change.idle_timeout_s != slice->idle_timeout_s) {
    slice->idle_timeout_s = *change.idle_timeout_s;
    add("idle timeout " + (slice->idle_timeout_s > 0 ? std::to_string(slice->idle_timeout_s) + " s" : std::string("never")));
  }
  return Status::Ok();
}

// "holds 6 GiB on GPU 0 (GPU-…), more than its new limit of 4 GiB".
std::string HeldText(const Slice& slice, const std::map<std::string, uint64_t>& held,
                     const std::vector<GpuInfo>& gpus) {
  std::string out;
  for (const auto& [uuid, bytes] : held) {
    std::string gpu = uuid;
    for (const GpuInfo& g : gpus) {
      if (g.uuid == uuid) gpu = "GPU " + std::to_string(g.index) + " (" + uuid + ")";
    }
    uint64_t limit = 0;
    for (const SliceGpu& g : slice.gpus) {
      if (g.uuid == uuid) limit = g.memory_limit;
    }
    out += (out.empty() ? "" : ", ") + SizeText(bytes) + " on " + gpu + ", more than the new limit of " + SizeText(limit);
  }
  return out;
}

// Whether uid's account is in group `name`: its primary group, or a member by the group database.
bool AccountInGroup(int64_t uid, const std::string& name) {
  if (name.empty() || uid < 0) return false;
  std::vector<char> buf(16384);
  group gr{};
  group* found_group = nullptr;
  if (getgrnam_r(name.c_str(), &gr, buf.data(), buf.size(), &found_group) != 0 || found_group == nullptr) {
    return false;
  }
  const gid_t gid = found_group->gr_gid;
  std::vector<char> pbuf(16384);
  passwd pw{};
  passwd* account = nullptr;
  if (getpwuid_r(static_cast<uid_t>(uid), &pw, pbuf.data(), pbuf.size(), &account) != 0 || account == nullptr) {
    return false;
  }
  if (account->pw_gid == gid) return true;
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  if (getgrouplist(account->pw_name, account->pw_gid, groups.data(), &n) < 0) {
    groups.resize(static_cast<size_t>(n));  // n is now how many there are
    if (getgrouplist(account->pw_name, account->pw_gid, groups.data(), &n) < 0) return false;
  }
  groups.resize(static_cast<size_t>(n));
  return std::find(groups.begin(), groups.end(), gid) != groups.end();
}

// Whether the owner of a new slice is an admin for the slice table's shares: root, no uid (only
// admins make such slices: CreateSlice), or an account in admin_group.
bool OwnerIsAdmin(int64_t owner_uid, const std::string& admin_group) {
  return owner_uid <= 0 || AccountInGroup(owner_uid, admin_group);
}

// "nobody (uid 65534)", or the name alone when the uid is not known.
std::string OwnerText(const Slice& slice) {
  return slice.user + (slice.owner_uid >= 0 ? " (uid " + std::to_string(slice.owner_uid) + ")" : "");
}

}  // namespace

Status AdmitToTable(const Slice& candidate, bool admin, const std::vector<Slice>& slices,
                    const std::vector<Slice>& deleted_running, int other_entries, const SliceTableShares& shares,
                    const std::string& default_project) {
  const int in_use = static_cast<int>(slices.size() + deleted_running.size()) + other_entries;
  const std::string size = std::to_string(shares.entries);
  if (in_use >= shares.entries) {
    return Status::Conflict("the node's slice table is full: all " + size +
                            " entries (one per slice) are taken; delete a slice that is no longer needed "
                            "(`gslice ls` lists them), then try again");
  }
  if (admin) return Status::Ok();
  const std::string ask = "ask an admin (root or a member of gsliced's admin_group) to raise ";
  // (holds, of which deleted with processes still running)
  auto count = [&](auto same) {
    std::pair<int, int> n{0, 0};
    for (const Slice& s : slices) n.first += same(s) ? 1 : 0;
    for (const Slice& s : deleted_running) {
      n.first += same(s) ? 1 : 0;
      n.second += same(s) ? 1 : 0;
    }
    return n;
  };
  auto held_text = [](std::pair<int, int> n) {
    std::string out = std::to_string(n.first) + " slice" + (n.first == 1 ? "" : "s");
    if (n.second > 0) out += " (" + std::to_string(n.second) + " of them deleted, their processes still running)";
    return out;
  };
  if (shares.per_user > 0) {
    const auto held = count([&](const Slice& s) {
      return s.owner_uid >= 0 ? s.owner_uid == candidate.owner_uid : s.user == candidate.user;
    });
    if (held.first >= shares.per_user) {
      return Status::Conflict(OwnerText(candidate) + " holds " + held_text(held) + ", the most one user may hold (" +
                              "slices_per_user = " + std::to_string(shares.per_user) +
                              " in gsliced's configuration): delete one that is no longer needed (`gslice ls`, "
                              "`gslice delete NAME`), or " + ask + "slices_per_user");
    }
  }
  if (shares.per_project > 0 && candidate.project != default_project) {
    const auto held = count([&](const Slice& s) { return s.project == candidate.project; });
    if (held.first >= shares.per_project) {
      return Status::Conflict("project " + candidate.project + " holds " + held_text(held) +
                              ", the most one project may hold (slices_per_project = " +
                              std::to_string(shares.per_project) + " in gsliced's configuration): delete one of its "
                              "slices that is no longer needed, or " + ask + "slices_per_project");
    }
  }
  const int free_entries = shares.entries - in_use;
  if (free_entries <= shares.reserved_for_admins) {
    return Status::Conflict("the node's slice table has " + std::to_string(free_entries) + " of its " + size +
                            " entries free, and the last " + std::to_string(shares.reserved_for_admins) +
                            " are kept for admins (slices_reserved_for_admins in gsliced's configuration): "
                            "delete a slice that is no longer needed, or ask an admin (root or a member of "
                            "gsliced's admin_group) to make room");
  }
  return Status::Ok();
}

std::string Caller::Describe() const {
  if (uid < 0) return user == "token" ? "the token's holder" : user;
  return user + " (uid " + std::to_string(uid) + ")";
}

Status MayChange(const Slice& slice, const Caller& caller) {
  if (caller.admin) return Status::Ok();
  const bool owner = slice.owner_uid >= 0 ? caller.uid == slice.owner_uid
                                          : caller.uid >= 0 && caller.user == slice.user;
  if (owner) return Status::Ok();
  std::string whose = slice.user;
  if (slice.owner_uid >= 0) whose += " (uid " + std::to_string(slice.owner_uid) + ")";
  return Status::Forbidden("slice '" + slice.name + "' belongs to " + whose + ", not to " +
                           caller.Describe() +
                           ": only its owner or an admin (root or a member of gsliced's "
                           "admin_group) may change it");
}

Status NoSuchSlice(const std::string& name) {
  return Status::NotFound("no slice named '" + name + "': `gslice ls` lists the slices");
}

std::unique_ptr<Suspender> MakeUnavailableSuspender() {
  return std::make_unique<UnavailableSuspender>();
}

Registry::Registry(Options options, std::unique_ptr<Store> store,
                   std::unique_ptr<GpuInventory> gpus, std::unique_ptr<NodeLedger> ledger,
                   std::unique_ptr<Suspender> suspender, std::unique_ptr<PodResolver> pods,
                   std::unique_ptr<MpsService> mps)
    : options_(std::move(options)),
      store_(std::move(store)),
      inventory_(std::move(gpus)),
      ledger_(std::move(ledger)),
      suspender_(std::move(suspender)),
      pods_(std::move(pods)),
      mps_(std::move(mps)),
      history_(options_.history_samples) {}

Status Registry::Start() {
  std::lock_guard lock(mu_);
  auto gpus = inventory_->Scan();
  if (!gpus.ok()) return gpus.status();
  gpus_ = std::move(gpus.value());
  auto slices = store_->LoadSlices();
  if (!slices.ok()) return slices.status();
  slices_ = std::move(slices.value());
  auto projects = store_->LoadProjects();
  if (!projects.ok()) return projects.status();
  projects_ = std::move(projects.value());
  if (FindProject(options_.default_project) == nullptr) {
    Project p;
    p.name = options_.default_project;
    p.created_at = static_cast<int64_t>(std::time(nullptr));
    if (Status s = store_->PutProject(p); !s.ok()) return s;
    projects_.push_back(p);
  }
  auto users = store_->LoadUsers();
  if (!users.ok()) return users.status();
  users_ = std::move(users.value());

  auto processes = ledger_->Processes();
  if (!processes.ok()) return processes.status();
  processes_ = std::move(processes.value());
  // Programs that ended while gsliced was down leave their registrations behind.
  const int expired = ExpireRegistrations(processes_);
  auto in_ledger = ledger_->Slices();
  if (!in_ledger.ok()) return in_ledger.status();
  int adopted = 0, republished = 0;
  for (const Slice& s : slices_) {
    bool found = false;
    for (const PublishedSlice& l : in_ledger.value()) found = found || l.name == s.name;
    if (found) {
      ++adopted;  // running as it was: leave the ledger entry and its usage alone
    } else {
      if (Status st = ledger_->Publish(s); !st.ok()) return st;
      ++republished;
    }
  }
  const int imported = AdoptFromLedger(in_ledger.value());
  for (const PublishedSlice& l : in_ledger.value()) ledger_owners_[l.name] = l.owner_uid;
  counters_.slices_adopted += static_cast<uint64_t>(adopted);
  // Daemons that run already (gsliced restarted) are adopted with the tenants they have.
  if (mps_ != nullptr) mps_->Reconcile(gpus_);
  Log("registry: " + std::to_string(gpus_.size()) + " GPU(s), " + std::to_string(slices_.size()) +
      " slice(s): " + std::to_string(adopted) + " re-adopted from " + ledger_->Describe() + ", " +
      std::to_string(republished) + " published again, " + std::to_string(imported) +
      " adopted from the ledger, " + std::to_string(expired) + " expired");
  return Status::Ok();
}

std::string Registry::AdmitFound(Slice* s, const std::vector<Slice>& others) const {
  const Project* project = FindProject(s->project);
  Status admitted = project != nullptr ? Status::Ok() : Status::NotFound("no project " + s->project);
  for (const SliceGpu& g : s->gpus) {
    if (admitted.ok() && g.memory_limit == 0) admitted = Status::BadRequest("GPU " + g.uuid + ": no memory limit");
  }
  if (admitted.ok() && !s->gpus.empty()) admitted = Admit(*s, gpus_, others, *project);
  if (admitted.ok()) {
    s->last_error.clear();
    return "admitted as " + std::string(ToString(s->slice_class)) + (s->gpus.empty() ? " (no GPU in use yet)" : "");
  }
  // Its processes already run, so what does not fit is not refused but taken as work that
  // reserves nothing.
  const bool was_guaranteed = s->slice_class == SliceClass::kGuaranteed;
  s->slice_class = SliceClass::kOpportunistic;
  Status fits = admitted.code() == 409 ? Admit(*s, gpus_, others, *project) : admitted;
  if (was_guaranteed && fits.ok()) {
    s->last_error.clear();
    return "does not fit as guaranteed (" + admitted.message() + "): adopted as opportunistic";
  }
  // Reserves nothing, but its limits are not what admission allows: say so wherever the
  // slice is shown.
  s->last_error = "over-committed: " + (was_guaranteed ? fits : admitted).message() +
                  "; adopted as opportunistic without admission";
  return s->last_error;
}

Status Registry::StoreFound(const Slice& s, SliceClass ledger_class, const std::string& event,
                            const std::string& detail) {
  Store::Transaction tx = store_->Begin();
  Status st = tx.status();
  if (st.ok()) st = store_->PutSlice(s);
  if (st.ok()) st = store_->RecordEvent(s.name, event, detail);
  const bool reclassed = st.ok() && s.slice_class != ledger_class;
  if (reclassed) st = ledger_->SetClass(s.name, s.slice_class);
  if (st.ok()) {
    st = tx.Commit();
    if (!st.ok() && reclassed) ledger_->SetClass(s.name, ledger_class);
  }
  return st;
}

int Registry::AdoptFromLedger(const std::vector<PublishedSlice>& in_ledger) {
  int imported = 0;
  for (const PublishedSlice& l : in_ledger) {
    if (!ValidateName("slice", l.name).ok()) continue;  // not a name the API could serve
    if (Slice* known = FindSlice(l.name); known != nullptr) {
      // An adopted slice's processes may take more GPUs after adoption: those pass
      // admission too.
      if (known->origin != "adopted") continue;
      std::set<std::string> had;
      for (const SliceGpu& g : known->gpus) had.insert(g.uuid);
      std::string added;
      for (const SliceGpu& g : l.gpus) {
        if (had.count(g.uuid) == 0) added += (added.empty() ? "" : ", ") + g.uuid;
      }
      if (added.empty()) continue;
      Slice s = *known;
      s.gpus = l.gpus;
      std::vector<Slice> others;
      for (const Slice& o : slices_) {
        if (o.name != s.name) others.push_back(o);
      }
      const std::string detail = "now uses " + added + "; " + AdmitFound(&s, others);
      if (Status st = StoreFound(s, l.slice_class, "adopt", detail); !st.ok()) {
        Log("slice " + s.name + ": cannot take its new GPUs: " + st.message());
        continue;
      }
      Log("adopted slice " + s.name + " " + detail);
      *known = std::move(s);
      generation_++;
      continue;
    }
    Slice s;
    s.name = l.name;
    s.user = "unknown";
    s.project = options_.default_project;
    s.slice_class = l.slice_class;
    s.protect_permille = ValidProtectPermille(l.protect_permille) ? l.protect_permille : 0;
    s.gpus = l.gpus;
    s.origin = "adopted";
    s.created_at = static_cast<int64_t>(std::time(nullptr));
    // Admitted like a create.
    const std::string detail = "found in " + ledger_->Describe() + "; " + AdmitFound(&s, slices_);
    if (Status st = StoreFound(s, l.slice_class, "adopt", detail); !st.ok()) {
      Log("cannot adopt slice " + s.name + " from " + ledger_->Describe() + ": " + st.message());
      continue;  // the next sample tries again
    }
    Log("adopted slice " + s.name + ": " + detail);
    slices_.push_back(std::move(s));
    counters_.slices_adopted++;
    generation_++;
    ++imported;
  }
  return imported;
}

int Registry::ExpireRegistrations(const std::vector<ProcessUsage>& processes) {
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  std::set<std::string> running;
  for (const ProcessUsage& p : processes) running.insert(p.slice);
  std::vector<std::pair<std::string, std::string>> gone;  // (slice, why)
  for (const Slice& s : slices_) {
    if (s.origin != "run" && s.origin != "adopted") continue;  // kept until deleted
    if (s.state != SliceState::kRunning || running.count(s.name) != 0) continue;
    auto holder = holders_.find(s.name);
    // A holder in gsliced's own pid namespace is known to be gone when it is not found; one in
    // another may merely be invisible from here, so only the grace period ends its registration.
    const bool holder_here = holder != holders_.end() && holder->second.pid_ns != 0 &&
                             holder->second.pid_ns == holder_pids_.own_namespace();
    if (holder != holders_.end()) {
      const PidIdentity& h = holder->second;
      if (holder_pids_.Resolve(h.pid_ns, h.pid, h.start_time) != 0) continue;  // gslice run still waits
    }
    if (holder_here) {
      gone.emplace_back(s.name, "its program ended (gslice run, pid " + std::to_string(holder->second.pid) +
                                    ", is gone and no process of it is left)");
    } else if (now - s.created_at >= options_.registration_grace_s) {
      gone.emplace_back(s.name, "no process of it is left");
    }
  }
  int expired = 0;
  for (const auto& [name, why] : gone) {
    if (Status st = RemoveSlice(name, NodeLedger::Withdrawal::kExpired, "expire", why); !st.ok()) {
      Log("slice " + name + ": cannot expire it: " + st.message());
      continue;
    }
    Log("slice " + name + " expired: " + why);
    ++expired;
  }
  return expired;
}

Status Registry::RemoveSlice(const std::string& name, NodeLedger::Withdrawal how, const std::string& event,
                             const std::string& detail) {
  Store::Transaction tx = store_->Begin();
  if (!tx.status().ok()) return tx.status();
  if (Status s = store_->DeleteSlice(name); !s.ok()) return s;
  if (Status s = store_->RecordEvent(name, event, detail); !s.ok()) return s;
  if (Status s = ledger_->Withdraw(name, how); !s.ok()) return s;
  if (Status s = tx.Commit(); !s.ok()) {
    if (Status undo = ledger_->Restore(name); !undo.ok()) Log("slice " + name + ": " + undo.message());
    return s;
  }
  std::erase_if(slices_, [&](const Slice& s) { return s.name == name; });
  holders_.erase(name);
  generation_++;
  return Status::Ok();
}

void Registry::LabelSlicesWithPods() {
  for (Slice& s : slices_) {
    if (!s.pod.empty() || !s.pod_namespace.empty()) continue;  // known, or set through the API
    std::set<std::pair<std::string, std::string>> pods;  // (namespace, pod)
    bool unnamed = false;
    for (const ProcessUsage& p : processes_) {
      if (p.slice != s.name) continue;
      if (p.pod.empty()) unnamed = true;
      else pods.emplace(p.pod_namespace, p.pod);
    }
    // A slice shared by several pods, or by a pod and processes outside any, has no one pod.
    if (pods.size() != 1 || unnamed) continue;
    Slice labelled = s;
    labelled.pod_namespace = pods.begin()->first;
    labelled.pod = pods.begin()->second;
    if (Status st = store_->PutSlice(labelled); !st.ok()) {
      Log("slice " + s.name + ": cannot store its pod: " + st.message());
      continue;
    }
    store_->RecordEvent(s.name, "pod", labelled.pod_namespace + "/" + labelled.pod);
    Log("slice " + s.name + " belongs to pod " + labelled.pod_namespace + "/" + labelled.pod);
    s = std::move(labelled);
  }
}

std::vector<std::pair<std::string, SliceChange>> Registry::ChangesFromPods() {
  std::vector<std::pair<std::string, SliceChange>> changes;
  if (pods_ == nullptr) return changes;
  for (const Slice& s : slices_) {
    if (s.pod.empty()) continue;
    const k8s::PodAnnotations ann = pods_->Annotations(s.pod_namespace, s.pod);
    const std::string& memory = ann.memory;
    const std::string& cap = ann.compute_cap;
    const std::string& cls = ann.slice_class;
    const std::string asked = memory + "|" + cap + "|" + cls;
    auto [last, fresh] = pod_asked_.try_emplace(s.name, asked);
    if (!fresh && last->second == asked) continue;
    last->second = asked;
    const std::string pod = s.pod_namespace + "/" + s.pod;
    SliceChange change;
    std::string bad;
    if (!memory.empty()) {
      size_t start = 0;
      for (;;) {
        const size_t comma = memory.find(',', start);
        const std::string item = memory.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        const bool mib = !item.empty() && item.find_first_not_of("0123456789") == std::string::npos;
        ParsedSize size = ParseSize(mib ? item + "MiB" : item);
        if (!size.ok || size.bytes == 0) {
          bad = std::string(k8s::kAnnotationMemory) + " '" + memory + "': '" + item + "' is not a size (" +
                (size.ok ? "must be more than 0" : size.error) + "); write e.g. 16GiB, or MiB as 16384";
          break;
        }
        change.memory.push_back(size.bytes);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
    if (bad.empty() && !cap.empty()) {
      ParsedPercent p = ParsePercent(cap);
      if (!p.ok || p.fraction > 1) bad = std::string(k8s::kAnnotationComputeCap) + " '" + cap + "': write e.g. 40%";
      else change.compute_cap = p.fraction;
    }
    if (bad.empty() && !cls.empty()) {
      const std::optional<SliceClass> c = ParseSliceClass(cls);
      if (!c) bad = std::string(k8s::kAnnotationClass) + " '" + cls + "': guaranteed or opportunistic";
      else change.slice_class = *c;
    }
    if (!bad.empty()) {
      Log("slice " + s.name + ": pod " + pod + ": " + bad + "; the slice stays as it is");
      store_->RecordEvent(s.name, "set", "refused: pod " + pod + ": " + bad);
      continue;
    }
    // What the slice has already (the pod's own resources, or an earlier change) is no change.
    Slice next = s;
    std::string what;
    if (!ApplyChange(change, &next, &what).ok() || !what.empty()) changes.emplace_back(s.name, std::move(change));
  }
  std::erase_if(pod_asked_, [this](const auto& entry) { return FindSlice(entry.first) == nullptr; });
  return changes;
}

void Registry::Sample() {
  // Ask NVML and the ledger without the lock: they may be slow, readers must not wait.
  auto gpus = inventory_->Scan();
  auto processes = ledger_->Processes();
  auto ledger_slices = ledger_->Slices();
  if (processes.ok() && pods_ != nullptr) pods_->Label(&processes.value());
  // Starting a control daemon again may take seconds: readers must not wait for it either.
  if (mps_ != nullptr && gpus.ok()) mps_->Reconcile(gpus.value());
  const int64_t now_ms = UnixMs();
  std::unique_lock lock(mu_);
  if (gpus.ok()) gpus_ = std::move(gpus.value());
  if (processes.ok()) {
    processes_ = std::move(processes.value());
    // A deleted slice's processes show under "~NAME" (its entry set aside) until they exit.
    std::erase_if(deleted_running_, [this](const Slice& s) {
      return std::none_of(processes_.begin(), processes_.end(),
                          [&](const ProcessUsage& p) { return p.slice == "~" + s.name; });
    });
    // Compute used: GPU busy time gained since a snapshot at least a second old, over the
    // time between (so fast sampling does not turn the meter's granularity into noise).
    std::map<std::pair<int, std::string>, uint64_t> busy;
    for (const ProcessUsage& p : processes_) {
      if (p.busy_ns != 0) busy[{p.pid, p.gpu_uuid}] = p.busy_ns;
    }
    busy_history_.emplace_back(now_ms, std::move(busy));
    while (busy_history_.size() > 2 && busy_history_[1].first <= now_ms - 1000) busy_history_.pop_front();
    compute_used_.clear();
    const auto& [base_ms, base] = busy_history_.front();
    if (now_ms > base_ms) {
      const double dt_ns = static_cast<double>(now_ms - base_ms) * 1e6;
      for (const ProcessUsage& p : processes_) {
        auto b = base.find({p.pid, p.gpu_uuid});
        if (p.busy_ns == 0 || b == base.end() || b->second > p.busy_ns) continue;
        const double used = static_cast<double>(p.busy_ns - b->second) / dt_ns;
        // More than the whole GPU is the gate catching up, not work: leave it out.
        if (used <= 1.05) compute_used_[p.slice] += std::min(used, 1.0);
      }
    }
  }
  if (ledger_slices.ok()) {
    throttled_.clear();
    for (const PublishedSlice& l : ledger_slices.value()) throttled_[l.name] = l.throttled;
    std::map<std::string, int64_t> owners;
    for (const PublishedSlice& l : ledger_slices.value()) owners[l.name] = l.owner_uid;
    for (const Slice& d : deleted_running_) {
      if (auto o = ledger_owners_.find(d.name); o != ledger_owners_.end()) owners.emplace(d.name, o->second);
    }
    ledger_owners_ = std::move(owners);
    // Slices that `gslice run` started without registering show up here too. The snapshot
    // was taken without the lock: a slice deleted or expired since then is still in it, so
    // what looks new is adopted only from a look at the ledger taken under the lock.
    bool unknown = false;
    for (const PublishedSlice& l : ledger_slices.value()) unknown = unknown || FindSlice(l.name) == nullptr;
    if (!unknown) {
      AdoptFromLedger(ledger_slices.value());
    } else if (auto now_in_ledger = ledger_->Slices(); now_in_ledger.ok()) {
      AdoptFromLedger(now_in_ledger.value());
    }
  }
  if (processes.ok()) ExpireRegistrations(processes_);
  if (processes.ok()) LabelSlicesWithPods();
  const auto pod_changes = ChangesFromPods();
  HistorySample sample;
  sample.time_ms = now_ms;
  for (const GpuInfo& g : gpus_) {
    GpuPoint p{g.uuid, g.memory_used, 0, g.utilization};
    for (const ProcessUsage& u : processes_) {
      if (u.gpu_uuid == g.uuid) p.slices_memory_used += u.memory_used;
    }
    sample.gpus.push_back(p);
  }
  for (const Slice& s : slices_) {
    SlicePoint p;
    p.name = s.name;
    for (const ProcessUsage& u : processes_) {
      if (u.slice == s.name) p.memory_used += u.memory_used;
    }
    auto c = compute_used_.find(s.name);
    p.compute_used = c == compute_used_.end() ? -1 : c->second;
    sample.slices.push_back(std::move(p));
  }
  history_.Add(std::move(sample));
  counters_.samples++;
  generation_++;
  lock.unlock();
  // A pod's annotations resize its slices as `gslice set` does, with the node's authority.
  for (const auto& [name, change] : pod_changes) {
    auto updated = UpdateSlice(name, change, Caller::Daemon());
    if (updated.ok()) {
      Log("slice " + name + " changed as its pod's annotations ask");
      continue;
    }
    Log("slice " + name + ": its pod's annotations ask for a change gsliced refused: " + updated.status().message());
    std::lock_guard again(mu_);
    store_->RecordEvent(name, "set", "refused: pod annotations: " + updated.status().message());
    generation_++;
  }
  ApplyMpsPlan();
}

void Registry::StopMps() {
  if (mps_ != nullptr) mps_->Stop();
}

std::vector<MpsCandidate> Registry::MpsCandidates() const {
  std::vector<MpsCandidate> out;
  auto add = [&](const Slice& s, bool deleted) {
    MpsCandidate c{.slice = s.name,
                   .uid = s.owner_uid,
                   .gpus = {},
                   .created_at = s.created_at,
                   .deleted = deleted,
                   .slice_class = s.slice_class};
    // A slice made for someone without an account here (a pod's namespace), or found in the
    // ledger: its programs run as the uid its usage is given to.
    if (auto o = ledger_owners_.find(s.name); c.uid < 0 && o != ledger_owners_.end()) c.uid = o->second;
    for (const SliceGpu& g : s.gpus) c.gpus.push_back(g.uuid);
    out.push_back(std::move(c));
  };
  for (const Slice& s : slices_) add(s, false);
  for (const Slice& s : deleted_running_) add(s, true);
  return out;
}

void Registry::ApplyMpsPlan() {
  if (mps_ == nullptr) return;
  struct Handing {
    std::string uuid;
    int64_t uid;
    std::optional<SliceClass> cls;
  };
  std::vector<Handing> hands;
  {
    std::lock_guard lock(mu_);
    std::vector<MpsGpuState> gpus;
    for (const MpsDaemonState& d : mps_->States()) gpus.push_back(d.gpu);
    const MpsPlan plan = PlanMps(gpus, MpsCandidates(), mps_->classes());
    for (const MpsGpuState& g : gpus) {
      if (!g.sharing.mps) continue;
      // The plan's tenant is the one the GPU has, or the uid (and class) of its oldest slice
      // that would use it, or none: a GPU is never given to a uid without such a slice.
      const GpuSharing& target = plan.gpus.at(g.uuid);
      if (target.tenant_uid != g.tenant_uid || target.tenant_class != g.tenant_class || g.busy_uid >= 0) {
        hands.push_back({g.uuid, target.tenant_uid, target.tenant_class});
      }
    }
  }
  for (const Handing& h : hands) mps_->Hand(h.uuid, h.uid, h.cls);
  if (!hands.empty()) generation_++;
}

NodeSnapshot Registry::Snapshot() {
  std::lock_guard lock(mu_);
  NodeSnapshot snap;
  snap.time_ms = UnixMs();
  snap.ledger = ledger_->Describe();
  auto commitments = CommitmentsByGpu(slices_);
  // How each GPU and each slice on it shares (mps_plan.h).
  std::vector<MpsDaemonState> daemons = mps_ != nullptr ? mps_->States() : std::vector<MpsDaemonState>{};
  std::vector<MpsGpuState> planned;
  for (const MpsDaemonState& d : daemons) planned.push_back(d.gpu);
  const MpsPlan plan = PlanMps(planned, MpsCandidates(), mps_ != nullptr ? mps_->classes() : MpsClasses::kOne);
  auto daemon_of = [&daemons](const std::string& uuid) -> const MpsDaemonState* {
    for (const MpsDaemonState& d : daemons) {
      if (d.gpu.uuid == uuid) return &d;
    }
    return nullptr;
  };
  for (const GpuInfo& g : gpus_) {
    GpuView v{g, 0, 0, 0};
    auto it = commitments.find(g.uuid);
    if (it != commitments.end()) {
      v.guaranteed_memory = it->second.guaranteed_memory;
      v.guaranteed_compute = it->second.guaranteed_compute;
      v.slices = it->second.slices;
    }
    if (auto p = plan.gpus.find(g.uuid); p != plan.gpus.end()) {
      v.sharing = p->second;
    } else if (mps_ == nullptr) {
      v.sharing = {.reason = "mps-off", .why = "this gsliced runs no MPS: every slice on GPU " + std::to_string(g.index) +
                                                   " is time-sliced"};
    } else {
      v.sharing = {.reason = "daemon-down", .why = "gsliced has not looked at GPU " + std::to_string(g.index) +
                                                       "'s MPS yet: time-sliced until it has"};
    }
    if (const MpsDaemonState* d = daemon_of(g.uuid); d != nullptr) v.mps_restarts = d->restarts;
    snap.gpus.push_back(std::move(v));
  }
  for (const Slice& s : slices_) {
    SliceView v;
    v.slice = s;
    for (const ProcessUsage& u : processes_) {
      if (u.slice != s.name) continue;
      v.processes.push_back(u);
      v.memory_used[u.gpu_uuid] += u.memory_used;
    }
    auto t = throttled_.find(s.name);
    v.throttled = t != throttled_.end() && t->second;
    auto c = compute_used_.find(s.name);
    v.compute_used = c == compute_used_.end() ? -1 : c->second;
    for (const SliceGpu& g : s.gpus) {
      SliceGpuSharing& sharing = v.sharing[g.uuid];
      auto p = plan.slices.find({s.name, g.uuid});
      const MpsDaemonState* d = daemon_of(g.uuid);
      if (p == plan.slices.end()) {
        sharing.why = "time-sliced: gsliced runs no MPS on it";
        for (const GpuView& gv : snap.gpus) {
          if (gv.gpu.uuid == g.uuid) sharing.why = gv.sharing.why;
        }
        continue;
      }
      sharing.mps = p->second.mps;
      sharing.why = p->second.why;
      if (sharing.mps && d != nullptr) {
        sharing.uid = d->gpu.tenant_uid;
        sharing.slice_class = d->gpu.tenant_class;
        sharing.pipe_directory = d->pipe_directory;
        sharing.log_directory = d->log_directory;
      }
    }
    const std::string observed = s.state == SliceState::kRunning ? suspender_->ObservedState(s.name) : "";
    if (s.state != SliceState::kRunning) {
      v.activity = std::string(ToString(s.state));
    } else if (!observed.empty()) {
      v.activity = observed;  // idle reclaim or preemption (docs/suspend.md)
    } else if (v.throttled) {
      v.activity = "throttled";
    } else {
      v.activity = v.processes.empty() ? "idle" : "running";
    }
    snap.slices.push_back(std::move(v));
  }
  for (const Project& p : projects_) {
    ProjectUsage u = UsageOfProject(p.name, slices_);
    snap.projects.push_back(ProjectView{p, u.guaranteed_memory, u.guaranteed_compute, u.slices});
  }
  snap.users = users_;
  return snap;
}

std::vector<HistorySample> Registry::HistorySince(int64_t since_ms) {
  std::lock_guard lock(mu_);
  return history_.Since(since_ms);
}

Result<SliceView> Registry::GetSlice(const std::string& name) {
  NodeSnapshot snap = Snapshot();
  for (SliceView& v : snap.slices) {
    if (v.slice.name == name) return std::move(v);
  }
  return NoSuchSlice(name);
}

int Registry::OtherEntries() const {
  std::set<std::string> known;
  for (const Slice& s : slices_) known.insert(s.name);
  // Before the next sample its processes still show under its own name.
  for (const Slice& s : deleted_running_) known.insert({s.name, "~" + s.name});
  std::set<std::string> other;
  for (const ProcessUsage& p : processes_) {
    if (known.count(p.slice) == 0) other.insert(p.slice);
  }
  return static_cast<int>(other.size());
}

const Project* Registry::FindProject(const std::string& name) const {
  for (const Project& p : projects_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

Slice* Registry::FindSlice(const std::string& name) {
  for (Slice& s : slices_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

Status Registry::ResolveGpus(const SliceRequest& request, Slice* slice) {
  if (request.gpus.empty()) {
    return Status::BadRequest("no GPU asked for: give at least one, e.g. --gpus 0");
  }
  for (const SliceRequest::Gpu& g : request.gpus) {
    const GpuInfo* found = nullptr;
    for (const GpuInfo& info : gpus_) {
      if (info.uuid == g.ref || std::to_string(info.index) == g.ref) found = &info;
    }
    if (found == nullptr) {
      std::string have;
      for (const GpuInfo& info : gpus_) {
        have += (have.empty() ? "" : ", ") + std::to_string(info.index) + " (" + info.uuid + ")";
      }
      return Status::BadRequest("GPU '" + g.ref + "' is not on this node; it has " +
                                (have.empty() ? std::string("no GPU") : have));
    }
    slice->gpus.push_back(SliceGpu{found->uuid, g.memory, g.compute});
  }
  return Status::Ok();
}

Result<Slice> Registry::CreateSlice(const SliceRequest& request, bool by_admin) {
  if (Status s = ValidateName("user", request.user); !s.ok()) return s;
  const int64_t owner_uid = request.owner_uid >= 0 && request.owner_uid <= kMaxUid ? request.owner_uid : -1;
  // Outside the lock: the passwd and group databases may be slow to answer (LDAP).
  const bool admin = by_admin || OwnerIsAdmin(owner_uid, options_.admin_group);
  std::unique_lock lock(mu_);
  Slice slice;
  slice.user = request.user;
  slice.owner_uid = owner_uid;
  slice.project = request.project.empty() ? options_.default_project : request.project;
  if (Status s = ValidateName("project", slice.project); !s.ok()) return s;
  const Project* project = FindProject(slice.project);
  if (project == nullptr) {
    return Status::NotFound("project '" + slice.project +
                            "' does not exist: create it first (POST /v1/projects) or use "
                            "project '" + options_.default_project + "'");
  }
  slice.name = request.name;
  if (slice.name.empty()) {
    for (int n = 1;; ++n) {
      slice.name = request.user + "-" + std::to_string(n);
      if (FindSlice(slice.name) == nullptr) break;
    }
  }
  if (Status s = ValidateName("slice", slice.name); !s.ok()) return s;
  if (FindSlice(slice.name) != nullptr) {
    return Status::Conflict("slice '" + slice.name +
                            "' exists already: pick another name or delete it first");
  }
  slice.slice_class = request.slice_class;
  if (Status s = ValidateProtect(request.slice_class, request.protect_permille); !s.ok()) return s;
  slice.protect_permille = request.protect_permille;
  slice.origin = request.origin;
  slice.pod = request.pod;
  slice.pod_namespace = request.pod_namespace;
  slice.idle_timeout_s = request.idle_timeout_s;
  slice.remote_client = request.remote_client;
  slice.created_at = static_cast<int64_t>(std::time(nullptr));
  if (Status s = ResolveGpus(request, &slice); !s.ok()) return s;
  Status admitted = AdmitToTable(slice, admin, slices_, deleted_running_, OtherEntries(), options_.shares,
                                 options_.default_project);
  if (admitted.ok()) admitted = Admit(slice, gpus_, slices_, *project);
  if (!admitted.ok()) {
    counters_.admission_refusals++;
    generation_++;
    return admitted;
  }
  // The database first, in one transaction; the ledger inside it, so that a failed
  // statement leaves the ledger untouched and a failed commit withdraws what was published.
  {
    Store::Transaction tx = store_->Begin();
    if (!tx.status().ok()) return tx.status();
    if (Status s = store_->PutUser(User{slice.user, slice.created_at}); !s.ok()) return s;
    if (Status s = store_->PutSlice(slice); !s.ok()) return s;
    if (Status s = store_->RecordEvent(slice.name, "create", std::string(ToString(slice.slice_class)) + " for " +
                                                                 slice.user + " in " + slice.project);
        !s.ok()) {
      return s;
    }
    if (Status s = ledger_->PublishNew(slice); !s.ok()) return s;
    if (Status s = tx.Commit(); !s.ok()) {
      if (Status undo = ledger_->Withdraw(slice.name, NodeLedger::Withdrawal::kDeleted); !undo.ok()) {
        Log("slice " + slice.name + ": cannot withdraw it after a failed commit: " + undo.message());
      }
      return s;
    }
  }
  bool known_user = false;
  for (const User& u : users_) known_user = known_user || u.name == slice.user;
  if (!known_user) users_.push_back(User{slice.user, slice.created_at});
  slices_.push_back(slice);
  if (request.holder.pid != 0) holders_[slice.name] = request.holder;
  counters_.slices_created++;
  generation_++;
  lock.unlock();
  // Its GPU's MPS is given to its uid before the answer, where the slice takes it.
  ApplyMpsPlan();
  return slice;
}

Result<Slice*> Registry::SliceToChange(const std::string& name, const Caller& caller, const char* verb) {
  Slice* slice = FindSlice(name);
  if (slice == nullptr) {
    return NoSuchSlice(name);
  }
  if (Status s = MayChange(*slice, caller); !s.ok()) return s;
  if (slice->state == SliceState::kSuspending || slice->state == SliceState::kResuming) {
    return Status::Conflict("slice '" + name + "' is " + std::string(ToString(slice->state)) +
                            ": wait until it is done, then " + verb + " it");
  }
  return slice;
}

Status Registry::DeleteSlice(const std::string& name, const Caller& caller) {
  std::unique_lock lock(mu_);
  Result<Slice*> found = SliceToChange(name, caller, "delete");
  if (!found.ok()) return found.status();
  const Slice gone = *found.value();
  // Its processes, if any, run on under their limits until they exit; the slice is gone
  // from the registry and, withdrawn from the ledger, never adopted back.
  int running = 0;
  for (const ProcessUsage& p : processes_) running += p.slice == name ? 1 : 0;
  std::string detail;
  if (running > 0) detail = std::to_string(running) + " process(es) run on under its limits until they exit";
  if (Status s = RemoveSlice(name, NodeLedger::Withdrawal::kDeleted, "delete", detail); !s.ok()) return s;
  if (running > 0) deleted_running_.push_back(gone);  // its entry stays taken meanwhile
  counters_.slices_deleted++;
  lock.unlock();
  ApplyMpsPlan();  // its GPUs' MPS may pass to another uid
  return Status::Ok();
}

Result<Slice> Registry::SuspendSlice(const std::string& name, const Caller& caller) {
  counters_.suspend_requests++;
  generation_++;
  return Transition(name, true, caller);
}

Result<Slice> Registry::ResumeSlice(const std::string& name, const Caller& caller) {
  counters_.resume_requests++;
  generation_++;
  return Transition(name, false, caller);
}

Result<Slice> Registry::Transition(const std::string& name, bool suspend, const Caller& caller) {
  const SliceState from = suspend ? SliceState::kRunning : SliceState::kSuspended;
  const SliceState during = suspend ? SliceState::kSuspending : SliceState::kResuming;
  const SliceState to = suspend ? SliceState::kSuspended : SliceState::kRunning;
  const char* verb = suspend ? "suspend" : "resume";
  Slice copy;
  std::vector<int> pids;
  {
    std::lock_guard lock(mu_);
    Slice* slice = FindSlice(name);
    if (slice == nullptr) {
      return NoSuchSlice(name);
    }
    if (Status s = MayChange(*slice, caller); !s.ok()) return s;
    if (slice->state == to) return *slice;  // already there: nothing to do
    if (slice->state != from) {
      return Status::Conflict("slice '" + name + "' is " + std::string(ToString(slice->state)) +
                              ", cannot " + verb + " it now");
    }
    slice->state = during;
    store_->PutSlice(*slice);
    store_->RecordEvent(name, verb, "requested");
    generation_++;
    copy = *slice;
    for (const ProcessUsage& p : processes_) {
      if (p.slice == name) pids.push_back(p.pid);
    }
  }
  // The mechanism may take seconds; readers see the intermediate state meanwhile.
  Status result = suspend ? suspender_->Suspend(copy, pids) : suspender_->Resume(copy, pids);
  std::lock_guard lock(mu_);
  Slice* slice = FindSlice(name);
  if (slice == nullptr) return Status::NotFound("slice '" + name + "' was deleted meanwhile");
  if (result.ok()) {
    slice->state = to;
    slice->last_error.clear();
  } else {
    // The processes were not touched (or were put back): the slice stays as it was.
    slice->state = from;
    slice->last_error = result.message();
  }
  store_->PutSlice(*slice);
  generation_++;
  store_->RecordEvent(name, verb, result.ok() ? "done" : "refused: " + result.message());
  if (!result.ok()) return result;
  return *slice;
}


Result<SliceUpdate> Registry::UpdateSlice(const std::string& name, const SliceChange& change, const Caller& caller) {
  SliceUpdate update;
  bool reclassed = false;
  for (int attempt = 0;; ++attempt) {
    std::map<std::string, uint64_t> held;
    std::string holds;
    {
      std::lock_guard lock(mu_);
      Result<Slice*> found = SliceToChange(name, caller, "change");
      if (!found.ok()) return found.status();
      Slice* slice = found.value();
      Slice next = *slice;
      std::string what;
      if (Status s = ApplyChange(change, &next, &what); !s.ok()) return s;
      const Project* project = FindProject(next.project);
      if (project == nullptr) return Status::NotFound("slice '" + name + "': its project '" + next.project + "' is gone");
      std::vector<Slice> others;
      for (const Slice& o : slices_) {
        if (o.name != name) others.push_back(o);
      }
      if (Status s = Admit(next, gpus_, others, *project); !s.ok()) {
        counters_.admission_refusals++;
        generation_++;
        return s;
      }
      const bool compute = change.compute_cap.has_value() || change.compute_share.has_value();
      Store::Transaction tx = store_->Begin();
      if (!tx.status().ok()) return tx.status();
      if (Status s = store_->PutSlice(next); !s.ok()) return s;
      if (Status s = store_->RecordEvent(name, "set", what.empty() ? "no change" : what); !s.ok()) return s;
      // A suspended slice holds no GPU memory: what it restores counts against the new limit.
      Status published = ledger_->Resize(next, compute, slice->state == SliceState::kSuspended ? nullptr : &held);
      if (published.ok()) {
        if (Status s = tx.Commit(); !s.ok()) {
          if (Status undo = ledger_->Resize(*slice, compute, nullptr); !undo.ok()) {
            Log("slice " + name + ": cannot put its limits back after a failed commit: " + undo.message());
          }
          return s;
        }
        reclassed = slice->slice_class != next.slice_class;
        *slice = next;
        generation_++;
        update.slice = next;
        if (!reclassed) return update;
        break;  // out of the lock: its GPUs' MPS may pass to its new class (mps_plan.h)
      }
      if (held.empty()) return published;
      holds = HeldText(next, held, gpus_);
      if (!change.make_room || attempt > 0) {
        std::string refusal = "slice '" + name + "' holds " + holds + ": nothing changed";
        if (attempt > 0) return Status::Conflict(refusal + " (even suspended, it holds that memory)");
        return Status::Conflict(refusal + "; free memory in it first, or make room by suspending it "
                                "(gslice set --make-room; \"make_room\": true)");
      }
    }
    // Make room: its memory moves to the host, and the change goes through with what is left.
    auto suspended = SuspendSlice(name, caller);
    if (!suspended.ok()) {
      return Status::Conflict("slice '" + name + "' holds " + holds + ", and suspending it to make room failed: " +
                              suspended.status().message() + "; nothing changed");
    }
    update.note = "suspended slice '" + name + "' to make room: it held " + holds + "; `gslice resume " + name +
                  "` brings it back (what it restores counts against the new limit)";
  }
  ApplyMpsPlan();
  return update;
}

Result<Project> Registry::CreateProject(const Project& project) {
  if (Status s = ValidateName("project", project.name); !s.ok()) return s;
  std::lock_guard lock(mu_);
  if (FindProject(project.name) != nullptr) {
    return Status::Conflict("project '" + project.name + "' exists already: update it with PUT");
  }
  Project p = project;
  p.created_at = static_cast<int64_t>(std::time(nullptr));
  if (Status s = store_->PutProject(p); !s.ok()) return s;
  projects_.push_back(p);
  generation_++;
  return p;
}

Result<Project> Registry::UpdateProject(const Project& project) {
  std::lock_guard lock(mu_);
  const Project* existing = FindProject(project.name);
  if (existing == nullptr) {
    return Status::NotFound("no project named '" + project.name + "'");
  }
  Project p = project;
  p.created_at = existing->created_at;
  // Lowering a quota below what is in use admits nothing new; running slices stay.
  if (Status s = store_->PutProject(p); !s.ok()) return s;
  for (Project& q : projects_) {
    if (q.name == p.name) q = p;
  }
  generation_++;
  return p;
}

Status Registry::DeleteProject(const std::string& name) {
  std::lock_guard lock(mu_);
  if (FindProject(name) == nullptr) return Status::NotFound("no project named '" + name + "'");
  if (name == options_.default_project) {
    return Status::Conflict("project '" + name + "' is the default project and stays");
  }
  for (const Slice& s : slices_) {
    if (s.project == name) {
      return Status::Conflict("project '" + name + "' still has slices (" + s.name +
                              "): delete them first");
    }
  }
  if (Status s = store_->DeleteProject(name); !s.ok()) return s;
  std::erase_if(projects_, [&](const Project& p) { return p.name == name; });
  generation_++;
  return Status::Ok();
}

Result<User> Registry::CreateUser(const std::string& name) {
  if (Status s = ValidateName("user", name); !s.ok()) return s;
  std::lock_guard lock(mu_);
  for (const User& u : users_) {
    if (u.name == name) return u;
  }
  User u{name, static_cast<int64_t>(std::time(nullptr))};
  if (Status s = store_->PutUser(u); !s.ok()) return s;
  users_.push_back(u);
  generation_++;
  return u;
}

Result<std::vector<Store::Event>> Registry::RecentEvents(int limit) {
  std::lock_guard lock(mu_);
  return store_->RecentEvents(limit);
}

}  // namespace gslice
