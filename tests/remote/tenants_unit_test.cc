// The tenants file's rules (remote/server/tenants.h) and the per-tenant limits
// (remote/server/tenant_limits.h), on synthetic files and times.
#include <pwd.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "tenant_limits.h"
#include "tenants.h"

namespace gslice::remote {
namespace {

const std::string kDigest(64, 'a');
const TenantRules kRoot{.allow_root = false, .server_uid = 0};

std::string Refusal(const std::string& text, const TenantRules& rules = kRoot) {
  TenantTable table;
  std::string error;
  EXPECT_FALSE(TenantTable::Parse("tenants", text, rules, &table, &error)) << text;
  return error;
}

TEST(TenantsFile, ReadsNamesUsersProjectsAndDigests) {
  TenantTable table;
  std::string error;
  const std::string text = "# who may connect\n\n"
                           "ml-team nobody vision " + kDigest + "  # a comment\n"
                           "ops 4242 - " + std::string(64, 'B') + "\n";
  ASSERT_TRUE(TenantTable::Parse("tenants", text, kRoot, &table, &error)) << error;
  ASSERT_EQ(table.tenants().size(), 2u);
  const Tenant& ml = table.tenants()[0];
  EXPECT_EQ(ml.name, "ml-team");
  EXPECT_EQ(ml.uid, getpwnam("nobody")->pw_uid);
  EXPECT_EQ(ml.gid, getpwnam("nobody")->pw_gid);
  EXPECT_EQ(ml.project, "vision");
  EXPECT_EQ(ml.digest[0], 0xaa);
  const Tenant& ops = table.tenants()[1];
  EXPECT_EQ(ops.uid, 4242u);
  EXPECT_EQ(ops.gid, 4242u);  // a uid without a name: the group of the same number
  EXPECT_EQ(ops.project, "");
  EXPECT_EQ(ops.digest[31], 0xbb);
  EXPECT_EQ(table.Same(ml), &table.tenants()[0]);
  Tenant changed = ml;
  changed.digest[5] ^= 1;
  EXPECT_EQ(table.Same(changed), nullptr);
}

TEST(TenantsFile, RefusesBadLinesWithFileAndLine) {
  EXPECT_EQ(Refusal("a nobody -\n").rfind("tenants:1: expected 4 fields", 0), 0u);
  EXPECT_EQ(Refusal("\nA nobody - " + kDigest).rfind("tenants:2: tenant name 'A'", 0), 0u);
  EXPECT_NE(Refusal("a no-such-user-here - " + kDigest).find("tenants:1: user 'no-such-user-here'"), std::string::npos);
  EXPECT_NE(Refusal("a nobody - abc").find("tenants:1: the token's SHA-256 must be 64 hex digits"), std::string::npos);
  EXPECT_NE(Refusal("a nobody - " + kDigest + "\na nobody - " + std::string(64, 'b')).find("tenants:2: tenant 'a' is named twice"),
            std::string::npos);
  EXPECT_NE(Refusal("a nobody - " + kDigest + "\nb nobody - " + kDigest).find("tenants:2: tenants 'a' and 'b' have the same token"),
            std::string::npos);
  EXPECT_NE(Refusal("a nobody Bad/Project " + kDigest).find("project 'Bad/Project'"), std::string::npos);
}

TEST(TenantsFile, RefusesRootUnlessAllowedAndOtherUsersToAServerThatIsNotRoot) {
  EXPECT_NE(Refusal("admin root - " + kDigest).find("--allow-root-tenant"), std::string::npos);
  EXPECT_NE(Refusal("admin 0 - " + kDigest).find("--allow-root-tenant"), std::string::npos);
  TenantTable table;
  std::string error;
  EXPECT_TRUE(TenantTable::Parse("tenants", "admin root - " + kDigest, TenantRules{.allow_root = true, .server_uid = 0},
                                 &table, &error)) << error;
  EXPECT_NE(Refusal("a 4242 - " + kDigest, TenantRules{.allow_root = false, .server_uid = 1000})
                .find("runs as uid 1000 and can run workers only as itself"),
            std::string::npos);
  EXPECT_TRUE(TenantTable::Parse("tenants", "me 1000 - " + kDigest, TenantRules{.allow_root = false, .server_uid = 1000},
                                 &table, &error)) << error;
}

TEST(TenantsFile, FindsATenantByItsToken) {
  TenantTable table;
  std::string error;
  // SHA-256("0123456789abcdef0123456789abcdef")
  ASSERT_TRUE(TenantTable::FromToken("0123456789abcdef0123456789abcdef", "nobody", kRoot, &table, &error)) << error;
  const std::string token = "0123456789abcdef0123456789abcdef";
  const Tenant* found = table.Find(reinterpret_cast<const uint8_t*>(token.data()), token.size(), &error);
  ASSERT_NE(found, nullptr) << error;
  EXPECT_EQ(found->uid, getpwnam("nobody")->pw_uid);
  const std::string wrong = "0123456789abcdef0123456789abcdeX";
  EXPECT_EQ(table.Find(reinterpret_cast<const uint8_t*>(wrong.data()), wrong.size(), &error), nullptr);
  EXPECT_FALSE(TenantTable::FromToken(token, "root", kRoot, &table, &error));
  EXPECT_NE(error.find("--token-user"), std::string::npos) << error;
}

TEST(TenantLimits, CountsConnectionsPerKeyOnly) {
  TenantLimits limits(LimitConfig{.connections = 3, .workers = 1, .handshakes_per_second = 100});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(limits.AdmitConnection("uid 1", 0), "");
  EXPECT_NE(limits.AdmitConnection("uid 1", 0).find("--max-connections"), std::string::npos);
  EXPECT_EQ(limits.AdmitConnection("uid 2", 0), "") << "one key's limit held another back";
  limits.ReleaseConnection("uid 1");
  EXPECT_EQ(limits.AdmitConnection("uid 1", 0), "");
  EXPECT_EQ(limits.AdmitWorker("uid 1"), "");
  EXPECT_NE(limits.AdmitWorker("uid 1").find("--max-workers"), std::string::npos);
  EXPECT_EQ(limits.AdmitWorker("uid 2"), "");
  limits.ReleaseWorker("uid 1");
  EXPECT_EQ(limits.AdmitWorker("uid 1"), "");
}

TEST(TenantLimits, HandshakesAreRatedPerKeyAndRefill) {
  TenantLimits limits(LimitConfig{.connections = 1000, .workers = 1, .handshakes_per_second = 4});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(limits.AdmitConnection("a", 1000), "");
  EXPECT_NE(limits.AdmitConnection("a", 1000).find("--handshakes-per-second"), std::string::npos);
  EXPECT_EQ(limits.AdmitConnection("b", 1000), "");
  EXPECT_EQ(limits.AdmitConnection("a", 1250), "");  // a quarter second: one more
  EXPECT_NE(limits.AdmitConnection("a", 1250), "");
}

TEST(TenantLimits, ForgetsIdleKeysButNotTheirDebt) {
  TenantLimits limits(LimitConfig{.connections = 1, .workers = 1, .handshakes_per_second = 1});
  for (int i = 0; i < 2000; ++i) {
    const std::string key = "address " + std::to_string(i);
    EXPECT_EQ(limits.AdmitConnection(key, 0), "");
    limits.ReleaseConnection(key);
  }
  EXPECT_NE(limits.AdmitConnection("address 1999", 0), "") << "a key's spent budget was forgotten at once";
  EXPECT_LE(limits.keys(), 2001u);
  EXPECT_EQ(limits.AdmitConnection("address 7", 5000), "");
  EXPECT_LE(limits.keys(), 1100u) << "idle keys are kept for ever";
}

}  // namespace
}  // namespace gslice::remote
