#include "model.h"

#include <cstdio>

namespace gslice {

std::string_view ToString(SliceState s) {
  switch (s) {
    case SliceState::kRunning: return "running";
    case SliceState::kSuspending: return "suspending";
    case SliceState::kSuspended: return "suspended";
    case SliceState::kResuming: return "resuming";
    case SliceState::kFailed: return "failed";
  }
  return "failed";
}

bool ParseSliceState(std::string_view text, SliceState* out) {
  for (SliceState s : {SliceState::kRunning, SliceState::kSuspending, SliceState::kSuspended,
                       SliceState::kResuming, SliceState::kFailed}) {
    if (ToString(s) == text) {
      *out = s;
      return true;
    }
  }
  return false;
}

Status ValidateProtect(SliceClass cls, uint32_t permille) {
  if (permille == 0) return Status::Ok();
  if (cls != SliceClass::kGuaranteed) {
    return Status::BadRequest("protect: only guaranteed slices have a protection level (the share of their solo "
                              "speed kept against opportunistic work); leave it out for an opportunistic slice");
  }
  if (!ValidProtectPermille(permille)) {
    return Status::BadRequest("protect: " + FormatProtect(permille) + " is out of range: from " +
                              FormatProtect(kProtectMinPermille) + " to " + FormatProtect(kProtectMaxPermille) +
                              " (the fraction of the slice's solo speed kept; default " +
                              FormatProtect(kProtectDefaultPermille) + ")");
  }
  return Status::Ok();
}

std::string FormatProtect(uint32_t permille) {
  char buf[32];
  snprintf(buf, sizeof buf, "%.3g", permille / 1000.0);
  return buf;
}

Status ValidateName(std::string_view what, std::string_view name) {
  std::string w(what);
  if (name.empty()) return Status::BadRequest(w + " name is empty");
  if (name.size() > 63) {
    return Status::BadRequest(w + " name '" + std::string(name.substr(0, 63)) +
                              "…' is longer than 63 characters");
  }
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name[0])) {
    return Status::BadRequest(w + " name '" + std::string(name) +
                              "' must start with a lower-case letter or a digit");
  }
  for (char c : name) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.') {
      return Status::BadRequest(w + " name '" + std::string(name) +
                                "' may hold only a-z, 0-9, '-', '_' and '.'");
    }
  }
  return Status::Ok();
}

}  // namespace gslice
