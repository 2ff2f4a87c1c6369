#include "gslice/suspend/daemon_suspender.h"

#include <mutex>
#include <utility>

#include "gslice/options.h"
#include "gslice/suspend/service.h"

namespace gslice {
namespace {

class CheckpointSuspender final : public Suspender {
 public:
  explicit CheckpointSuspender(std::unique_ptr<suspend::SuspendService> service)
      : service_(std::move(service)) {}
  ~CheckpointSuspender() override { service_->Stop(); }

  Status Suspend(const Slice& slice, const std::vector<int>& pids) override {
    if (pids.empty()) return Status::Conflict("slice '" + slice.name + "' has no running process to suspend");
    std::vector<suspend::Outcome> outs = service_->SuspendPids(pids);
    for (const suspend::Outcome& o : outs) {
      if (!o.ok && !o.exited) {
        return Status::Conflict("slice '" + slice.name + "': process " + std::to_string(o.pid) + ": " + o.reason);
      }
    }
    return Status::Ok();
  }

  Status Resume(const Slice& slice, const std::vector<int>& pids) override {
    for (const suspend::Outcome& o : service_->ResumePids(pids)) {
      if (!o.ok && !o.exited) {
        return Status::Conflict("slice '" + slice.name + "': process " + std::to_string(o.pid) + ": " + o.reason);
      }
    }
    return Status::Ok();
  }

  std::string ObservedState(const std::string& slice) override {
    const suspend::State st = service_->manager().SliceState(slice);
    return st == suspend::State::kRunning ? "" : suspend::StateName(st);
  }

  void SetIdle(std::function<int64_t(const std::string&)> f) {
    std::lock_guard<std::mutex> lock(mu_);
    idle_ = std::move(f);
  }
  int64_t Idle(const std::string& slice) {
    std::function<int64_t(const std::string&)> f;
    {
      std::lock_guard<std::mutex> lock(mu_);
      f = idle_;
    }
    return f ? f(slice) : 0;
  }
  suspend::SuspendService& service() { return *service_; }

 private:
  std::unique_ptr<suspend::SuspendService> service_;
  std::mutex mu_;
  std::function<int64_t(const std::string&)> idle_;
};

}  // namespace

std::unique_ptr<Suspender> MakeCheckpointSuspender(const CheckpointSuspenderOptions& options,
                                                   std::string* note) {
  suspend::ServiceOptions o;
  o.ledger_path = options.ledger_path;
  o.board_path = options.board_path.empty() ? OptionValue(Option::SuspendBoard) : options.board_path;
  o.driver_library = options.driver_library;
  o.nvml_library = options.nvml_library;
  // The service is created before the adapter that answers idle timeouts; route through a
  // holder filled in below.
  auto holder = std::make_shared<CheckpointSuspender*>(nullptr);
  o.idle_timeout_s = [holder](const std::string& slice) -> int64_t {
    return *holder != nullptr ? (*holder)->Idle(slice) : 0;
  };
  std::string error;
  auto service = suspend::SuspendService::Create(o, &error);
  if (!service) {
    *note = "suspend/resume unavailable: " + error;
    return MakeUnavailableSuspender();
  }
  auto s = std::make_unique<CheckpointSuspender>(std::move(service));
  *holder = s.get();
  s->service().Start();
  note->clear();
  return s;
}

void SetIdleTimeouts(Suspender* suspender, std::function<int64_t(const std::string& slice)> idle_timeout_s) {
  if (auto* s = dynamic_cast<CheckpointSuspender*>(suspender)) s->SetIdle(std::move(idle_timeout_s));
}

}  // namespace gslice
