#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "gslice/options.h"

namespace gslice::shim {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};
}

void InitLog() {
  const char* v = OptionValue(Option::Log);
  static constexpr struct {
    const char* name;
    LogLevel level;
  } kLevels[] = {{"off", LogLevel::kOff},   {"error", LogLevel::kError}, {"warn", LogLevel::kWarn},
                 {"info", LogLevel::kInfo}, {"debug", LogLevel::kDebug}};
  for (const auto& l : kLevels) {
    if (strcmp(v, l.name) == 0) {
      g_level.store(static_cast<int>(l.level));
      return;
    }
  }
  g_level.store(static_cast<int>(LogLevel::kWarn));
  Log(LogLevel::kWarn, "GSLICE_LOG=%s: unknown level (off, error, warn, info, debug); using warn", v);
}

bool LogEnabled(LogLevel level) { return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed); }

void Log(LogLevel level, const char* fmt, ...) {
  if (!LogEnabled(level)) return;
  char buf[512];
  int n = snprintf(buf, sizeof buf, "gslice[%d]: ", static_cast<int>(getpid()));
  if (n < 0) return;
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof buf - static_cast<size_t>(n) - 1, fmt, ap);
  va_end(ap);
  if (m < 0) return;
  size_t len = strlen(buf);
  buf[len++] = '\n';
  ssize_t w = write(STDERR_FILENO, buf, len);
  (void)w;
}

}  // namespace gslice::shim
