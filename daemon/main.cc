// gsliced: the gslice node daemon. See docs/daemon.md.
#include <limits.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api_server.h"
#include "gslice/shrink_guard.h"
#include "config.h"
#include "gpu_inventory.h"
#include "gslice/options.h"
#include "ledger_binding.h"
#include "pod_resolver.h"
#include "registry.h"
#include "store.h"
#include "gslice/suspend/daemon_suspender.h"

namespace {

constexpr const char* kUsage = R"(usage: gsliced [--config FILE] [--set KEY=VALUE]... [--sim] [--check-config] [--print-config]

gsliced is gslice's node daemon: it knows the node's GPUs, keeps the slice registry
(users, projects, quotas) in SQLite, admits or refuses slices, publishes their limits to
the node ledger the shims enforce, and serves the API, /metrics and the dashboard.

  --config FILE     read options from a TOML file (default: none; built-in defaults)
  --set KEY=VALUE   override one option, e.g. --set socket=/tmp/gsliced.sock
  --sim             run on gslice's simulated driver (build/lib/sim: a machine without a
                    GPU): its NVML for the GPUs and its checkpoint API for suspend/resume.
                    Programs join it with `gslice run --sim`; both use the simulated node
                    GSLICE_SIM_STATE names (default /dev/shm/gslice-sim-<uid>).
  --check-config    load and check the configuration, then exit (0 when it is valid)
  --print-config    print every option with its default and meaning, then exit
  --help            this text

Talk to it with `gslice ls`, `gslice create`, ... (they use the socket), or open the
dashboard on the TCP address (see `tcp` and `token_file`). Restarting gsliced never
disturbs running work: it re-reads the database and re-adopts slices from the ledger.
)";

int Fail(const std::string& message) {
  std::fprintf(stderr, "gsliced: %s\n", message.c_str());
  return 2;
}

// The simulated driver's folder: <prefix>/lib/sim, beside the <prefix>/bin holding gsliced
// (the build tree and an installation alike; `gslice run --sim` looks in the same place).
std::string SimDriverDir() {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "lib/sim";
  exe[n] = '\0';
  std::string dir(exe);
  dir = dir.substr(0, dir.rfind('/'));  // <prefix>/bin
  return dir.substr(0, dir.rfind('/')) + "/lib/sim";
}

}  // namespace

namespace gslice {
namespace {

// What the command line asks for.
struct Arguments {
  std::string config_path;
  std::vector<std::string> overrides;  // --set KEY=VALUE, in order
  bool check_only = false;
  bool sim = false;
};

// Reads the command line into *args. An exit status when gsliced is done (--help,
// --print-config) or the line is wrong; nullopt to go on.
std::optional<int> ParseArguments(int argc, char** argv, Arguments* args) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) return nullptr;
      (void)flag;
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--print-config") {
      std::fputs(DocumentedDefaults().c_str(), stdout);
      return 0;
    } else if (arg == "--check-config") {
      args->check_only = true;
    } else if (arg == "--sim") {
      args->sim = true;
    } else if (arg == "--config") {
      const char* v = value("--config");
      if (v == nullptr) return Fail("--config needs a file: --config /etc/gslice/gsliced.toml");
      args->config_path = v;
    } else if (arg.rfind("--config=", 0) == 0) {
      args->config_path = arg.substr(9);
    } else if (arg == "--set") {
      const char* v = value("--set");
      if (v == nullptr) return Fail("--set needs KEY=VALUE, e.g. --set socket=/tmp/gsliced.sock");
      args->overrides.push_back(v);
    } else {
      return Fail("unknown argument '" + arg + "'; see gsliced --help");
    }
  }
  return std::nullopt;
}

