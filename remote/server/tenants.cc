#include "tenants.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sstream>

#include "tls.h"

namespace gslice::remote {
namespace {

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-'))) return false;
  }
  return true;
}

bool ParseDigest(const std::string& hex, TokenDigest* out) {
  if (hex.size() != 64) return false;
  for (size_t i = 0; i < 32; ++i) {
    unsigned v = 0;
    for (int k = 0; k < 2; ++k) {
      const char c = hex[2 * i + static_cast<size_t>(k)];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return false;
      v = v * 16 + static_cast<unsigned>(d);
    }
    (*out)[i] = static_cast<uint8_t>(v);
  }
  return true;
}

// One line's tenant; false with the reason (without the file and line).
bool ParseLine(const std::vector<std::string>& fields, const TenantRules& rules, Tenant* t, std::string* why) {
  if (fields.size() != 4) {
    *why = "expected 4 fields (NAME USER PROJECT TOKEN-SHA256), found " + std::to_string(fields.size());
    return false;
  }
  if (!ValidName(fields[0])) {
    *why = "tenant name '" + fields[0] + "': 1 to 63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit";
    return false;
  }
  t->name = fields[0];
  if (!ResolveUser(fields[1], &t->uid, &t->gid, why) || !UidAllowed(t->uid, rules, why)) return false;
  t->project = fields[2] == "-" ? "" : fields[2];
  if (!t->project.empty() && !ValidName(t->project)) {
    *why = "project '" + t->project + "': 1 to 63 of a-z, 0-9, '.', '_', '-' (or - for none)";
    return false;
  }
  if (!ParseDigest(fields[3], &t->digest)) {
    *why = "the token's SHA-256 must be 64 hex digits (head -n1 TOKEN-FILE | tr -d '\\n' | sha256sum)";
    return false;
  }
  return true;
}

}  // namespace

bool ResolveUser(const std::string& user, uid_t* uid, gid_t* gid, std::string* error) {
  const bool numeric = !user.empty() && user.size() <= 10 && user.find_first_not_of("0123456789") == std::string::npos;
  passwd pw;
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (numeric) {
    const unsigned long long n = std::stoull(user);
    if (n >= 0xffffffffull) {
      *error = "user '" + user + "': not a uid";
      return false;
    }
    getpwuid_r(static_cast<uid_t>(n), &pw, buf.data(), buf.size(), &found);
    *uid = static_cast<uid_t>(n);
    *gid = found != nullptr ? found->pw_gid : static_cast<gid_t>(n);
    return true;
  }
  getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found);
  if (found == nullptr) {
    *error = "user '" + user + "': no such user on this node (a name from /etc/passwd, or a numeric uid)";
    return false;
  }
  *uid = found->pw_uid;
  *gid = found->pw_gid;
  return true;
}

bool UidAllowed(uid_t uid, const TenantRules& rules, std::string* why) {
  if (rules.server_uid != 0 && uid != rules.server_uid) {
    *why = "uid " + std::to_string(uid) + ": gslice-remoted runs as uid " + std::to_string(rules.server_uid) +
           " and can run workers only as itself (start it as root to serve other users)";
    return false;
  }
  if (uid == 0 && !rules.allow_root) {
    *why = "uid 0: workers never run as root unless gslice-remoted is started with --allow-root-tenant";
    return false;
  }
  return true;
}

bool TenantTable::Parse(const std::string& origin, const std::string& text, const TenantRules& rules, TenantTable* out,
                        std::string* error) {
  TenantTable table;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::vector<std::string> fields;
    for (std::string w; words >> w;) fields.push_back(w);
    if (fields.empty()) continue;
    Tenant t;
    std::string why;
    if (!ParseLine(fields, rules, &t, &why)) {
      *error = origin + ":" + std::to_string(number) + ": " + why;
      return false;
    }
    for (const Tenant& other : table.tenants_) {
      if (other.name == t.name) why = "tenant '" + t.name + "' is named twice";
      else if (other.digest == t.digest) why = "tenants '" + other.name + "' and '" + t.name + "' have the same token";
    }
    if (!why.empty()) {
      *error = origin + ":" + std::to_string(number) + ": " + why;
      return false;
    }
    table.tenants_.push_back(t);
  }
  *out = std::move(table);
  return true;
}

bool TenantTable::Load(const std::string& path, const TenantRules& rules, TenantTable* out, std::string* error) {
  error->clear();
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    *error = "tenants file " + path + ": " + strerror(errno);
    return false;
  }
  struct stat st;
  std::string text;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *error = "tenants file " + path + ": not a regular file";
  } else if ((st.st_mode & 022) != 0) {
    *error = "tenants file " + path + ": group or others may write it; it decides who is whom (chmod go-w " + path + ")";
  } else if (st.st_size > (1 << 20)) {
    *error = "tenants file " + path + ": larger than 1 MiB";
  } else {
    char buf[65536];
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        *error = "tenants file " + path + ": " + strerror(errno);
        break;
      }
      text.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return error->empty() && Parse(path, text, rules, out, error);
}

bool TenantTable::FromToken(const std::string& token, const std::string& user, const TenantRules& rules,
                            TenantTable* out, std::string* error) {
  Tenant t;
  t.name = "token-file";
  if (!ResolveUser(user, &t.uid, &t.gid, error) || !UidAllowed(t.uid, rules, error)) {
    *error = "--token-user " + *error;
    return false;
  }
  if (!TlsSha256(token.data(), token.size(), t.digest.data(), error)) return false;
  out->tenants_ = {t};
  return true;
}

const Tenant* TenantTable::Find(const uint8_t* token, size_t n, std::string* error) const {
  TokenDigest got;
  if (!TlsSha256(token, n, got.data(), error)) return nullptr;
  const Tenant* match = nullptr;
  for (const Tenant& t : tenants_) {
    unsigned diff = 0;
    for (size_t i = 0; i < got.size(); ++i) diff |= static_cast<unsigned>(t.digest[i] ^ got[i]);
    volatile unsigned result = diff;
    if (result == 0) match = &t;
  }
  return match;
}

const Tenant* TenantTable::Same(const Tenant& t) const {
  for (const Tenant& mine : tenants_) {
    if (mine.name == t.name && mine.digest == t.digest && mine.uid == t.uid && mine.gid == t.gid) return &mine;
  }
  return nullptr;
}

}  // namespace gslice::remote
