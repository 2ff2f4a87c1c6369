// What the two kubelet plugins (the device plugin and the DRA driver) share: a gRPC service
// served on a unix socket in one of kubelet's folders, noticing when kubelet removed it (it
// clears its plugin folders when it restarts), and the poll loop each plugin runs.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

namespace gslice::k8s {

// A file's identity: inode and change time, so a socket removed and made again (even on a
// reused inode) reads as new. Empty when it does not exist.
std::string FileIdentity(const std::string& path);

// The mode of a plugin's sockets: kubelet (root) is their only client, and whoever may
// connect may prepare devices for any pod.
inline constexpr mode_t kPluginSocketMode = 0600;

// One gRPC service on a unix socket. REQUIRES: one thread at a time.
class PluginSocket {
 public:
  PluginSocket() = default;
  ~PluginSocket() { Shutdown(); }
  PluginSocket(const PluginSocket&) = delete;
  PluginSocket& operator=(const PluginSocket&) = delete;

  // Serves `service` on a socket of mode kPluginSocketMode at path, whatever the umask, and
  // replaces whatever was there. The socket never exists at path with another mode: it is
  // bound in a fresh folder of mode 0700 beside path, given its mode there and renamed into
  // place. what: the service, for the error ("cannot serve <what> on <path>: ..."). Shuts
  // down what this served before. REQUIRES: service outlives the serving (until Shutdown).
  bool Serve(const std::string& path, grpc::Service* service, const std::string& what, std::string* error);
  // Whether the socket at path is no longer the one served (or none is served).
  bool Gone() const { return FileIdentity(path_) != id_ || !server_; }
  bool serving() const { return server_ != nullptr; }
  // Stops serving, giving calls in flight up to 2 s. The socket file stays.
  void Shutdown();

 private:
  std::unique_ptr<grpc::Server> server_;
  std::string path_;
  std::string id_;  // FileIdentity of the socket when served
};

// Calls once() every `poll` until stop is set (looking at stop every 20 ms).
void RunPollLoop(std::chrono::milliseconds poll, const std::atomic<bool>& stop, const std::function<void()>& once);

}  // namespace gslice::k8s
