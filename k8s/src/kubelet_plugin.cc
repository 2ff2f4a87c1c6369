#include "gslice/k8s/kubelet_plugin.h"

#include <sys/stat.h>
#include <unistd.h>

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
  unlink(path.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + path, grpc::InsecureServerCredentials());
  builder.RegisterService(service);
  server_ = builder.BuildAndStart();
  if (!server_) {
    *error = "cannot serve " + what + " on " + path;
    return false;
  }
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
