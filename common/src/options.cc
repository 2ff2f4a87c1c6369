#include "gslice/options.h"

#include <stdlib.h>

namespace gslice {

const char* OptionValue(Option o) {
  const OptionInfo& info = GetOptionInfo(o);
  const char* v = getenv(info.env);
  return v != nullptr ? v : info.default_value;
}

bool OptionIsSet(Option o) { return getenv(GetOptionInfo(o).env) != nullptr; }

}  // namespace gslice
