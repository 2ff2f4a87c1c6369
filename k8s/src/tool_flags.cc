#include "gslice/k8s/tool_flags.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace gslice::k8s {

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  while (!out->empty() && (out->back() == '\n' || out->back() == ' ')) out->pop_back();
  return true;
}

bool ParseInt(const std::string& s, long lo, long hi, long* out) {
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace gslice::k8s
