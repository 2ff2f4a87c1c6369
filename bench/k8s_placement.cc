// Placement benchmark for the scheduler extender: a simulated cluster (default 1,000 nodes x
// 8 GPUs of 80 GiB) receives a stream of fractional-GPU pods; each decision evaluates every
// node (the extender's filter + prioritize) and books the best one (bind). The cluster is
// filled until it refuses pods, then churned: a share of the pods leave and new ones arrive
// until it is full again. Reported per policy:
//   - decisions per CPU second and per wall second (every node evaluated per decision;
//     placed or refused);
//   - how full the cluster was (memory in use) when it first refused a pod;
//   - at saturation: memory in use, memory free but in unusable fragments (a GPU's free
//     memory under --min-fragment MiB, or on a GPU with no slice slot left), and the share of
//     GPUs left completely empty (what a whole-GPU or multi-GPU job needs);
//   all as fractions of the cluster, means over the first fill and every churn round.
// Also the same decisions through the extender's JSON handlers (filter, prioritize, bind, no
// network) on the first --json-decisions pods, for the rate kube-scheduler would see.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gslice/k8s/extender.h"
#include "gslice/k8s/placement.h"

namespace {

using namespace gslice::k8s;
using Clock = std::chrono::steady_clock;

struct Options {
  int nodes = 1000;
  int gpus_per_node = 8;
  int64_t gpu_mib = 81920;
  int slices_per_gpu = 8;  // what the device plugin advertises for 8 GPUs (64-slice ledger)
  int64_t min_fragment = 2048;
  int rounds = 4;          // churn rounds after the first fill
  double churn = 0.3;      // share of pods that leave each round
  int saturation = 100;    // consecutive refusals that mean "full"
  int json_decisions = 2000;
  unsigned seed = 42;
};

// A workload mix in the spirit of shared inference/notebook clusters: mostly small slices,
// some large ones, a few whole and multi-GPU jobs.
PodRequest RandomPod(std::mt19937_64& rng, int id) {
  static const int64_t kMem[] = {2048, 4096, 8192, 10240, 16384, 20480, 24576, 40960, 0};
  static const double kMemW[] = {10, 18, 20, 12, 14, 8, 6, 7, 5};
  static const int kCompute[] = {0, 10, 25, 50};
  static const double kComputeW[] = {30, 30, 30, 10};
  std::discrete_distribution<int> mem(std::begin(kMemW), std::end(kMemW));
  std::discrete_distribution<int> comp(std::begin(kComputeW), std::end(kComputeW));
  std::uniform_real_distribution<double> u(0, 1);
  PodRequest p;
  p.namespace_name = "bench";
  p.name = "p" + std::to_string(id);
  p.uid = p.name;
  p.slice_class = u(rng) < 0.7 ? SliceClass::kGuaranteed : SliceClass::kOpportunistic;
  double g = u(rng);
  int gpus = g < 0.9 ? 1 : g < 0.97 ? 2 : 4;
  p.containers.push_back({"main", gpus, kMem[mem(rng)], kCompute[comp(rng)]});
  return p;
}

std::vector<GpuInfo> NodeGpus(const Options& o, int node) {
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < o.gpus_per_node; ++i)
    gpus.push_back({"GPU-n" + std::to_string(node) + "-" + std::to_string(i), i, o.gpu_mib, "sim", true});
  return gpus;
}

// CPU time of this thread: the machine may be shared, wall time would measure the neighbours.
double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Result {
  long decisions = 0;
  double cpu_seconds = 0;
  double wall_seconds = 0;
  long refused = 0;
  // Means over the fills (the first fill and one per churn round):
  double used_at_first_refusal = 0;  // how full the cluster got before it refused a pod
  double used = 0, unusable = 0;     // at saturation
  double empty_gpus = 0;             // GPUs with nothing on them, at saturation
  int samples = 0;
};