// Fills *config from the file and the overrides args names, checked, with the defaults the
// shims share filled in, and *token from its token file. An exit status when gsliced is done
// (--check-config) or cannot run with it; nullopt to go on.
std::optional<int> LoadConfiguration(const Arguments& args, DaemonConfig* config, std::string* token) {
  if (!args.config_path.empty()) {
    auto loaded = LoadConfigFile(args.config_path, *config);
    if (!loaded.ok()) return Fail(loaded.status().message());
    *config = loaded.value();
  }
  for (const std::string& o : args.overrides) {
    if (Status s = ApplyOverride(o, config); !s.ok()) return Fail(s.message());
  }
  if (args.sim) {
    const std::string dir = SimDriverDir();
    struct stat st;
    if (stat((dir + "/libnvidia-ml.so.1").c_str(), &st) != 0 || stat((dir + "/libcuda.so.1").c_str(), &st) != 0) {
      return Fail("--sim: the simulated driver is not built (" + dir +
                  "/libcuda.so.1, libnvidia-ml.so.1): build it with scripts/build");
    }
    config->nvml_library = dir + "/libnvidia-ml.so.1";
    config->driver_library = dir + "/libcuda.so.1";
  }
  if (Status s = ValidateConfig(*config); !s.ok()) return Fail(s.message());
  if (!config->token_file.empty()) {
    auto t = ReadToken(config->token_file);
    if (!t.ok()) return Fail(t.status().message());
    *token = t.value();
  }
  if (config->ledger.empty()) {
    const char* env = std::getenv("GSLICE_LEDGER");
    config->ledger = env && *env ? env : GetOptionInfo(Option::Ledger).default_value;
  }
  // Like the ledger, the board defaults to what the shims read, so both find the same one.
  if (config->suspend_board.empty()) config->suspend_board = OptionValue(Option::SuspendBoard);
  if (Status s = CheckReferences(*config); !s.ok()) return Fail(s.message());
  if (args.check_only) {
    std::printf("gsliced: configuration is valid\n");
    return 0;
  }
  return std::nullopt;
}

// Takes SIGTERM, SIGINT and SIGHUP for sigwait (every thread started later inherits the
// mask), ignores SIGPIPE and lifts the descriptor limit. Returns the signals taken.
sigset_t TakeSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Every API connection holds a descriptor: allow what the hard limit allows.
  if (rlimit files{}; getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  return signals;
}

// For StartRegistry: *error is s's message.
std::nullptr_t Failed(const Status& s, std::string* error) {
  *error = s.message();
  return nullptr;
}

// The registry on its store, the node's GPUs and ledger, suspend/resume, the pods and MPS,
// started and sampled once. nullptr with *error when any of them cannot be opened.
std::unique_ptr<Registry> StartRegistry(const DaemonConfig& config, std::string* error) {
  auto store = Store::Open(config.database);
  if (!store.ok()) return Failed(store.status(), error);
  auto inventory = OpenNvmlInventory(config.nvml_library);
  if (!inventory.ok()) return Failed(inventory.status(), error);
  auto ledger = OpenNodeLedger(config.ledger);
  if (!ledger.ok()) return Failed(ledger.status(), error);

  Registry::Options options;
  options.default_project = config.default_project;
  options.shares = {.per_user = static_cast<int>(config.slices_per_user),
                    .per_project = static_cast<int>(config.slices_per_project),
                    .reserved_for_admins = static_cast<int>(config.slices_reserved_for_admins)};
  options.admin_group = config.admin_group;
  options.history_samples =
      static_cast<size_t>(config.history_seconds * 1000 / config.sample_interval_ms) + 1;
  // Suspend/resume, idle reclaim and preemption (daemon/suspend, docs/suspend.md).
  std::string suspend_note;
  auto suspender = MakeCheckpointSuspender({.ledger_path = config.ledger,
                                             .board_path = config.suspend_board,
                                             .driver_library = config.driver_library,
                                             .nvml_library = config.nvml_library},
                                            &suspend_note);
  if (!suspend_note.empty()) std::fprintf(stderr, "gsliced: %s\n", suspend_note.c_str());
  Suspender* suspender_handle = suspender.get();
  // Pod labels for GPU processes when on Kubernetes (docs/kubernetes.md, per-pod metrics).
  std::string pods_note;
  auto pods = MakePodResolver(config, &pods_note);
  if (!pods_note.empty()) std::fprintf(stderr, "gsliced: %s\n", pods_note.c_str());
  // MPS control daemons for the GPUs (daemon/mps_service.h, docs/compute.md).
  MpsServiceOptions mps_options{.control = config.mps_control, .directory = config.mps_directory};
  ParseMpsMode(config.mps, &mps_options.mode);  // ValidateConfig checked it
  ParseMpsClasses(config.mps_classes, &mps_options.classes);
  auto mps = std::make_unique<MpsService>(mps_options);
  if (Status s = mps->Prepare(); !s.ok()) return Failed(s, error);
  std::fprintf(stderr, "gsliced: mps: %s\n", mps->Describe().c_str());
  auto registry = std::make_unique<Registry>(options, std::move(store.value()), std::move(inventory.value()),
                                             std::move(ledger.value()), std::move(suspender), std::move(pods), std::move(mps));
  SetIdleTimeouts(suspender_handle, [r = registry.get()](const std::string& slice) -> int64_t {
    auto view = r->GetSlice(slice);
    return view.ok() ? view->slice.idle_timeout_s : 0;
  });
  if (Status s = registry->Start(); !s.ok()) return Failed(s, error);
  registry->Sample();
  return registry;
}

