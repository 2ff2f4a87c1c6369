// Who a tls:// client is (docs/remote.md, "Tenants"): the tenants file (--tenants FILE), or the
// single tenant of --token-file and --token-user.
//
// The tenants file has one tenant a line, four fields separated by blanks; `#` starts a comment:
//
//   NAME  USER  PROJECT  TOKEN-SHA256
//   ml-team  alice  vision  2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae
//
// NAME: 1 to 63 of [a-z0-9._-], starting with a letter or digit (a Kubernetes namespace fits);
// USER: a user name or a numeric uid of this node, whose worker runs as it (a name's primary
// group; a uid without a name: the group of the same number); PROJECT: the slice's gsliced
// project, `-` for none; TOKEN-SHA256: the SHA-256 of the tenant's token (its token file's first
// line without the newline, `head -n1 FILE | tr -d '\n' | sha256sum`), 64 hex digits. The file
// holds no usable secret, but decides who is whom: group and others must not write it.
//
// Invariants of a loaded table: names are unique, digests are unique, no tenant is uid 0 unless
// the rules allow root, and where the server does not run as root every tenant is the server's
// own uid (it cannot run a worker as anyone else).
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gslice::remote {

using TokenDigest = std::array<uint8_t, 32>;

struct Tenant {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string project;  // "": none
  TokenDigest digest = {};
};

// What a table may hold.
struct TenantRules {
  bool allow_root = false;  // --allow-root-tenant
  uid_t server_uid = 0;     // not 0: every tenant must be this uid
};

// The uid and primary group of a user name or numeric uid. False, with a message, when a name is
// not a user of this node.
bool ResolveUser(const std::string& user, uid_t* uid, gid_t* gid, std::string* error);

// Whether rules let a worker run as uid; the reason a person can act on when not.
bool UidAllowed(uid_t uid, const TenantRules& rules, std::string* why);

class TenantTable {
 public:
  // Parses the file's text; `origin` names it in errors ("FILE:LINE: ..."). Every bad line is
  // refused: the table is all of the file or nothing.
  static bool Parse(const std::string& origin, const std::string& text, const TenantRules& rules, TenantTable* out,
                    std::string* error);
  // Reads and parses path; refuses a file that is not regular or that group or others may write.
  static bool Load(const std::string& path, const TenantRules& rules, TenantTable* out, std::string* error);
  // The single tenant of --token-file: its token's digest, the user's uid and group.
  static bool FromToken(const std::string& token, const std::string& user, const TenantRules& rules,
                        TenantTable* out, std::string* error);

  // The tenant whose digest is SHA-256(token), or nullptr (with *error set when libssl cannot
  // hash). Every digest is compared in full (no early exit): the time depends on the table's
  // size only.
  const Tenant* Find(const uint8_t* token, size_t n, std::string* error) const;
  // The tenant of this name with this digest and uid, or nullptr: whether a session let in as
  // `t` may go on under this table (a revoked or changed tenant's may not).
  const Tenant* Same(const Tenant& t) const;

  const std::vector<Tenant>& tenants() const { return tenants_; }

 private:
  std::vector<Tenant> tenants_;
};

}  // namespace gslice::remote
