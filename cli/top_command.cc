// gslice top: the node live, per GPU, slice and process, refreshed until interrupted.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "daemon_commands.h"

namespace gslice::cli {

const char kTopSummary[] = "watch GPUs, slices and processes live (from gsliced)";

namespace {

constexpr const char kTopHelp[] = R"(usage: gslice top [--once] [--interval SECONDS] [--json] [--socket PATH]

Shows the node live: each GPU's memory and utilisation, each slice's memory used of its
limit, compute used of its share and state (running, idle, throttled, suspended, ...),
and each process in a slice with the memory it holds. Refreshes every second until you
press Ctrl-C.

  --once          print one screen and exit (for logs and scripts)
  --interval S    seconds between refreshes (default 1; fractions allowed, at least 0.1)
  --json          with --once: gsliced's answer (GET /v1/node) as JSON
  --socket PATH   gsliced's socket (default $GSLICE_SOCKET or /run/gsliced/gsliced.sock)

examples:
  gslice top
  gslice top --once
  watch -n5 gslice top --once
)";

std::atomic<bool> g_stop{false};

}  // namespace

int TopCommand(int argc, char** argv) {
  CommonFlags flags;
  std::vector<std::string> rest;
  if (!ParseCommonFlags("top", argc, argv, &flags, &rest)) return 2;
  if (flags.help) {
    std::fputs(kTopHelp, stdout);
    return 0;
  }
  bool once = false;
  double interval = 1.0;
  for (size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] == "--once") {
      once = true;
    } else if (rest[i] == "--interval" && i + 1 < rest.size()) {
      char* end = nullptr;
      interval = std::strtod(rest[++i].c_str(), &end);
      if (*end != '\0' || !(interval >= 0.1) || interval > 3600) {
        std::fprintf(stderr, "gslice top: --interval %s: give seconds from 0.1 to 3600\n", rest[i].c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "gslice top: unexpected argument '%s'; see gslice top --help\n", rest[i].c_str());
      return 2;
    }
  }
  if (flags.json && !once) {
    std::fprintf(stderr, "gslice top: --json prints one snapshot: add --once (or use `gslice ls --json`)\n");
    return 2;
  }
  const bool tty = isatty(STDOUT_FILENO) != 0;
  if (!once) {
    struct sigaction sa {};
    sa.sa_handler = [](int) { g_stop = true; };
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
  }
  for (;;) {
    DaemonReply reply;
    if (!CallDaemon("top", flags, "GET", "/v1/node", "", &reply)) return 1;
    if (flags.json) {
      std::fputs(reply.body.c_str(), stdout);
      return 0;
    }
    if (!once && tty) std::fputs("\x1b[H\x1b[2J", stdout);  // home, clear
    char host[256] = "node";
    gethostname(host, sizeof host - 1);
    time_t now = time(nullptr);
    char when[64];
    strftime(when, sizeof when, "%H:%M:%S", localtime(&now));
    std::printf("gslice top - %s - %s%s\n\n", host, when, once ? "" : "  (Ctrl-C to quit)");
    PrintNode(stdout, reply.body, true);
    std::fflush(stdout);
    if (once) return 0;
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(interval);
    while (!g_stop && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (g_stop) return 0;
  }
}

}  // namespace gslice::cli
