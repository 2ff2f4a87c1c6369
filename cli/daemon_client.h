// A small client of gsliced's API (docs/api.md) for the CLI: plain HTTP/1.1 over the unix
// socket (or TCP with a token), no library beyond libc, so `gslice` runs on nodes that
// have nothing installed but the driver.
//
// Where gsliced is found: --socket PATH, else $GSLICE_SOCKET, else
// /run/gsliced/gsliced.sock; or $GSLICE_DAEMON="host:port" (TCP) with $GSLICE_TOKEN.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gslice::cli {

struct DaemonAddress {
  std::string socket;  // unix socket path; used when tcp_host is empty
  std::string tcp_host;
  int tcp_port = 0;
  std::string token;  // sent as "Authorization: Bearer <token>" on TCP
  std::string Describe() const;
};

// The address from the environment (see above); `socket_flag` overrides it when not empty.
DaemonAddress DaemonAddressFromEnvironment(const std::string& socket_flag = "");

struct DaemonReply {
  bool connected = false;  // false: nothing answered (message says why)
  int status = 0;          // HTTP status
  std::string body;
  std::string message;  // transport error, or the API's "error" field when status >= 400
  bool ok() const { return connected && status >= 200 && status < 300; }
};

class DaemonClient {
 public:
  explicit DaemonClient(DaemonAddress address) : address_(std::move(address)) {}
  // One request on its own connection. timeout_ms bounds connect, send and receive.
  DaemonReply Call(const std::string& method, const std::string& path, const std::string& body = "",
                   int timeout_ms = 10000) const;
  const DaemonAddress& address() const { return address_; }

 private:
  DaemonAddress address_;
};

// What to tell a person when no daemon answered: how to start one or do without.
std::string NoDaemonHint(const DaemonReply& reply, const DaemonAddress& address);

// For `gslice run`: registers the slice with gsliced if one runs.
struct SliceRegistration {
  std::string name;   // the slice's name (the ledger's); empty: gsliced picks one
  std::string user;   // empty: the caller's login name
  std::string project;  // empty: the daemon's default project
  bool opportunistic = false;
  struct Gpu {
    std::string gpu;  // index ("0") or UUID
    uint64_t memory_bytes = 0;
    double compute = 0;  // 0..1; 0: no compute guarantee
  };
  std::vector<Gpu> gpus;
};

enum class RegisterResult {
  kRegistered,  // gsliced admitted it (and published its limits to the ledger)
  kNoDaemon,    // nothing answers: run without a daemon
  kRefused,     // gsliced refused it (admission, quota, bad request): message says why
};

// Registers `slice`; `message` receives the daemon's reason on kRefused and the slice's
// name (as gsliced knows it) on kRegistered. Waits at most timeout_ms for a daemon.
RegisterResult RegisterSlice(const SliceRegistration& slice, std::string* message,
                             int timeout_ms = 2000);
// Removes a slice registered with origin "run" when its program exits. Best effort.
bool UnregisterSlice(const std::string& name, int timeout_ms = 2000);

// The caller's login name for the API's "user" field ($USER, else the passwd entry).
std::string CurrentUserName();

}  // namespace gslice::cli
