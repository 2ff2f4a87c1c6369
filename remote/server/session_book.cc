#include "session_book.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "session_control.h"

namespace gslice::remote {

void SessionBook::Add(pid_t pid, int control, const std::string& key) {
  Entry e;
  e.pid = pid;
  e.control = control;
  e.key = key;
  sessions_.push_back(std::move(e));
}

std::vector<int> SessionBook::ControlFds() const {
  std::vector<int> fds;
  for (const Entry& e : sessions_) {
    if (e.control >= 0) fds.push_back(e.control);
  }
  return fds;
}

std::string SessionBook::Decide(Entry* e, const std::string& request, const TenantTable& tenants, int64_t now_ms) {
  if (request == kWorkerRequest) {
    if (e->worker) return "a session has one worker";
    const std::string why = limits_.AdmitWorker(e->key);
    e->worker = why.empty();
    return why;
  }
  Tenant asked;
  // Only a tls:// session (counted by its address until then) names a tenant, and only once.
  if (e->tenant.has_value() || e->key.rfind(kAddressKey, 0) != 0 || !ParseTenantRequest(request, &asked)) {
    return "not a request of this server";
  }
  const Tenant* known = tenants.Same(asked);
  if (known == nullptr) return "the token was revoked";
  const std::string key = "tenant " + known->name;
  const std::string why = limits_.AdmitConnection(key, now_ms);
  if (!why.empty()) return why;
  limits_.ReleaseConnection(e->key);  // counted as the tenant from now on, no more as its address
  e->key = key;
  e->tenant = *known;
  return "";
}

void SessionBook::Answer(int control, const TenantTable& tenants, int64_t now_ms) {
  for (Entry& e : sessions_) {
    if (e.control != control) continue;
    char buf[kMaxControlMessage];
    ssize_t n;
    do {
      n = recv(control, buf, sizeof buf, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {  // the session closed its end (it ended): stop polling it; Reap releases it
      close(e.control);
      e.control = -1;
      return;
    }
    const std::string why = Decide(&e, std::string(buf, static_cast<size_t>(n)), tenants, now_ms);
    const std::string answer = why.empty() ? std::string(kYes) : kNo + why;
    send(control, answer.data(), answer.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    return;
  }
}

void SessionBook::Reap() {
  for (size_t k = 0; k < sessions_.size();) {
    Entry& e = sessions_[k];
    if (waitpid(e.pid, nullptr, WNOHANG) != e.pid) {
      ++k;
      continue;
    }
    limits_.ReleaseConnection(e.key);
    if (e.worker) limits_.ReleaseWorker(e.key);
    if (e.control >= 0) close(e.control);
    sessions_.erase(sessions_.begin() + static_cast<long>(k));
  }
}

int SessionBook::Revoke(const TenantTable& tenants) {
  int ended = 0;
  for (Entry& e : sessions_) {
    if (!e.tenant.has_value() || e.revoked || tenants.Same(*e.tenant) != nullptr) continue;
    fprintf(stderr, "gslice-remoted: tenant %s is no longer in the tenants file: its session %d ends\n",
            e.tenant->name.c_str(), static_cast<int>(e.pid));
    kill(e.pid, SIGTERM);
    e.revoked = true;
    ++ended;
  }
  return ended;
}

void SessionBook::SignalAll(int sig) const {
  for (const Entry& e : sessions_) kill(e.pid, sig);
}

}  // namespace gslice::remote
