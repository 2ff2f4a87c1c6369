// gslice-sim-state: prints the simulated node as a person reads it: devices, memory in use,
// processes, who holds each device, utilisation. Reads GSLICE_SIM_STATE like the sim does
// (creating the node from the environment if it does not exist yet).
#include <cstdio>
#include <cstring>
#include <string>

#include "gslice/units.h"
#include "node.h"

namespace {

std::string Size(uint64_t bytes) {
  char buf[32];
  gslice::FormatSize(bytes, buf, sizeof buf);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    std::fprintf(stderr,
                 "usage: gslice-sim-state\n"
                 "Prints the simulated node of GSLICE_SIM_STATE (default /dev/shm/gslice-sim-<uid>).\n");
    return std::strcmp(argv[1], "--help") == 0 ? 0 : 64;
  }
  gslice::sim::Node node;
  std::string error;
  if (!gslice::sim::Node::Open(&node, &error)) {
    std::fprintf(stderr, "gslice-sim-state: %s\n", error.c_str());
    return 1;
  }
  node.Reap();
  std::printf("simulated node %s, time slice %u us\n", gslice::sim::StatePath().c_str(),
              node.timeslice_us());
  for (uint32_t d = 0; d < node.device_count(); ++d) {
    const gslice::sim::DeviceRecord& dev = node.device(d);
    const uint64_t used = node.Used(d);
    std::printf("\ndevice %u  %s  %s\n", d, dev.uuid_text, dev.name);
    std::printf("  memory  %s used of %s, %u SMs, busy %.0f%% over the last second\n",
                Size(used).c_str(), Size(dev.total_memory).c_str(), dev.sm_count,
                node.Utilization(d) * 100.0);
    for (uint32_t i = 0; i < gslice::sim::kMaxProcesses; ++i) {
      gslice::sim::ProcessSlot& s = node.slot(static_cast<int>(i));
      if (s.state.load() != static_cast<uint32_t>(gslice::sim::SlotState::kLive)) continue;
      if (s.used[d].load() == 0 && s.contexts[d].load() == 0) continue;
      std::printf("  pid %-8d %10s  %u context(s)  %.1f s of kernels\n", s.pid,
                  Size(s.used[d].load()).c_str(), s.contexts[d].load(),
                  static_cast<double>(s.busy_ns[d].load()) / 1e9);
    }
  }
  std::printf("\nprocesses\n");
  for (uint32_t i = 0; i < gslice::sim::kMaxProcesses; ++i) {
    gslice::sim::ProcessSlot& s = node.slot(static_cast<int>(i));
    if (s.state.load() != static_cast<uint32_t>(gslice::sim::SlotState::kLive)) continue;
    static const char* kStates[] = {"running", "locked", "checkpointed", "failed"};
    const uint32_t st = s.process_state.load();
    std::printf("  pid %-8d %s\n", s.pid, st < 4 ? kStates[st] : "?");
  }
  return 0;
}
