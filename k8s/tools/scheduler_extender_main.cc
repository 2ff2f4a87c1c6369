// gslice-scheduler-extender: kube-scheduler's HTTP extender for gslice.io resources.
// See docs/kubernetes.md for the scheduler configuration that calls it.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <httplib.h>

#include "gslice/k8s/extender.h"
#include "gslice/k8s/tool_flags.h"

namespace {

constexpr const char* kUsage = R"(usage: gslice-scheduler-extender [options]

  --listen HOST:PORT      address to serve filter/prioritize/bind on (default 0.0.0.0:12346)
  --apiserver URL         API server (default: in-cluster service account; e.g.
                          http://127.0.0.1:8001 behind `kubectl proxy`)
  --token-file PATH       bearer token for --apiserver
  --ca-file PATH          CA bundle for an https --apiserver
  --policy binpack|spread placement policy (default binpack; a pod may override it with the
                          gslice.io/policy annotation)
  --min-fragment MIB      free memory below this on a GPU counts as an unusable fragment
                          (default 2048)
  --slices-per-gpu N      slices per GPU when a node does not publish its own (default 16)
  --quota-file PATH       per-namespace quotas, JSON:
                          {"team-a": {"gpus": 8, "memoryMiB": 81920, "computePercent": 400}}
  --resync SECONDS        reload pods and nodes from the API server this often (default 15)
)";

httplib::Server* g_server = nullptr;
void OnSignal(int) {
  if (g_server) g_server->stop();
}

using gslice::k8s::ParseInt;
using gslice::k8s::ReadFile;

int Fail(const std::string& msg) {
  std::fprintf(stderr, "gslice-scheduler-extender: %s\n", msg.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gslice::k8s;
  std::string listen = "0.0.0.0:12346", apiserver, token_file, ca_file, quota_file;
  ExtenderOptions options;
  long resync = 15;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) return Fail(a + ": unknown option or missing value (see --help)");
    std::string v = argv[++i];
    long n = 0;
    if (a == "--listen") listen = v;
    else if (a == "--apiserver") apiserver = v;
    else if (a == "--token-file") token_file = v;
    else if (a == "--ca-file") ca_file = v;
    else if (a == "--quota-file") quota_file = v;
    else if (a == "--policy") {
      auto p = ParsePolicy(v);
      if (!p) return Fail("--policy " + v + ": must be binpack or spread");
      options.placement.policy = *p;
    } else if (a == "--min-fragment") {
      if (!ParseInt(v, 0, 1 << 24, &n)) return Fail("--min-fragment " + v + ": expected MiB, 0..16777216");
      options.placement.min_useful_mib = n;
    } else if (a == "--slices-per-gpu") {
      if (!ParseInt(v, 1, 1024, &n)) return Fail("--slices-per-gpu " + v + ": expected 1..1024");
      options.placement.slices_per_gpu = static_cast<int>(n);
    } else if (a == "--resync") {
      if (!ParseInt(v, 1, 86400, &n)) return Fail("--resync " + v + ": expected seconds, 1..86400");
      resync = n;
    } else {
      return Fail(a + ": unknown option (see --help)");
    }
  }
  size_t colon = listen.rfind(':');
  long port = 0;
  if (colon == std::string::npos || !ParseInt(listen.substr(colon + 1), 1, 65535, &port))
    return Fail("--listen " + listen + ": expected HOST:PORT");
  if (!quota_file.empty()) {
    std::string text, err;
    if (!ReadFile(quota_file, &text)) return Fail("cannot read --quota-file " + quota_file);
    auto q = ParseQuotas(text, &err);
    if (!q) return Fail(err);
    options.quotas = *q;
  }
  KubeConfig config;
  std::string err;
  if (apiserver.empty()) {
    if (!KubeConfig::InCluster(&config, &err)) return Fail(err);
  } else {
    config.server = apiserver;
  }
  if (!token_file.empty()) {
    if (!ReadFile(token_file, &config.token)) return Fail("cannot read --token-file " + token_file);
    config.token_file = token_file;
  }
  if (!ca_file.empty()) config.ca_file = ca_file;
  KubeClient kube(config);
  Extender extender(options, &kube);
  // Serve only after the first successful resync: a decision made before it could double book.
  while (!extender.Resync(&err)) {
    std::fprintf(stderr, "gslice-scheduler-extender: waiting for the API server: %s\n", err.c_str());
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  httplib::Server server;
  extender.Route(server);
  g_server = &server;
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::atomic<bool> stop{false};
  std::thread resyncer([&] {
    while (!stop) {
      for (long s = 0; s < resync * 10 && !stop; ++s) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::string e;
      if (!stop && !extender.Resync(&e)) std::fprintf(stderr, "gslice-scheduler-extender: resync: %s\n", e.c_str());
    }
  });
  std::fprintf(stderr, "gslice-scheduler-extender: policy %s, serving on %s\n",
               std::string(ToString(options.placement.policy)).c_str(), listen.c_str());
  bool ok = server.listen(listen.substr(0, colon), static_cast<int>(port));
  stop = true;
  resyncer.join();
  if (!ok) return Fail("cannot listen on " + listen);
  return 0;
}
