#include "model.h"

namespace gslice {

std::string_view ToString(SliceClass c) {
  return c == SliceClass::kGuaranteed ? "guaranteed" : "opportunistic";
}

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

bool ParseSliceClass(std::string_view text, SliceClass* out) {
  if (text == "guaranteed") {
    *out = SliceClass::kGuaranteed;
  } else if (text == "opportunistic") {
    *out = SliceClass::kOpportunistic;
  } else {
    return false;
  }
  return true;
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
