#include "tenant_limits.h"

#include <algorithm>

namespace gslice::remote {

void TenantLimits::Refill(Count* c, int64_t now_ms) const {
  const double rate = config_.handshakes_per_second;
  if (now_ms > c->at_ms) c->budget = std::min(rate, c->budget + rate * static_cast<double>(now_ms - c->at_ms) / 1000.0);
  c->at_ms = std::max(c->at_ms, now_ms);
}

void TenantLimits::ForgetIdle(int64_t now_ms) {
  for (auto it = counts_.begin(); it != counts_.end();) {
    Refill(&it->second, now_ms);
    const bool idle = it->second.connections == 0 && it->second.workers == 0 &&
                      it->second.budget >= config_.handshakes_per_second;
    it = idle ? counts_.erase(it) : std::next(it);
  }
}

std::string TenantLimits::AdmitConnection(const std::string& key, int64_t now_ms) {
  if (counts_.size() >= 1024) ForgetIdle(now_ms);
  auto [it, fresh] = counts_.try_emplace(key);
  Count& c = it->second;
  if (fresh) c = Count{.budget = static_cast<double>(config_.handshakes_per_second), .at_ms = now_ms};
  Refill(&c, now_ms);
  if (c.connections >= config_.connections) {
    return std::to_string(c.connections) + " connections open, at most " + std::to_string(config_.connections) +
           " (--max-connections)";
  }
  if (c.budget < 1) {
    return "more than " + std::to_string(config_.handshakes_per_second) +
           " new connections a second (--handshakes-per-second)";
  }
  c.budget -= 1;
  ++c.connections;
  return "";
}

void TenantLimits::ReleaseConnection(const std::string& key) {
  auto it = counts_.find(key);
  if (it != counts_.end() && it->second.connections > 0) --it->second.connections;
}

std::string TenantLimits::AdmitWorker(const std::string& key) {
  Count& c = counts_[key];
  if (c.workers >= config_.workers) {
    return std::to_string(c.workers) + " workers running, at most " + std::to_string(config_.workers) +
           " (--max-workers)";
  }
  ++c.workers;
  return "";
}

void TenantLimits::ReleaseWorker(const std::string& key) {
  auto it = counts_.find(key);
  if (it != counts_.end() && it->second.workers > 0) --it->second.workers;
}

}  // namespace gslice::remote
