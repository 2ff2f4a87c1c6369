// gslice's environment variables, generated from options.def (the single table).
// Lookup is getenv + default; no allocation, safe inside the shim.
#pragma once

#include <cstddef>

namespace gslice {

enum class Option {
#define GSLICE_OPTION(id, env, def, doc) id,
#include "gslice/options.def"
#undef GSLICE_OPTION
};

struct OptionInfo {
  Option id;
  const char* env;
  const char* default_value;
  const char* doc;
};

inline constexpr OptionInfo kOptions[] = {
#define GSLICE_OPTION(id, env, def, doc) {Option::id, env, def, doc},
#include "gslice/options.def"
#undef GSLICE_OPTION
};

inline constexpr size_t kOptionCount = sizeof(kOptions) / sizeof(kOptions[0]);

inline constexpr const OptionInfo& GetOptionInfo(Option o) { return kOptions[static_cast<size_t>(o)]; }

inline constexpr const char* OptionEnv(Option o) { return GetOptionInfo(o).env; }

// The variable's value, or its default when unset. Never null.
const char* OptionValue(Option o);

// True when the variable is set in the environment (even to "").
bool OptionIsSet(Option o);

}  // namespace gslice
