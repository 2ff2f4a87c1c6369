#include "daemon_commands.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "gslice/units.h"

namespace gslice::cli {

bool ParseCommonFlags(const char* command, int argc, char** argv, CommonFlags* flags,
                      std::vector<std::string>* rest) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      flags->help = true;
    } else if (arg == "--json") {
      flags->json = true;
    } else if (arg == "--socket") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gslice %s: --socket needs a path, e.g. --socket /run/gsliced/gsliced.sock\n", command);
        return false;
      }
      flags->socket = argv[++i];
    } else if (arg.rfind("--socket=", 0) == 0) {
      flags->socket = arg.substr(9);
    } else if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
      rest->push_back(arg.substr(0, arg.find('=')));
      rest->push_back(arg.substr(arg.find('=') + 1));
    } else {
      rest->push_back(arg);
    }
  }
  return true;
}

std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

bool ParseIdleTimeout(const std::string& text, int64_t* seconds) {
  if (text == "never" || text == "0") {
    *seconds = 0;
    return true;
  }
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  const std::string unit = end;
  const double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : 0;
  if (end == text.c_str() || scale == 0 || !(value > 0) || value * scale > 365.0 * 86400) return false;
  *seconds = static_cast<int64_t>(value * scale);
  return true;
}

bool CallDaemon(const char* command, const CommonFlags& flags, const std::string& method,
                const std::string& path, const std::string& body, DaemonReply* reply, int timeout_ms) {
  DaemonAddress address = DaemonAddressFromEnvironment(flags.socket);
  *reply = DaemonClient(address).Call(method, path, body, timeout_ms);
  if (!reply->connected) {
    std::fprintf(stderr, "gslice %s: %s\n", command, NoDaemonHint(*reply, address).c_str());
    return false;
  }
  if (!reply->ok()) {
    std::string hint;
    if (reply->status == 401) hint = " (set GSLICE_TOKEN to the token in gsliced's token_file)";
    std::fprintf(stderr, "gslice %s: %s%s\n", command, reply->message.c_str(), hint.c_str());
    return false;
  }
  return true;
}

std::string Bytes(uint64_t bytes) {
  char buf[32];
  return FormatSize(bytes, buf, sizeof buf);
}

std::string Percent(double fraction) {
  char buf[32];
  double pct = fraction * 100;
  if (std::fabs(pct - std::round(pct)) < 0.05) {
    std::snprintf(buf, sizeof buf, "%.0f%%", pct);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f%%", pct);
  }
  return buf;
}

void PrintTable(FILE* out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::fprintf(out, "%s\n", line.c_str());
  }
}

}  // namespace gslice::cli
