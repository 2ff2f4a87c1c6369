// Fair limits of gslice-remoted's listener (docs/remote.md, "Fair limits"): per tenant, how many
// connections it holds open, how many workers it runs, and how many new connections it may
// start a second. A pure policy: the listener tells it what happens, with the time, and it
// answers whether to let it in; it never reads a clock or a socket itself.
//
// Who is counted is a key the listener chooses: a unix client's uid (from the kernel), a tls://
// client's address until its token names its tenant, the tenant from then on. A key's count is
// its own: one key at its limits changes nothing for another.
//
// REQUIRES: external synchronization (the listener's one thread).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace gslice::remote {

struct LimitConfig {
  int connections = 32;           // open connections (sessions) per key
  int workers = 8;                // running workers per key
  int handshakes_per_second = 100;  // new connections per key per second, in bursts of as many
};

class TenantLimits {
 public:
  explicit TenantLimits(const LimitConfig& config) : config_(config) {}

  // A new connection of key at now_ms: "" when let in (counted until ReleaseConnection), else
  // the reason, naming the limit and its option.
  std::string AdmitConnection(const std::string& key, int64_t now_ms);
  void ReleaseConnection(const std::string& key);
  // A worker for one of key's connections: "" when let in (counted until ReleaseWorker).
  std::string AdmitWorker(const std::string& key);
  void ReleaseWorker(const std::string& key);

  // Keys held in memory (bounded: idle keys are forgotten once their rate budget is full again).
  size_t keys() const { return counts_.size(); }

 private:
  struct Count {
    int connections = 0;
    int workers = 0;
    double budget = 0;  // handshakes left; refills at handshakes_per_second
    int64_t at_ms = 0;  // when budget was last refilled
  };
  void Refill(Count* c, int64_t now_ms) const;
  void ForgetIdle(int64_t now_ms);

  LimitConfig config_;
  std::map<std::string, Count> counts_;
};

}  // namespace gslice::remote
