// gslice-suspend-agent: runs the suspend service (service.h) without gsliced, for nodes
// and tests that want idle reclaim, transparent resume and memory preemption on their own.
// gsliced runs the same service inside; do not run both on one node.
//
//   gslice-suspend-agent [--idle SLICE=SECONDS]... [--ledger PATH] [--board PATH]
//                        [--driver PATH] [--nvml PATH] [--tick-ms N] [--host-reserve SIZE]
//                        [--max-host SIZE] [--opportunistic SLICE]...
//
// --opportunistic creates the slice in the node ledger as opportunistic before its
// processes start (gsliced does this for the slices it creates; without it, slices that
// `gslice run` creates are guaranteed).
//
// Logs every state change on stdout ("STATE pid=... slice=... state=... cause=...
// reason=..."), stops on SIGINT/SIGTERM (suspended processes stay suspended; a later
// agent or gsliced adopts them).
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "gslice/ledger.h"

#include "gslice/options.h"
#include "gslice/shrink_guard.h"
#include "gslice/suspend/service.h"
#include "gslice/units.h"

namespace {

int Usage(const char* why) {
  if (why) std::fprintf(stderr, "gslice-suspend-agent: %s\n", why);
  std::fprintf(stderr,
               "usage: gslice-suspend-agent [--idle SLICE=SECONDS]... [--ledger PATH] [--board PATH]\n"
               "         [--driver PATH] [--nvml PATH] [--tick-ms N] [--host-reserve SIZE] [--max-host SIZE]\n"
               "         [--opportunistic SLICE]...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gslice::suspend;
  // Usage files belong to the slices' users, who may shrink them under a mapping (shrink_guard.h).
  gslice::InstallShrinkGuard();
  ServiceOptions opt;
  opt.ledger_path = gslice::OptionValue(gslice::Option::Ledger);
  opt.board_path = gslice::OptionValue(gslice::Option::SuspendBoard);
  std::map<std::string, int64_t> idle;
  std::vector<std::string> opportunistic;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--help" || k == "-h") return Usage(nullptr), 0;
    if (i + 1 >= argc) return Usage((k + " needs a value").c_str());
    std::string v = argv[++i];
    if (k == "--idle") {
      auto eq = v.find('=');
      char* end = nullptr;
      long secs = eq == std::string::npos ? -1 : std::strtol(v.c_str() + eq + 1, &end, 10);
      if (eq == std::string::npos || eq == 0 || secs <= 0 || *end != '\0') {
        return Usage(("--idle " + v + ": expected SLICE=SECONDS with SECONDS > 0").c_str());
      }
      idle[v.substr(0, eq)] = secs;
    } else if (k == "--opportunistic") {
      opportunistic.push_back(v);
    } else if (k == "--ledger") {
      opt.ledger_path = v;
    } else if (k == "--board") {
      opt.board_path = v;
    } else if (k == "--driver") {
      opt.driver_library = v;
    } else if (k == "--nvml") {
      opt.nvml_library = v;
    } else if (k == "--tick-ms") {
      opt.tick_ms = std::atoi(v.c_str());
      if (opt.tick_ms <= 0) return Usage("--tick-ms must be a positive number of milliseconds");
    } else if (k == "--host-reserve" || k == "--max-host") {
      gslice::ParsedSize s = gslice::ParseSize(v);
      if (!s.ok) return Usage((k + " " + v + ": " + s.error).c_str());
      (k == "--host-reserve" ? opt.host.reserve_bytes : opt.host.max_suspended_bytes) = s.bytes;
    } else {
      return Usage(("unknown argument " + k).c_str());
    }
  }
  opt.idle_timeout_s = [idle](const std::string& slice) -> int64_t {
    auto it = idle.find(slice);
    return it == idle.end() ? 0 : it->second;
  };
  opt.on_state = [](const ProcessStatus& s) {
    std::printf("STATE pid=%d slice=%s state=%s cause=%s lock_s=%.6f checkpoint_s=%.6f restore_s=%.6f "
                "unlock_s=%.6f reason=\"%s\"\n",
                s.info.pid, s.info.slice.c_str(), StateName(s.state), CauseName(s.cause), s.last.lock_s,
                s.last.checkpoint_s, s.last.restore_s, s.last.unlock_s, s.reason.c_str());
    std::fflush(stdout);
  };

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (!opportunistic.empty()) {
    gslice::Ledger ledger;
    if (gslice::LedgerError e = ledger.Open(opt.ledger_path.c_str()); e != gslice::LedgerError::kOk) {
      std::fprintf(stderr, "gslice-suspend-agent: %s: %s\n", opt.ledger_path.c_str(), gslice::LedgerErrorString(e));
      return 1;
    }
    for (const std::string& name : opportunistic) {
      int index = -1;
      if (ledger.FindOrCreateSlice(name.c_str(), gslice::SliceClass::kOpportunistic, 0, &index) !=
          gslice::LedgerError::kOk) {
        std::fprintf(stderr, "gslice-suspend-agent: cannot create slice %s in the ledger\n", name.c_str());
        return 1;
      }
    }
  }
  std::string error;
  auto service = SuspendService::Create(opt, &error);
  if (!service) {
    std::fprintf(stderr, "gslice-suspend-agent: %s\n", error.c_str());
    return 1;
  }
  service->Start();
  std::printf("READY board=%s ledger=%s\n", opt.board_path.c_str(), opt.ledger_path.c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&signals, &sig);
  service->Stop();
  return 0;
}
