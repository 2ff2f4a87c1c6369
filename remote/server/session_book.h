// The listener's record of its live sessions (docs/remote.md, "Tenants" and "Fair limits"):
// who each one counts as, its control socket, whether it runs a worker; the limits it is counted
// against (limits.h) and the tenants its tls:// sessions were let in as (tenants.h).
//
// Invariants: every live session is counted once against its key's connections (and once
// against its workers once let start one) and released exactly once, when reaped; a session
// whose tenant is no longer in the table (revoked, its token or uid changed) is sent SIGTERM
// (its worker with it: session.cc forwards it) and no other session is.
//
// REQUIRES: external synchronization (the listener's one thread).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tenant_limits.h"
#include "tenants.h"

namespace gslice::remote {

// The key of a tls:// connection before its token names its tenant ("address 10.0.0.5").
inline constexpr char kAddressKey[] = "address ";

class SessionBook {
 public:
  explicit SessionBook(const LimitConfig& limits) : limits_(limits) {}

  // A connection of `key` at now_ms: "" when it may have a session, else the reason.
  std::string Admit(const std::string& key, int64_t now_ms) { return limits_.AdmitConnection(key, now_ms); }
  // Records the session forked for an admitted connection (control: the listener's end).
  void Add(pid_t pid, int control, const std::string& key);
  // Gives up an admitted connection that got no session (the fork failed).
  void Drop(const std::string& key) { limits_.ReleaseConnection(key); }

  // The listener's ends of the control pairs, to poll.
  std::vector<int> ControlFds() const;
  // Answers one request waiting on control (session_control.h), against tenants.
  void Answer(int control, const TenantTable& tenants, int64_t now_ms);
  // Reaps sessions that ended, releasing what they held.
  void Reap();
  // After the tenants changed: ends the sessions of tenants no longer in the table. Returns how
  // many were ended.
  int Revoke(const TenantTable& tenants);
  // Sends sig to every session.
  void SignalAll(int sig) const;

  size_t size() const { return sessions_.size(); }

 private:
  struct Entry {
    pid_t pid = 0;
    int control = -1;
    std::string key;
    std::optional<Tenant> tenant;
    bool worker = false;
    bool revoked = false;
  };
  std::string Decide(Entry* e, const std::string& request, const TenantTable& tenants, int64_t now_ms);

  TenantLimits limits_;
  std::vector<Entry> sessions_;
};

}  // namespace gslice::remote
