// gslice-device-plugin: advertises gslice.io/gpu to the kubelet and sets up each container's
// slice. Runs on every GPU node (see deploy/gslice-node.yaml and docs/kubernetes.md).
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "gslice/k8s/device_plugin.h"
#include "gslice/k8s/tool_flags.h"
#include "gslice/ledger.h"
#include "gslice/shrink_guard.h"
#include "gslice/suspend_board.h"

namespace {

constexpr const char* kUsage = R"(usage: gslice-device-plugin [options]

  --node-name NAME        this node (default: $NODE_NAME, set from the downward API)
  --gpus SOURCE           nvml (default) or file:PATH (a JSON GPU list, for tests and demos)
  --nvml-library PATH     NVML to load (default libnvidia-ml.so.1)
  --plugin-dir DIR        kubelet's device plugin folder (default /var/lib/kubelet/device-plugins)
  --slices-per-gpu N      gslice.io/gpu devices per GPU (default 16; capped so that every
                          slice of the node fits in the node ledger)
  --shim-dir DIR          the interposer on the host (default /usr/lib/gslice)
  --shim-container-dir D  where containers see it (default /usr/lib/gslice)
  --ledger PATH           node ledger directory on the host, created if missing (default /dev/shm/gslice)
  --suspend-board PATH    suspend board (a directory) on the host, created if missing (default /dev/shm/gslice-suspend)
  --mps-directory DIR     gsliced's MPS folders (its mps_directory, default /run/gsliced/mps); a
                          pod of one GPU whose MPS gsliced gives to its runAsUser, with hostIPC,
                          gets the GPU's MPS folders and environment. "": never MPS
  --apiserver URL         API server (default: in-cluster service account)
  --token-file PATH       bearer token for --apiserver
  --ca-file PATH          CA bundle for an https --apiserver
  --poll-ms N             health and kubelet-restart poll period (default 1000)
  --remote-client         this node runs pods that use remote GPUs: advertise
                          gslice.io/remote-gpu (--slices-per-gpu devices) instead of GPUs, and
                          set containers up with the forwarding client (docs/kubernetes.md)
  --remote-lib-dir DIR    the forwarding libcuda.so.1's folder on the host, mounted at the same
                          path in containers (default /usr/lib/gslice/remote)
  --remote-token-file F  with --remote-client: the token of the tls:// GPU nodes (their
                          --token-file; owner-only mode). Each container of a remote pod gets
                          its own copy, mode 0400, owned by its securityContext.runAsUser (root
                          when unset), as GSLICE_REMOTE_TOKEN_FILE
  --remote-token-dir DIR  with --remote-client, instead of --remote-token-file: a token per
                          namespace, the file named after it (a Secret with one key per
                          namespace); a pod of a namespace without one is refused at Allocate
  --remote-ca FILE        with --remote-client: the PEM CA bundle the GPU nodes' certificates
                          chain to, handed out likewise as GSLICE_REMOTE_CA (default: none,
                          the containers trust their system's roots)
  --remote-credentials-dir DIR
                          where the per-container copies live on the host, created mode 0711
                          (default /run/gslice/remote-pods); mounted read-only in containers
                          at /etc/gslice/remote
  --remote-address ADDR   this node's gslice-remoted (tls://NODE_IP:PORT), published as the
                          gslice.io/remote-address annotation: the scheduler extender places
                          remote GPUs of pods on other nodes here (docs/kubernetes.md)
)";

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

int Fail(const std::string& msg) {
  std::fprintf(stderr, "gslice-device-plugin: %s\n", msg.c_str());
  return 2;
}

using gslice::k8s::ParseInt;
using gslice::k8s::ReadFile;

}  // namespace

