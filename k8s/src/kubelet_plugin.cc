#include "gslice/k8s/kubelet_plugin.h"

#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace gslice::k8s {

std::string FileIdentity(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return {};
  return std::to_string(st.st_ino) + ":" + std::to_string(st.st_ctim.tv_sec) + "." +
         std::to_string(st.st_ctim.tv_nsec);
}

bool PluginSocket::Serve(const std::string& path, grpc::Service* service, const std::string& what,
                         std::string* error) {
  Shutdown();
  path_ = path;
  const std::string cannot = "cannot serve " + what + " on " + path + ": ";
  // gRPC binds with the process's umask: bind where no one else can reach the socket, set its
  // mode, then rename it over path (which also replaces a stale socket in one step).
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  constexpr const char kPrivate[] = "/.gs-XXXXXX", kBound[] = "/s";
  constexpr size_t kMaxDir = sizeof(sockaddr_un::sun_path) - sizeof kPrivate - sizeof kBound + 1;
  if (dir.size() > kMaxDir) {
    *error = cannot + "its folder's path is too long to bind a unix socket in (at most " + std::to_string(kMaxDir) +
             " characters)";
    return false;
  }
  std::string private_dir = dir + kPrivate;
  if (mkdtemp(private_dir.data()) == nullptr) {
    *error = cannot + "cannot make a private folder beside it: " + std::strerror(errno);
    return false;
  }
  const std::string bound = private_dir + kBound;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + bound, grpc::InsecureServerCredentials());
  builder.RegisterService(service);
  server_ = builder.BuildAndStart();
  if (!server_) {
    rmdir(private_dir.c_str());
    *error = cannot + "gRPC could not listen there";
    return false;
  }
  if (chmod(bound.c_str(), kPluginSocketMode) != 0 || rename(bound.c_str(), path.c_str()) != 0) {
    *error = cannot + std::strerror(errno);
    Shutdown();
    unlink(bound.c_str());
    rmdir(private_dir.c_str());
    return false;
  }
  rmdir(private_dir.c_str());
  id_ = FileIdentity(path);
  return true;
}

void PluginSocket::Shutdown() {
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_.reset();
}

void RunPollLoop(std::chrono::milliseconds poll, const std::atomic<bool>& stop, const std::function<void()>& once) {
  while (!stop) {
    const auto until = std::chrono::steady_clock::now() + poll;
    while (!stop && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!stop) once();
  }
}

}  // namespace gslice::k8s
