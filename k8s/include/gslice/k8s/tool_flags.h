// Small helpers the k8s programs share for their flags.
#pragma once

#include <string>

namespace gslice::k8s {

// Reads a whole file (a token, a quota file) with trailing newlines and spaces removed.
bool ReadFile(const std::string& path, std::string* out);

// Parses a decimal integer in [lo, hi]; false for anything else (empty, junk, out of range).
bool ParseInt(const std::string& s, long lo, long hi, long* out);

}  // namespace gslice::k8s
