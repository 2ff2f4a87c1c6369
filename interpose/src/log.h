// The shim's log: one line per event on stderr, prefixed "gslice: ", filtered by GSLICE_LOG.
// Formatting uses a stack buffer and one write(2); safe from any thread, never allocates.
#pragma once

namespace gslice::shim {

enum class LogLevel { kOff = 0, kError = 1, kWarn = 2, kInfo = 3, kDebug = 4 };

// Reads GSLICE_LOG once (an unknown value logs a warning and means "warn").
void InitLog();
bool LogEnabled(LogLevel level);
void Log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace gslice::shim
