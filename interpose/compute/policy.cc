#include "policy.h"

#include <stdio.h>
#include <string.h>

#include "gslice/units.h"

namespace gslice::compute {
namespace {

bool ParsePermille(const char* var, const char* text, uint32_t lo, uint32_t* out, char* error, int size) {
  ParsedPercent p = ParsePercent(text);
  if (!p.ok) {
    snprintf(error, static_cast<size_t>(size), "%s=%s: %s", var, text, p.error);
    return false;
  }
  uint32_t permille = static_cast<uint32_t>(p.fraction * 1000.0 + 0.5);
  if (permille < lo || permille > 1000) {
    snprintf(error, static_cast<size_t>(size), "%s=%s: must be between %.1f%% and 100%%", var, text, lo / 10.0);
    return false;
  }
  *out = permille;
  return true;
}

}  // namespace

bool ParseComputePolicy(const char* cap, const char* share, const char* cls, ComputePolicy* out,
                        char* error, int size) {
  ComputePolicy p;
  if (cap != nullptr && cap[0] != '\0' && !ParsePermille("GSLICE_COMPUTE", cap, 10, &p.cap_permille, error, size)) {
    return false;
  }
  if (share != nullptr && share[0] != '\0') {
    if (!ParsePermille("GSLICE_SHARE", share, 10, &p.share_permille, error, size)) return false;
    p.share_set = true;
  }
  if (cls != nullptr && cls[0] != '\0') {
    if (strcmp(cls, "guaranteed") == 0) {
      p.cls = ComputeClass::kGuaranteed;
    } else if (strcmp(cls, "opportunistic") == 0) {
      p.cls = ComputeClass::kOpportunistic;
    } else {
      snprintf(error, static_cast<size_t>(size), "GSLICE_CLASS=%s: must be guaranteed or opportunistic", cls);
      return false;
    }
  }
  *out = p;
  return true;
}

ComputePolicy EffectivePolicy(const ComputePolicy& env, const SlicePolicy& slice, int start_class) {
  ComputePolicy p = env;
  if (slice.cap_permille >= 0) {
    p.cap_permille = slice.cap_permille == 0 || slice.cap_permille >= 1000 ? 1000u : static_cast<uint32_t>(slice.cap_permille);
  }
  if (slice.share_permille > 0) {
    p.share_permille = slice.share_permille > 1000 ? 1000u : static_cast<uint32_t>(slice.share_permille);
    p.share_set = true;
  } else if (slice.share_permille == 0) {
    p.share_permille = 1000;
    p.share_set = false;
  }
  constexpr int kOpportunistic = static_cast<int>(ComputeClass::kOpportunistic);
  if (slice.slice_class >= 0 && slice.slice_class != start_class) {
    p.cls = slice.slice_class == kOpportunistic ? ComputeClass::kOpportunistic : ComputeClass::kGuaranteed;
  } else if (slice.slice_class == kOpportunistic) {
    p.cls = ComputeClass::kOpportunistic;
  }
  return p;
}

}  // namespace gslice::compute
