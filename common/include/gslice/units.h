// Byte sizes and percentages as people write them ("20GiB", "512MiB", "30%").
// Used by the CLI, the daemon and the shim; no allocation, no exceptions, so the shim
// can call it inside an application.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gslice {

struct ParsedSize {
  bool ok = false;
  uint64_t bytes = 0;
  // When !ok: a short reason ("unknown unit 'GX'"), static storage.
  const char* error = nullptr;
};

// Parses "20GiB", "1.5G", "512MiB", "4096", "64K". Units: B, K/KB/KiB, M/MB/MiB,
// G/GB/GiB, T/TB/TiB, case-insensitive; every unit is binary (1K = 1024), as GPU memory is
// sold and reported. A fraction is allowed ("1.5GiB"); the result is rounded down to a byte.
ParsedSize ParseSize(std::string_view text);

struct ParsedPercent {
  bool ok = false;
  double fraction = 0;  // 0..1
  const char* error = nullptr;
};

// Parses "30%", "30", "0.3" is refused (ambiguous) unless written "30%"; 0 < value <= 100.
ParsedPercent ParsePercent(std::string_view text);

struct ParsedProtect {
  bool ok = false;
  uint32_t permille = 0;  // kProtectMinPermille..kProtectMaxPermille (ledger.h)
  const char* error = nullptr;
};

// Parses a protection level (ledger.h, LedgerSlice::protect_permille): a fraction of the
// guaranteed job's solo speed, written as a decimal ("0.9") or a percentage ("90%"), from
// 0.5 to 1 (50% to 100%); rounded to the nearest thousandth. A bare number above 1 ("90") is
// refused: write it as a percentage.
ParsedProtect ParseProtect(std::string_view text);

// Formats bytes for people: "20 GiB", "1.5 GiB", "512 MiB", "100 B". Writes at most
// size-1 characters and a NUL into out; returns out.
char* FormatSize(uint64_t bytes, char* out, size_t size);

}  // namespace gslice
