// gslice move PID --to GPU: asks the node's suspend service (inside gsliced, or
// gslice-suspend-agent) through the suspend board to move a process to another GPU of the
// same type. The request fields are root's (suspend_board.h): an operator's action. The service suspends the process if it runs, restores its memory on the
// target with the driver's GPU pairs and lets it continue; the program sees a pause.
#include "move_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "gpu_query.h"
#include "gslice/clock.h"
#include "gslice/ledger.h"
#include "gslice/options.h"
#include "gslice/pid_namespace.h"
#include "gslice/suspend_board.h"

namespace gslice::cli {

const char kMoveSummary[] = "move a process to another GPU of the same type (suspend service)";

namespace {

constexpr const char kMoveHelp[] = R"(usage: gslice move PID --to GPU [--timeout SECONDS]

Moves a running or suspended process to another GPU of the same type. The node's suspend
service (gsliced, or gslice-suspend-agent) suspends the process if it runs, restores its GPU
memory on GPU through the driver's checkpoint API and lets it continue there: the program
sees a pause, not an error. The move is refused, and the process stays where it was, when
GPU is of another type or lacks the room.

  --to GPU          target GPU: a UUID (GPU-...) or a device index as nvidia-smi numbers it
  --timeout SECONDS how long to wait for the service (default 600; moving 40 GiB takes minutes)

The process must run under gslice (gslice run, or the shim preloaded). Moving is an
operator's action: run it as root (the owner of the suspend board). Example:
  gslice move 4242 --to 1
)";

int Fail(const std::string& message) {
  std::fprintf(stderr, "gslice move: %s\n", message.c_str());
  return 1;
}

bool ParseUuid(const std::string& text, uint8_t out[16]) {
  std::string hex;
  std::string t = text.rfind("GPU-", 0) == 0 ? text.substr(4) : text;
  for (char c : t) {
    if (c == '-') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    hex.push_back(c);
  }
  if (hex.size() != 32) return false;
  for (size_t i = 0; i < 16; ++i) out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return true;
}

}  // namespace

