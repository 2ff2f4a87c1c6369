// gslice-dra-plugin: the gslice DRA driver's kubelet plugin. Publishes the node's GPUs as a
// ResourceSlice with consumable memory and compute, and prepares each allocated
// ResourceClaim as a gsliced slice with a CDI spec. Runs on every GPU node beside gsliced
// (deploy/kubernetes/dra/ and docs/kubernetes.md).
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gslice/k8s/dra_plugin.h"
#include "gslice/k8s/tool_flags.h"
#include "gslice/ledger.h"
#include "gslice/shrink_guard.h"
#include "gslice/options.h"
#include "gslice/suspend_board.h"

namespace {

constexpr const char* kUsage = R"(usage: gslice-dra-plugin [options]

  --node-name NAME        this node (default: $NODE_NAME, set from the downward API)
  --driver NAME           the DRA driver name (default gslice.io)
  --gpus SOURCE           nvml (default) or file:PATH (a JSON GPU list, for tests and demos)
  --nvml-library PATH     NVML to load (default libnvidia-ml.so.1)
  --registry-dir DIR      kubelet's plugin registration folder (default /var/lib/kubelet/plugins_registry)
  --plugin-dir DIR        the plugin's folder: dra.sock and the record of prepared claims
                          (default /var/lib/kubelet/plugins/<driver>)
  --cdi-dir DIR           where CDI specs go (default /var/run/cdi)
  --gsliced-socket PATH   gsliced's API socket (default $GSLICE_SOCKET or /run/gsliced/gsliced.sock)
  --shim-dir DIR          the interposer on the host (default /usr/lib/gslice)
  --shim-container-dir D  where containers see it (default /usr/lib/gslice)
  --ledger PATH           node ledger directory gsliced writes (default /dev/shm/gslice)
  --suspend-board PATH    suspend board (a directory) on the host, created if missing (default /dev/shm/gslice-suspend)
  --mps-directory DIR     gsliced's MPS folders (its mps_directory, default /run/gsliced/mps); a
                          claim of one GPU whose MPS gsliced gives to its pods' runAsUser, with
                          hostIPC, gets the GPU's MPS folders and environment. "": never MPS
  --apiserver URL         API server (default: in-cluster service account)
  --token-file PATH       bearer token for --apiserver
  --ca-file PATH          CA bundle for an https --apiserver
  --poll-ms N             GPU and socket poll period (default 1000)
)";

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

int Fail(const std::string& msg) {
  std::fprintf(stderr, "gslice-dra-plugin: %s\n", msg.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gslice::k8s;
  // Usage files belong to the slices' users, who may shrink them under a mapping (shrink_guard.h).
  gslice::InstallShrinkGuard();
  DraPluginConfig config;
  if (const char* n = std::getenv("NODE_NAME")) config.node_name = n;
  std::string gpus = "nvml", nvml = "libnvidia-ml.so.1", apiserver, token_file, ca_file, plugin_dir;
  const char* socket_env = gslice::OptionValue(gslice::Option::Socket);
  std::string socket = *socket_env ? socket_env : gslice::GetOptionInfo(gslice::Option::Socket).default_value;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) return Fail(a + ": unknown option or missing value (see --help)");
    std::string v = argv[++i];
    long n = 0;
    if (a == "--node-name") config.node_name = v;
    else if (a == "--driver") config.driver = v;
    else if (a == "--gpus") gpus = v;
    else if (a == "--nvml-library") nvml = v;
    else if (a == "--registry-dir") config.registry_dir = v;
    else if (a == "--plugin-dir") plugin_dir = v;
    else if (a == "--cdi-dir") config.cdi_dir = v;
    else if (a == "--gsliced-socket") socket = v;
    else if (a == "--shim-dir") config.container.shim_host_dir = v;
    else if (a == "--shim-container-dir") config.container.shim_container_dir = v;
    else if (a == "--ledger") config.container.ledger_host_path = v;
    else if (a == "--mps-directory") config.container.mps_directory = v;
    else if (a == "--suspend-board") config.container.board_host_path = v;
    else if (a == "--apiserver") apiserver = v;
    else if (a == "--token-file") token_file = v;
    else if (a == "--ca-file") ca_file = v;
    else if (a == "--poll-ms") {
      if (!ParseInt(v, 10, 600000, &n)) return Fail("--poll-ms " + v + ": expected 10..600000");
      config.poll = std::chrono::milliseconds(n);
    } else {
      return Fail(a + ": unknown option (see --help)");
    }
  }
  if (config.node_name.empty()) return Fail("no node name: pass --node-name or set NODE_NAME");
  config.container.node_name = config.node_name;
  config.plugin_dir = plugin_dir.empty() ? "/var/lib/kubelet/plugins/" + config.driver : plugin_dir;
  std::unique_ptr<GpuSource> source;
  if (gpus == "nvml") source = MakeNvmlGpuSource(nvml);
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

  // Containers bind-mount the suspend board's files: it must exist before the first prepare.
  if (!gslice::CreateSuspendBoard(config.container.board_host_path.c_str(), &err))
    return Fail("cannot open or create the suspend board " + config.container.board_host_path + ": " + err);

  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  auto store = MakeGslicedSliceStore(socket, config.container.ledger_host_path);
  DraPluginRunner runner(config, source.get(), &kube, store.get());
  if (!runner.Start(&err)) return Fail(err);
  std::fprintf(stderr, "gslice-dra-plugin: driver %s on node %s, %zu claim(s) prepared, sockets %s and %s\n",
               config.driver.c_str(), config.node_name.c_str(), runner.service()->prepared().size(),
               runner.registration_socket().c_str(), runner.dra_socket().c_str());
  runner.Run(g_stop);
  runner.Stop();
  return 0;
}
