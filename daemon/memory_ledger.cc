#include <map>
#include <mutex>

#include "node_ledger.h"

namespace gslice {
namespace {

class MemoryLedger final : public NodeLedger {
 public:
  std::string Describe() const override { return "in-process ledger"; }
  Result<std::vector<PublishedSlice>> Slices() override {
    std::lock_guard lock(mu_);
    return slices_;
  }
  Result<std::vector<ProcessUsage>> Processes() override { return std::vector<ProcessUsage>{}; }
  Status Publish(const Slice& slice) override {
    std::lock_guard lock(mu_);
    PublishedSlice ls{slice.name, slice.slice_class, slice.gpus, false, slice.protect_permille, slice.owner_uid};
    for (PublishedSlice& s : slices_) {
      if (s.name == slice.name) {
        s = ls;
        return Status::Ok();
      }
    }
    slices_.push_back(ls);
    return Status::Ok();
  }
  Status PublishNew(const Slice& slice) override {
    std::lock_guard lock(mu_);
    std::erase_if(slices_, [&](const PublishedSlice& s) { return s.name == slice.name; });
    slices_.push_back(PublishedSlice{slice.name, slice.slice_class, slice.gpus, false, slice.protect_permille, slice.owner_uid});
    return Status::Ok();
  }
  Status SetClass(const std::string& name, SliceClass slice_class) override {
    std::lock_guard lock(mu_);
    for (PublishedSlice& s : slices_) {
      if (s.name == name) s.slice_class = slice_class;
    }
    return Status::Ok();
  }
  Status Withdraw(const std::string& name, Withdrawal) override {
    std::lock_guard lock(mu_);
    for (const PublishedSlice& s : slices_) {
      if (s.name == name) withdrawn_[name] = s;
    }
    std::erase_if(slices_, [&](const PublishedSlice& s) { return s.name == name; });
    return Status::Ok();
  }
  Status Restore(const std::string& name) override {
    std::lock_guard lock(mu_);
    auto it = withdrawn_.find(name);
    if (it == withdrawn_.end()) return Status::Ok();
    bool reused = false;
    for (const PublishedSlice& s : slices_) reused = reused || s.name == name;
    if (!reused) slices_.push_back(it->second);
    withdrawn_.erase(it);
    return Status::Ok();
  }

 private:
  std::mutex mu_;
  std::vector<PublishedSlice> slices_;
  std::map<std::string, PublishedSlice> withdrawn_;  // for Restore
};

}  // namespace

std::unique_ptr<NodeLedger> MakeMemoryLedger() { return std::make_unique<MemoryLedger>(); }

}  // namespace gslice