// Samples the registry every sample interval until one of the signals comes.
void SampleUntilSignalled(Registry* registry, int64_t interval_ms, const sigset_t& signals) {
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::thread sampler([&] {
    std::unique_lock lock(mu);
    while (!cv.wait_for(lock, std::chrono::milliseconds(interval_ms),
                        [&] { return stopping; })) {
      lock.unlock();
      registry->Sample();
      lock.lock();
    }
  });

  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "gsliced: %s: stopping (running slices keep running)\n", strsignal(sig));
  {
    std::lock_guard lock(mu);
    stopping = true;
  }
  cv.notify_all();
  sampler.join();
}

}  // namespace
}  // namespace gslice

int main(int argc, char** argv) {
  using namespace gslice;
  // Usage files belong to the slices' users, who may shrink them under a mapping (shrink_guard.h).
  gslice::InstallShrinkGuard();
  Arguments args;
  if (std::optional<int> done = ParseArguments(argc, argv, &args)) return *done;
  DaemonConfig config = DefaultConfig();
  std::string token;
  if (std::optional<int> done = LoadConfiguration(args, &config, &token)) return *done;

  // Signals are taken synchronously by this thread; every other thread inherits the mask.
  const sigset_t signals = TakeSignals();

  if (args.sim) {
    std::fprintf(stderr,
                 "gsliced: --sim: running on gslice's SIMULATED driver (%s): its GPUs, memory and "
                 "suspend/resume are simulated on the CPU, and its figures say nothing about real GPUs. "
                 "Run programs with `gslice run --sim`, under the same GSLICE_SIM_STATE (default "
                 "/dev/shm/gslice-sim-<uid>).\n",
                 config.driver_library.substr(0, config.driver_library.rfind('/')).c_str());
  }
  std::string error;
  std::unique_ptr<Registry> registry = StartRegistry(config, &error);
  if (registry == nullptr) return Fail(error);

  ApiServer server(registry.get(), config, token);
  if (Status s = server.Start(); !s.ok()) return Fail(s.message());
  if (!config.socket.empty()) std::fprintf(stderr, "gsliced: api on unix:%s\n", config.socket.c_str());
  if (server.tcp_port() > 0) {
    std::fprintf(stderr, "gsliced: api on tcp %s (port %d)\n", config.tcp.c_str(), server.tcp_port());
  }
  std::fflush(stderr);

  SampleUntilSignalled(registry.get(), config.sample_interval_ms, signals);
  server.Stop();
  registry->StopMps();
  return 0;
}
