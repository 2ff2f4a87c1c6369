// Remote-call transport: the unix socket against the same-host shared-memory rings
// (docs/remote.md, "Same host"), side by side in one run, through gslice-remoted --sim.
//
// The harness starts its own gslice-remoted --sim on a private unix socket and simulated node,
// and one long-lived client per transport (bench/remote_transport_client.cc under
// gslice run --remote): socket (GSLICE_REMOTE_SHM=off), rings (the default spin) and rings
// without spinning (GSLICE_REMOTE_SHM_SPIN=0). Each iteration asks a client for a batch of
// calls and records the time the client measured (manual time):
//   RoundTrip   cuCtxSynchronize with nothing queued: one request and one answer
//   Async       cuMemsetD32Async of one word, queued; the batch ends with cuStreamSynchronize
//   HtoD, DtoH  a blocking copy of the given size (host memory of the client, device memory
//               of the simulated GPU)
// Counters: us_per_call (wall), cpu_us_per_call (the client process's CPU: what a spin costs).
// The simulated driver's own work is in every figure alike; the difference between rows of
// one benchmark is the transport's.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <benchmark/benchmark.h>

#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.h"

namespace {

using gslice::test::Child;

const std::string kBin = GSLICE_BENCH_BIN;
const std::string kClient = GSLICE_BENCH_CLIENT;

std::string Prefix() { return "/dev/shm/gslice-bench-" + std::to_string(getpid()) + "-transport"; }
std::string SocketPath() { return "/tmp/gslice-bench-" + std::to_string(getpid()) + "-transport.sock"; }

struct Transport {
  const char* name;
  std::vector<std::string> env;
};
const Transport kTransports[] = {
    {"socket", {"GSLICE_REMOTE_SHM=off"}},
    {"rings", {"GSLICE_REMOTE_SHM=on"}},
    {"rings_nospin", {"GSLICE_REMOTE_SHM=on", "GSLICE_REMOTE_SHM_SPIN=0"}},
};

std::unique_ptr<Child> g_server;
std::map<std::string, std::unique_ptr<Child>> g_clients;

Child* ClientFor(const Transport& t) {
  auto& c = g_clients[t.name];
  if (!c) {
    c = std::make_unique<Child>(std::vector<std::string>{kBin + "/gslice", "run", "--remote", "unix:" + SocketPath(),
                                                         "--memory", "1GiB", "--", kClient},
                                t.env);
    if (c->ReadUntil("ready", 60000).empty()) return nullptr;
  }
  return c.get();
}

// One batch: the client's wall and CPU nanoseconds, false on an error.
bool Batch(Child* c, const std::string& command, double* wall_ns, double* cpu_ns) {
  c->WriteLine(command);
  std::string line;
  while (c->ReadLine(&line, 120000)) {
    if (line.rfind("gslice", 0) == 0) continue;  // a log line
    if (line.rfind("error", 0) == 0) return false;
    std::istringstream in(line);
    return static_cast<bool>(in >> *wall_ns >> *cpu_ns);
  }
  return false;
}

void Run(benchmark::State& state, const Transport& t, const std::string& command, double calls) {
  Child* c = ClientFor(t);
  if (c == nullptr) {
    state.SkipWithError("the client did not start");
    return;
  }
  double wall_total = 0, cpu_total = 0;
  for (auto _ : state) {
    double wall = 0, cpu = 0;
    if (!Batch(c, command, &wall, &cpu)) {
      state.SkipWithError("the client's calls failed");
      return;
    }
    state.SetIterationTime(wall / 1e9);
    wall_total += wall;
    cpu_total += cpu;
  }
  const double n = static_cast<double>(state.iterations()) * calls;
  state.SetItemsProcessed(static_cast<int64_t>(n));
  state.counters["us_per_call"] = wall_total / n / 1e3;
  state.counters["cpu_us_per_call"] = cpu_total / n / 1e3;
}

void Register() {
  struct Case {
    std::string name;
    std::string command;
    double calls;
    double bytes;
  };
  const std::vector<Case> cases = {
      {"RoundTrip", "rt 200", 200, 0},
      {"Async", "async 2000", 2000, 0},
      {"HtoD/64KiB", "htod 65536 50", 50, 65536},
      {"DtoH/64KiB", "dtoh 65536 50", 50, 65536},
      {"HtoD/32MiB", "htod 33554432 2", 2, 33554432},
      {"DtoH/32MiB", "dtoh 33554432 2", 2, 33554432},
  };
  for (const Case& c : cases) {
    for (const Transport& t : kTransports) {
      auto* b = benchmark::RegisterBenchmark((c.name + "/" + t.name).c_str(), [c, &t](benchmark::State& s) {
        Run(s, t, c.command, c.calls);
        if (c.bytes > 0) s.SetBytesProcessed(static_cast<int64_t>(static_cast<double>(s.iterations()) * c.calls * c.bytes));
      });
      b->UseManualTime()->Unit(benchmark::kMicrosecond);
    }
  }
}

void Cleanup() {
  for (auto& [name, c] : g_clients) {
    if (c) c->Wait(nullptr, 20000);
  }
  g_clients.clear();
  if (g_server) {
    g_server->Kill(SIGTERM);
    g_server->Wait(nullptr, 10000);
    g_server.reset();
  }
  unlink(SocketPath().c_str());
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    if (entry.path().string().rfind(Prefix(), 0) == 0) std::filesystem::remove_all(entry.path(), ec);
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  setenv("GSLICE_SIM_STATE", (Prefix() + "-node").c_str(), 1);
  setenv("GSLICE_SIM_DEVICES", "1", 1);
  setenv("GSLICE_SIM_MEMORY", "4GiB", 1);
  setenv("GSLICE_LEDGER", (Prefix() + "-ledger").c_str(), 1);
  setenv("GSLICE_SUSPEND_BOARD", (Prefix() + "-board").c_str(), 1);
  for (const char* v : {"GSLICE_REMOTE", "GSLICE_SOCKET", "GSLICE_DAEMON", "GSLICE_MEMORY", "GSLICE_LOG",
                        "GSLICE_REMOTE_SHM", "GSLICE_REMOTE_SHM_SPIN"}) {
    unsetenv(v);
  }
  g_server = std::make_unique<Child>(
      std::vector<std::string>{kBin + "/gslice-remoted", "--listen", "unix:" + SocketPath(), "--sim", "--allow-root-tenant"});
  if (g_server->ReadUntil("gslice-remoted: listening on", 20000).empty()) {
    fprintf(stderr, "gslice-remoted did not start\n");
    Cleanup();
    return 1;
  }
  Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  Cleanup();
  return 0;
}
