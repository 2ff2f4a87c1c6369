#include "pod_resolver.h"

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "gslice/clock.h"
#include "gslice/k8s/kube_client.h"
#include "gslice/k8s/pod_directory_loader.h"

namespace gslice {
namespace {

void Log(const std::string& line) { std::fprintf(stderr, "gsliced: kubernetes: %s\n", line.c_str()); }

}  // namespace

PodResolver::PodResolver(Options options, Loader loader, Clock clock)
    : options_(std::move(options)),
      loader_(std::move(loader)),
      clock_(clock ? std::move(clock) : Clock(MonotonicMs)) {
  if (!options_.load_inline) worker_ = std::thread([this] { Worker(); });
}

PodResolver::~PodResolver() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

k8s::PodAnnotations PodResolver::Annotations(const std::string& namespace_name, const std::string& name) const {
  std::lock_guard lock(mu_);
  return directory_.Annotations(namespace_name, name);
}

int PodResolver::loads() const {
  std::lock_guard lock(mu_);
  return loads_;
}

void PodResolver::Label(std::vector<ProcessUsage>* processes) {
  // The cgroup files first, without the lock.
  std::vector<std::optional<k8s::PodCgroup>> cgroups;
  cgroups.reserve(processes->size());
  for (const ProcessUsage& p : *processes) cgroups.push_back(k8s::PodCgroupOfPid(p.pid, options_.proc_root));

  auto apply = [&]() -> bool {  // REQUIRES: mu_ held. Returns whether a load is due.
    bool in_pods = false, missing = false;
    for (size_t i = 0; i < processes->size(); ++i) {
      ProcessUsage& p = (*processes)[i];
      p.pod.clear();
      p.pod_namespace.clear();
      p.container.clear();
      if (!cgroups[i]) continue;
      in_pods = true;
      std::optional<k8s::PodName> name = directory_.Lookup(*cgroups[i]);
      if (!name) {
        missing = true;
        continue;
      }
      // A container ID the list does not name yet: a container (re)started since it was read.
      if (!cgroups[i]->container_id.empty() && name->container.empty()) missing = true;
      p.pod = name->name;
      p.pod_namespace = name->namespace_name;
      p.container = name->container;
    }
    if (!in_pods || loading_ || load_wanted_) return false;
    const int64_t now = clock_();
    const int64_t since = now - last_attempt_ms_;
    const bool due = !attempted_ || (missing && since >= options_.retry_ms) || since >= options_.refresh_ms;
    if (due) {
      attempted_ = true;
      last_attempt_ms_ = now;
    }
    return due;
  };

  std::unique_lock lock(mu_);
  if (!apply()) return;
  if (options_.load_inline) {
    lock.unlock();
    Load();
    lock.lock();
    apply();
  } else {
    load_wanted_ = true;
    wake_.notify_all();
  }
}

void PodResolver::Load() {
  k8s::PodDirectory fresh;
  std::string error;
  const bool ok = loader_(&fresh, &error);
  std::lock_guard lock(mu_);
  ++loads_;
  if (!ok) {
    if (!failing_) {
      Log("cannot read the pods of node " + options_.node + ": " + error +
          "; GPU processes carry no pod labels until it answers (trying again every " +
          std::to_string(options_.retry_ms / 1000) + " s)");
    }
    failing_ = true;
    return;  // the last list stays in use
  }
  if (failing_ || !loaded_) {
    Log(std::string(failing_ ? "the API server answers again: " : "") + std::to_string(fresh.size()) +
        " pod(s) on node " + options_.node);
  }
  failing_ = false;
  loaded_ = true;
  directory_ = std::move(fresh);
}

void PodResolver::Worker() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || load_wanted_; });
    if (stopping_) return;
    load_wanted_ = false;
    loading_ = true;
    lock.unlock();
    Load();
    lock.lock();
    loading_ = false;
  }
}

std::unique_ptr<PodResolver> MakePodResolver(const DaemonConfig& config, std::string* note) {
  note->clear();
  std::string node = config.kubernetes_node;
  if (node.empty()) {
    const char* env = std::getenv("NODE_NAME");
    if (env != nullptr) node = env;
  }
  if (node.empty()) return nullptr;  // not on Kubernetes: nothing to say

  k8s::KubeConfig kube;
  if (config.kubernetes_apiserver.empty()) {
    if (std::getenv("KUBERNETES_SERVICE_HOST") == nullptr) {
      *note = "kubernetes: node " + node +
              " but no API server: not in a pod ($KUBERNETES_SERVICE_HOST unset) and "
              "kubernetes.apiserver is empty; GPU processes carry no pod labels";
      return nullptr;
    }
    std::string error;
    if (!k8s::KubeConfig::InCluster(&kube, &error)) {
      *note = "kubernetes: " + error + "; GPU processes carry no pod labels";
      return nullptr;
    }
  } else {
    kube.server = config.kubernetes_apiserver;
  }
  if (!config.kubernetes_token_file.empty()) {
    kube.token.clear();
    kube.token_file = config.kubernetes_token_file;
  }
  if (!config.kubernetes_ca_file.empty()) kube.ca_file = config.kubernetes_ca_file;
  kube.timeout_seconds = 5;  // a load holds no sample up, but delays gsliced's exit

  PodResolver::Options options;
  options.node = node;
  options.proc_root = config.kubernetes_proc_root;
  options.refresh_ms = config.kubernetes_refresh_seconds * 1000;
  options.retry_ms = config.kubernetes_retry_seconds * 1000;
  *note = "kubernetes: pods of node " + node + " from " + kube.server + ", cgroups from " +
          options.proc_root;
  auto client = std::make_shared<k8s::KubeClient>(kube);
  return std::make_unique<PodResolver>(
      options, [client, node](k8s::PodDirectory* dir, std::string* error) {
        return k8s::LoadPodDirectory(*client, node, dir, error);
      });
}

}  // namespace gslice