int MoveCommand(int argc, char** argv) {
  std::string pid_text, to;
  long timeout_s = 600;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kMoveHelp, stdout);
      return 0;
    }
    if (a == "--to" || a == "--timeout") {
      if (i + 1 >= argc) return Fail(a + " needs a value (gslice move --help)"), 2;
      std::string v = argv[++i];
      if (a == "--to") {
        to = v;
      } else {
        char* end = nullptr;
        timeout_s = std::strtol(v.c_str(), &end, 10);
        if (*end != '\0' || timeout_s <= 0) return Fail("--timeout " + v + ": a number of seconds > 0"), 2;
      }
    } else if (!a.empty() && a[0] != '-' && pid_text.empty()) {
      pid_text = a;
    } else {
      return Fail("unexpected argument '" + a + "' (gslice move --help)"), 2;
    }
  }
  char* end = nullptr;
  const long pid = pid_text.empty() ? 0 : std::strtol(pid_text.c_str(), &end, 10);
  if (pid <= 0 || *end != '\0') return Fail("name the process by pid, e.g. gslice move 4242 --to 1"), 2;
  if (to.empty()) return Fail("say where: --to GPU (a UUID or an index)"), 2;

  uint8_t target[16];
  std::string target_text = to;
  if (!ParseUuid(to, target)) {
    // A device index: ask the driver which UUID it is.
    char* iend = nullptr;
    const long index = std::strtol(to.c_str(), &iend, 10);
    if (*iend != '\0' || index < 0) return Fail("--to " + to + ": expected a GPU UUID (GPU-...) or an index"), 2;
    const char* real = OptionValue(Option::RealDriver);
    std::vector<GpuInfo> gpus;
    std::string loaded, error;
    if (!QueryGpus(real != nullptr && *real ? real : "libcuda.so.1", &gpus, &loaded, &error)) return Fail(error);
    if (index >= static_cast<long>(gpus.size())) {
      return Fail("--to " + to + ": this node has " + std::to_string(gpus.size()) + " GPU(s), numbered from 0");
    }
    target_text = gpus[static_cast<size_t>(index)].uuid;
    if (!ParseUuid(target_text, target)) return Fail("the driver reported a malformed UUID " + target_text);
  }

  // The request goes into the board's gates, which only root (the board's owner) may write:
  // moving a process to another GPU is an operator's action.
  const char* path = OptionValue(Option::SuspendBoard);
  SuspendServiceBoard board;
  std::string error;
  if (!board.Open(path, false, &error)) {
    if (errno == EACCES || errno == EPERM) {
      return Fail("moving a process is an operator's action: run gslice move as root (" + error + ")");
    }
    return Fail(std::string("cannot open the suspend board ") + path + ": " + error);
  }
  struct stat board_st;
  if (stat(path, &board_st) == 0 && board_st.st_uid != geteuid()) {
    return Fail("moving a process is an operator's action: run gslice move as root (the owner of the suspend board)");
  }
  if (!board.ServiceAlive()) {
    return Fail("no suspend service runs on this node: start gsliced (or gslice-suspend-agent)");
  }
  // The board knows a process by its own pid in its own namespace (a container's process by
  // its container-local pid): name the pid we were given that way, and take the entry that
  // process's own shim wrote (one that maps the entry's partition writable).
  PidIdentity who;
  if (!IdentifyPid("/proc", static_cast<uint32_t>(pid), &who)) {
    return Fail("no process " + pid_text + " on this node");
  }
  std::optional<SuspendServiceBoard::Ref> found;
  for (const SuspendServiceBoard::Ref& r : board.LiveEntries()) {
    const SuspendShimEntry& e = board.Entry(r);
    const auto& part = board.partitions()[r.part];
    if (BoardOwnerPid(r.owner) == who.pid && e.pid_ns.load(std::memory_order_relaxed) == who.pid_ns &&
        e.start_time.load(std::memory_order_relaxed) == who.start_time &&
        ProcessMapsFileWritable("/proc", static_cast<int>(pid), part.dev, part.ino)) {
      found = r;
      break;
    }
  }
  if (!found) {
    return Fail("process " + pid_text + " is not under gslice (it has made no GPU call through the shim); "
                "start it with gslice run");
  }
  SuspendGateEntry* g = board.Gate(*found);
  if (g == nullptr) return Fail("the suspend service has not taken up process " + pid_text + " yet: try again in a second");
  uint64_t seq = g->move_seq.load(std::memory_order_acquire);
  if (seq != g->move_reply_seq.load(std::memory_order_acquire)) {
    return Fail("a move of process " + pid_text + " is already under way");
  }
  g->move_owner.store(found->owner, std::memory_order_release);
  std::memcpy(g->move_to_gpu, target, 16);
  if (!g->move_seq.compare_exchange_strong(seq, seq + 1, std::memory_order_acq_rel)) {
    return Fail("a move of process " + pid_text + " is already under way");
  }
  ++seq;
  FutexWakeAll(&board.header()->wake);
  std::printf("moving process %ld to %s ...\n", pid, target_text.c_str());
  std::fflush(stdout);
  const int64_t deadline = MonotonicNs() + static_cast<int64_t>(timeout_s) * 1'000'000'000;
  while (g->move_reply_seq.load(std::memory_order_acquire) != seq) {
    if (MonotonicNs() > deadline) return Fail("no answer from the suspend service within " + std::to_string(timeout_s) + " s");
    FutexWait(&g->move_reply, g->move_reply.load(std::memory_order_acquire), 200);
  }
  if (g->move_reply.load(std::memory_order_acquire) != kMoveReplyMoved) {
    return Fail("refused: the process stays where it was (the service's log says why: a GPU of another "
                "type, too little free memory, or a checkpoint that failed)");
  }
  std::printf("process %ld runs on %s\n", pid, target_text.c_str());
  return 0;
}

}  // namespace gslice::cli
