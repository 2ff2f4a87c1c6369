// A small client of gsliced's API (docs/api.md) for the CLI: plain HTTP/1.1 over the unix
// socket (or TCP with a token), no library beyond libc, so `gslice` runs on nodes that
// have nothing installed but the driver.
//
// Where gsliced is found: --socket PATH, else $GSLICE_SOCKET, else
// /run/gsliced/gsliced.sock; or $GSLICE_DAEMON="host:port" (TCP) with $GSLICE_TOKEN.
//
// "No daemon here" and "a daemon that does not answer" are different answers: a node is set
// up for gsliced when GSLICE_DAEMON or GSLICE_SOCKET is set, the default socket path exists,
// or gsliced's config file exists (DaemonConfiguredBecause); there, nothing answering is a
// fault (stopped, crashed, overloaded), never a reason to skip admission.
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

// Why nothing answered.
enum class NoAnswer {
  kNone,          // it answered
  kNoSocket,      // no socket file at the path
  kNotListening,  // nobody listens there (connection refused): gsliced is stopped or crashed
  kDenied,        // the socket's permissions keep the caller out
  kTimeout,       // no answer in time (gsliced hangs, or its socket is held busy)
  kBroken,        // anything else: a malformed answer, an unknown host, ...
};

struct DaemonReply {
  bool connected = false;  // false: nothing answered (no_answer and message say why)
  NoAnswer no_answer = NoAnswer::kBroken;
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

// Why this node counts as set up for gsliced at `address` ("GSLICE_SOCKET is set",
// "/run/gsliced/gsliced.sock exists", "/etc/gslice/gsliced.toml exists"); empty when it
// does not (then `gslice run` runs without a daemon).
std::string DaemonConfiguredBecause(const DaemonAddress& address);

// gsliced's config file: its presence says gsliced is meant to run on this node.
inline constexpr const char kDaemonConfigFile[] = "/etc/gslice/gsliced.toml";

// For `gslice run`: registers the slice with gsliced if one runs.
struct SliceRegistration {
  std::string name;   // the slice's name (the ledger's); empty: gsliced picks one
  std::string user;   // empty: the caller, as gsliced learns it from the kernel
  std::string project;  // empty: the daemon's default project
  bool opportunistic = false;
  uint32_t protect_permille = 0;  // guaranteed: its protection level (ledger.h); 0: the default
  int64_t idle_timeout_s = 0;     // suspended after this long without GPU work; 0: never
  std::string remote_client;      // a remote slice's client (gslice-remoted's worker); "": local
  struct Gpu {
    std::string gpu;  // index ("0") or UUID
    uint64_t memory_bytes = 0;
    double compute = 0;  // 0..1; 0: no compute guarantee
  };
  std::vector<Gpu> gpus;
};

enum class RegisterResult {
  kRegistered,  // gsliced admitted it (and published its limits to the ledger)
  kNoAnswer,    // nothing answered: reply says why
  kRefused,     // gsliced refused it (admission, quota, bad request): message says why
};

// Registers `slice` with origin "run", held by the calling process (the registration expires
// once it and the slice's processes are gone); `message` receives the daemon's reason on
// kRefused and the slice's name (as gsliced knows it) on kRegistered; `reply` (may be null)
// the daemon's answer. Waits at most timeout_ms for a daemon.
RegisterResult RegisterSlice(const SliceRegistration& slice, std::string* message, DaemonReply* reply = nullptr,
                             int timeout_ms = 5000);
// Removes a slice registered with origin "run" when its program exits. Best effort: false
// when gsliced did not answer or refused (the registration then expires by itself).
bool UnregisterSlice(const std::string& name, int timeout_ms = 2000);

// The caller's login name, for messages ($USER, else the passwd entry). Never authority:
// gsliced learns who calls from the kernel.
std::string CurrentUserName();

}  // namespace gslice::cli