Result Run(const Options& o, Policy policy) {
  ClusterState state(PlacementConfig{policy, o.min_fragment, o.slices_per_gpu});
  std::vector<std::string> names;
  for (int n = 0; n < o.nodes; ++n) {
    names.push_back("node-" + std::to_string(n));
    state.SetNode(names.back(), NodeGpus(o, n), o.slices_per_gpu);
  }
  std::mt19937_64 rng(o.seed);
  Result r;
  std::vector<std::string> live;
  int next_id = 0;
  auto fill = [&] {
    int refused_in_a_row = 0;
    bool refused_once = false;
    while (refused_in_a_row < o.saturation) {
      PodRequest pod = RandomPod(rng, next_id++);
      auto t0 = Clock::now();
      double c0 = CpuSeconds();
      std::optional<NodeFit> best;
      std::string why;
      for (const auto& n : names) {
        auto fit = state.Fit(pod, n, policy, &why);
        if (fit && (!best || fit->score > best->score)) best = std::move(fit);
      }
      bool placed = best && state.Reserve(pod.uid, pod.namespace_name, best->assignment, false, &why);
      r.cpu_seconds += CpuSeconds() - c0;
      r.wall_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      ++r.decisions;
      if (placed) {
        live.push_back(pod.uid);
        refused_in_a_row = 0;
      } else {
        ++refused_in_a_row;
        ++r.refused;
        if (!refused_once) {
          FragmentStats f = state.Fragmentation();
          r.used_at_first_refusal += 1.0 - static_cast<double>(f.free_mib) / static_cast<double>(f.total_mib);
          refused_once = true;
        }
      }
    }
    FragmentStats f = state.Fragmentation();
    r.used += 1.0 - static_cast<double>(f.free_mib) / static_cast<double>(f.total_mib);
    r.unusable += f.unusable_fraction();
    r.empty_gpus += 1.0 - static_cast<double>(f.gpus_in_use) / f.gpus;
    ++r.samples;
  };
  fill();
  for (int round = 0; round < o.rounds; ++round) {
    std::shuffle(live.begin(), live.end(), rng);
    size_t leave = static_cast<size_t>(static_cast<double>(live.size()) * o.churn);
    for (size_t i = 0; i < leave; ++i) state.Release(live[live.size() - 1 - i]);
    live.resize(live.size() - leave);
    fill();
  }
  r.used_at_first_refusal /= r.samples;
  r.used /= r.samples;
  r.unusable /= r.samples;
  r.empty_gpus /= r.samples;
  return r;
}

// Decisions through the extender's JSON handlers, as kube-scheduler drives them.
double JsonRate(const Options& o, Policy policy) {
  ExtenderOptions opt;
  opt.placement = PlacementConfig{policy, o.min_fragment, o.slices_per_gpu};
  Extender ext(opt, nullptr);
  nlohmann::json items = nlohmann::json::array();
  nlohmann::json names = nlohmann::json::array();
  for (int n = 0; n < o.nodes; ++n) {
    std::string name = "node-" + std::to_string(n);
    names.push_back(name);
    items.push_back({{"metadata", {{"name", name}, {"annotations", {
        {"gslice.io/gpus", EncodeGpuInventory(NodeGpus(o, n))},
        {"gslice.io/slices-per-gpu", std::to_string(o.slices_per_gpu)}}}}}});
  }
  // Teach it the nodes once (a scheduler with nodeCacheCapable sends names only).
  ext.Filter({{"Pod", {{"metadata", {{"name", "warm"}}}}}, {"Nodes", {{"items", items}}}});
  std::mt19937_64 rng(o.seed);
  double c0 = CpuSeconds();
  for (int i = 0; i < o.json_decisions; ++i) {
    PodRequest p = RandomPod(rng, i);
    const auto& c = p.containers[0];
    nlohmann::json limits = {{"gslice.io/gpu", std::to_string(c.gpus)}};
    if (c.memory_mib) limits["gslice.io/gpu-memory"] = std::to_string(c.memory_mib);
    if (c.compute_percent) limits["gslice.io/gpu-compute"] = std::to_string(c.compute_percent);
    nlohmann::json pod = {{"metadata", {{"name", p.name}, {"namespace", "bench"}, {"uid", p.uid},
                                        {"annotations", {{"gslice.io/class", std::string(ToString(p.slice_class))}}}}},
                          {"spec", {{"containers", {{{"name", "main"}, {"resources", {{"limits", limits}}}}}}}}};
    nlohmann::json f = ext.Filter({{"Pod", pod}, {"NodeNames", names}});
    if (f["NodeNames"].empty()) continue;
    nlohmann::json pr = ext.Prioritize({{"Pod", pod}, {"NodeNames", f["NodeNames"]}});
    std::string best;
    int64_t score = -1;
    for (const auto& h : pr)
      if (h["Score"].get<int64_t>() > score) score = h["Score"], best = h["Host"];
    ext.Bind({{"PodName", p.name}, {"PodNamespace", "bench"}, {"PodUID", p.uid}, {"Node", best}});
  }
  return o.json_decisions / (CpuSeconds() - c0);
}

