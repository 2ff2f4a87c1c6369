// A slice's class, defined once for every layer: the ledger stores it, gsliced's API and
// store, the CLI and the Kubernetes pieces read and write it by name.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace gslice {

// guaranteed: its compute share is reserved, and opportunistic work on its GPU must leave it
// its protection level; opportunistic: it runs in what guaranteed slices leave idle.
// The values are the ledger's layout (LedgerSlice): never renumber them.
enum class SliceClass : uint32_t { kGuaranteed = 0, kOpportunistic = 1 };

// "guaranteed" or "opportunistic".
constexpr std::string_view ToString(SliceClass c) {
  return c == SliceClass::kGuaranteed ? "guaranteed" : "opportunistic";
}

// The class named text ("guaranteed", "opportunistic"); nullopt for anything else.
constexpr std::optional<SliceClass> ParseSliceClass(std::string_view text) {
  if (text == "guaranteed") return SliceClass::kGuaranteed;
  if (text == "opportunistic") return SliceClass::kOpportunistic;
  return std::nullopt;
}

}  // namespace gslice