int main(int argc, char** argv) {
  using namespace gslice::k8s;
  // Usage files belong to the slices' users, who may shrink them under a mapping (shrink_guard.h).
  gslice::InstallShrinkGuard();
  DevicePluginConfig config;
  if (const char* n = std::getenv("NODE_NAME")) config.node_name = n;
  std::string gpus = "nvml", nvml = "libnvidia-ml.so.1", apiserver, token_file, ca_file;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--remote-client") {
      config.remote_client = true;
      continue;
    }
    if (i + 1 >= argc) return Fail(a + ": unknown option or missing value (see --help)");
    std::string v = argv[++i];
    long n = 0;
    if (a == "--node-name") config.node_name = v;
    else if (a == "--gpus") gpus = v;
    else if (a == "--nvml-library") nvml = v;
    else if (a == "--plugin-dir") config.plugin_dir = v;
    else if (a == "--shim-dir") config.shim_host_dir = v;
    else if (a == "--shim-container-dir") config.shim_container_dir = v;
    else if (a == "--ledger") config.ledger_host_path = v;
    else if (a == "--mps-directory") config.mps_directory = v;
    else if (a == "--suspend-board") config.board_host_path = v;
    else if (a == "--apiserver") apiserver = v;
    else if (a == "--token-file") token_file = v;
    else if (a == "--ca-file") ca_file = v;
    else if (a == "--remote-address") config.remote_address = v;
    else if (a == "--remote-token-file") config.remote_credentials.token_file = v;
    else if (a == "--remote-token-dir") config.remote_credentials.token_dir = v;
    else if (a == "--remote-ca") config.remote_credentials.ca_file = v;
    else if (a == "--remote-credentials-dir") config.remote_credentials.host_dir = v;
    else if (a == "--remote-lib-dir") config.remote_lib_host_dir = config.remote_lib_container_dir = v;
    else if (a == "--slices-per-gpu") {
      if (!ParseInt(v, 1, 1024, &n)) return Fail("--slices-per-gpu " + v + ": expected 1..1024");
      config.slices_per_gpu = static_cast<int>(n);
    } else if (a == "--poll-ms") {
      if (!ParseInt(v, 10, 600000, &n)) return Fail("--poll-ms " + v + ": expected 10..600000");
      config.poll = std::chrono::milliseconds(n);
    } else {
      return Fail(a + ": unknown option (see --help)");
    }
  }
  if (config.node_name.empty()) return Fail("no node name: pass --node-name or set NODE_NAME");
  if (!config.remote_client && (config.remote_credentials.has_tokens() || !config.remote_credentials.ca_file.empty()))
    return Fail("--remote-token-file, --remote-token-dir and --remote-ca are for --remote-client nodes");
  std::unique_ptr<GpuSource> source;
  if (config.remote_client) {
    config.resource_name = std::string(kResourceRemoteGpu);
    config.socket_name = "gslice-remote.sock";
    source = MakeNoGpuSource();
  } else if (gpus == "nvml") source = MakeNvmlGpuSource(nvml);
  else if (gpus.rfind("file:", 0) == 0 && gpus.size() > 5) source = MakeFileGpuSource(gpus.substr(5));
  else return Fail("--gpus " + gpus + ": expected nvml or file:PATH");

  KubeConfig kc;
  std::string err;
  if (apiserver.empty()) {
    if (!KubeConfig::InCluster(&kc, &err)) return Fail(err);
  } else {
    kc.server = apiserver;
  }
  if (!token_file.empty()) {
    if (!ReadFile(token_file, &kc.token)) return Fail("cannot read --token-file " + token_file);
    kc.token_file = token_file;
  }
  if (!ca_file.empty()) kc.ca_file = ca_file;
  KubeClient kube(kc);

  // Containers bind-mount the ledger directory: it must exist before the first Allocate, and
  // the plugin (root) writes the containers' slices into it.
  if (!config.remote_client) {
    gslice::Ledger ledger;
    if (gslice::LedgerError e = ledger.Open(config.ledger_host_path.c_str()); e != gslice::LedgerError::kOk)
      return Fail("cannot open or create the node ledger " + config.ledger_host_path + ": " + ledger.detail());
    if (!ledger.writable())
      return Fail("the node ledger " + config.ledger_host_path + " is not this plugin's to write (run it as root)");
    std::string board_error;
    if (!gslice::CreateSuspendBoard(config.board_host_path.c_str(), &board_error))
      return Fail("cannot open or create the suspend board " + config.board_host_path + ": " + board_error);
  }

  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  DevicePluginRunner runner(config, source.get(), &kube);
  if (!runner.Start(&err)) return Fail(err);
  std::fprintf(stderr, "gslice-device-plugin: node %s, %zu GPU(s), %d slices each, socket %s/%s\n",
               config.node_name.c_str(), runner.service()->gpus().size(), runner.service()->slices_per_gpu(),
               config.plugin_dir.c_str(), config.socket_name.c_str());
  runner.Run(g_stop);
  runner.Stop();
  return 0;
}