bool Arg(int argc, char** argv, int* i, const char* name, long* out) {
  if (std::string(argv[*i]) != name) return false;
  if (*i + 1 >= argc) {
    std::fprintf(stderr, "%s needs a value\n", name);
    std::exit(2);
  }
  char* end = nullptr;
  *out = std::strtol(argv[++*i], &end, 10);
  if (*end != '\0' || *out < 0) {
    std::fprintf(stderr, "%s %s: expected a non-negative integer\n", name, argv[*i]);
    std::exit(2);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    long v = 0;
    if (Arg(argc, argv, &i, "--nodes", &v)) o.nodes = static_cast<int>(std::max(1L, v));
    else if (Arg(argc, argv, &i, "--gpus-per-node", &v)) o.gpus_per_node = static_cast<int>(std::max(1L, v));
    else if (Arg(argc, argv, &i, "--gpu-mib", &v)) o.gpu_mib = std::max(1024L, v);
    else if (Arg(argc, argv, &i, "--slices-per-gpu", &v)) o.slices_per_gpu = static_cast<int>(std::max(1L, v));
    else if (Arg(argc, argv, &i, "--min-fragment", &v)) o.min_fragment = v;
    else if (Arg(argc, argv, &i, "--rounds", &v)) o.rounds = static_cast<int>(v);
    else if (Arg(argc, argv, &i, "--json-decisions", &v)) o.json_decisions = static_cast<int>(v);
    else if (Arg(argc, argv, &i, "--seed", &v)) o.seed = static_cast<unsigned>(v);
    else {
      std::fprintf(stderr,
                   "usage: %s [--nodes N] [--gpus-per-node N] [--gpu-mib MIB] [--slices-per-gpu N]\n"
                   "          [--min-fragment MIB] [--rounds N] [--json-decisions N] [--seed N]\n",
                   argv[0]);
      return 2;
    }
  }
  std::printf("cluster: %d nodes x %d GPUs x %lld MiB, %d slices/GPU, fragment < %lld MiB, "
              "%d churn rounds of %.0f%%, seed %u\n\n",
              o.nodes, o.gpus_per_node, static_cast<long long>(o.gpu_mib), o.slices_per_gpu,
              static_cast<long long>(o.min_fragment), o.rounds, o.churn * 100, o.seed);
  std::printf("%-8s %9s %10s %11s %14s %9s %9s %11s %8s %13s\n", "policy", "decisions", "dec/cpu-s",
              "dec/wall-s", "used@1st-refuse", "used@full", "unusable", "empty-GPUs", "refused",
              "json-dec/cpu-s");
  for (Policy p : {Policy::kBinpack, Policy::kSpread}) {
    Result r = Run(o, p);
    double json_rate = o.json_decisions ? JsonRate(o, p) : 0;
    double n = static_cast<double>(r.decisions);
    std::printf("%-8s %9ld %10.0f %11.0f %14.1f%% %8.1f%% %8.2f%% %10.1f%% %8ld %13.0f\n",
                std::string(ToString(p)).c_str(), r.decisions, n / r.cpu_seconds, n / r.wall_seconds,
                100 * r.used_at_first_refusal, 100 * r.used, 100 * r.unusable, 100 * r.empty_gpus,
                r.refused, json_rate);
    std::fflush(stdout);
  }
  return 0;
}
