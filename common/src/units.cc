#include "gslice/units.h"

#include "gslice/ledger.h"

#include <cstdio>

namespace gslice {
namespace {

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Parses a non-negative decimal "123" or "1.25" into whole and fractional parts
// (fraction as numerator/denominator to stay exact). Returns characters consumed.
size_t ParseDecimal(std::string_view s, uint64_t* whole, uint64_t* frac_num, uint64_t* frac_den,
                    bool* overflow) {
  size_t i = 0;
  *whole = 0;
  *frac_num = 0;
  *frac_den = 1;
  *overflow = false;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    uint64_t d = static_cast<uint64_t>(s[i] - '0');
    if (*whole > (UINT64_MAX - d) / 10) *overflow = true;
    else *whole = *whole * 10 + d;
    ++i;
  }
  if (i < s.size() && s[i] == '.') {
    size_t start = ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      if (*frac_den < 1000000000000ULL) {
        *frac_num = *frac_num * 10 + static_cast<uint64_t>(s[i] - '0');
        *frac_den *= 10;
      }
      ++i;
    }
    if (i == start) return 0;  // "1." is not a number
  }
  return i;
}

}  // namespace

ParsedSize ParseSize(std::string_view text) {
  ParsedSize r;
  std::string_view s = Trim(text);
  if (s.empty()) {
    r.error = "empty size";
    return r;
  }
  if (s.front() == '-') {
    r.error = "size must not be negative";
    return r;
  }
  uint64_t whole, num, den;
  bool overflow;
  size_t used = ParseDecimal(s, &whole, &num, &den, &overflow);
  if (used == 0) {
    r.error = "not a number (expected e.g. 20GiB, 512MiB)";
    return r;
  }
  std::string_view unit = Trim(s.substr(used));
  uint64_t scale;
  if (unit.empty() || IEquals(unit, "b")) scale = 1;
  else if (IEquals(unit, "k") || IEquals(unit, "kb") || IEquals(unit, "kib")) scale = 1ULL << 10;
  else if (IEquals(unit, "m") || IEquals(unit, "mb") || IEquals(unit, "mib")) scale = 1ULL << 20;
  else if (IEquals(unit, "g") || IEquals(unit, "gb") || IEquals(unit, "gib")) scale = 1ULL << 30;
  else if (IEquals(unit, "t") || IEquals(unit, "tb") || IEquals(unit, "tib")) scale = 1ULL << 40;
  else {
    r.error = "unknown unit (use B, KiB, MiB, GiB or TiB)";
    return r;
  }
  if (overflow || whole > UINT64_MAX / scale) {
    r.error = "size too large";
    return r;
  }
  if (scale == 1 && num != 0) {
    r.error = "a byte count must be whole";
    return r;
  }
  // num < den <= 10^12 and scale <= 2^40: split scale so num * part stays below 2^64.
  // frac = num * scale / den, computed as num * (scale / 1024) / den * 1024 plus the rest.
  uint64_t frac = 0;
  if (num != 0) {
    uint64_t q = scale / den, rem = scale % den;  // scale = q*den + rem
    frac = num * q + static_cast<uint64_t>(static_cast<long double>(num) * static_cast<long double>(rem) /
                                           static_cast<long double>(den));
  }
  uint64_t base = whole * scale;
  if (frac > UINT64_MAX - base) {
    r.error = "size too large";
    return r;
  }
  r.ok = true;
  r.bytes = base + frac;
  return r;
}

ParsedPercent ParsePercent(std::string_view text) {
  ParsedPercent r;
  std::string_view s = Trim(text);
  if (!s.empty() && s.back() == '%') s = Trim(s.substr(0, s.size() - 1));
  if (s.empty()) {
    r.error = "empty percentage";
    return r;
  }
  uint64_t whole, num, den;
  bool overflow;
  size_t used = ParseDecimal(s, &whole, &num, &den, &overflow);
  if (used == 0 || used != s.size() || overflow) {
    r.error = "not a percentage (expected e.g. 30%)";
    return r;
  }
  double value = static_cast<double>(whole) + static_cast<double>(num) / static_cast<double>(den);
  if (value <= 0 || value > 100) {
    r.error = "percentage must be above 0 and at most 100";
    return r;
  }
  r.ok = true;
  r.fraction = value / 100.0;
  return r;
}

ParsedProtect ParseProtect(std::string_view text) {
  ParsedProtect r;
  std::string_view s = Trim(text);
  const bool percent = !s.empty() && s.back() == '%';
  if (percent) s = Trim(s.substr(0, s.size() - 1));
  if (s.empty()) {
    r.error = "empty protection level (expected e.g. 0.9 or 90%)";
    return r;
  }
  uint64_t whole, num, den;
  bool overflow;
  size_t used = ParseDecimal(s, &whole, &num, &den, &overflow);
  if (used == 0 || used != s.size() || overflow || whole > 1000) {
    r.error = "not a protection level (expected a fraction of solo speed, e.g. 0.9 or 90%)";
    return r;
  }
  // Thousandths, rounded half up; exact (num < den <= 10^12).
  const uint64_t scale = percent ? 10 : 1000;
  const uint64_t permille = whole * scale + (num * scale * 2 + den) / (2 * den);
  if (!percent && (whole > 1 || permille > 1000)) {
    r.error = "a fraction of solo speed is at most 1: write 0.9 or 90%";
    return r;
  }
  if (permille < kProtectMinPermille || permille > kProtectMaxPermille) {
    r.error = "must be from 0.5 to 1 (50% to 100%) of solo speed";
    return r;
  }
  r.ok = true;
  r.permille = static_cast<uint32_t>(permille);
  return r;
}

char* FormatSize(uint64_t bytes, char* out, size_t size) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  double value = static_cast<double>(bytes);
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) {
    snprintf(out, size, "%llu B", static_cast<unsigned long long>(bytes));
  } else if (value == static_cast<double>(static_cast<uint64_t>(value))) {
    snprintf(out, size, "%.0f %s", value, kUnits[unit]);
  } else {
    snprintf(out, size, "%.1f %s", value, kUnits[unit]);
  }
  return out;
}

}  // namespace gslice
