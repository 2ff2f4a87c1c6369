// The shared secret of a tls:// server and its clients (docs/remote.md, Security). libc only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gslice::remote {

// The shortest token accepted: 16 characters (`openssl rand -hex 32` makes 64).
inline constexpr size_t kMinToken = 16;

// Reads a token file: its first line, without surrounding blanks. False, with a message a person
// can act on, when the file is missing, not a regular file, readable or writable by group or
// others (a secret: chmod 600), or its token is shorter than kMinToken or longer than kMaxToken.
bool ReadTokenFile(const std::string& path, std::string* token, std::string* error);

// Whether got equals expected, in time that depends on the lengths only, never on where the
// bytes differ (a peer cannot find the token byte by byte by timing refusals).
bool TokenEquals(const std::string& expected, const uint8_t* got, size_t n);

}  // namespace gslice::remote
