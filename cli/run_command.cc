// gslice run: runs a program inside a memory slice. It checks the request against the GPUs
// the driver reports, then sets the environment the shims read (CUDA_VISIBLE_DEVICES,
// LD_PRELOAD, GSLICE_*) and replaces itself with the program. No daemon is needed; on a node
// set up for gsliced (DaemonConfiguredBecause), the slice first passes its admission control
// and shows in its registry (gslice run then stays as the program's parent to remove the
// slice when it exits), and a gsliced that does not answer stops the run: admission is
// never skipped silently. --no-daemon runs without one where none answers.
#include <errno.h>
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "daemon_client.h"
#include "daemon_commands.h"
#include "gpu_query.h"
#include "gslice/atomic_file.h"
#include "gslice/ledger.h"
#include "gslice/mps_client.h"
#include "gslice/options.h"
#include "gslice/trace_format.h"
#include "gslice/units.h"

namespace gslice::cli {

const char kRunSummary[] = "run a program in a memory slice of one or more GPUs (no daemon needed)";

namespace {

constexpr uint64_t kMinLimit = 64ull << 20;

const char kRunHelp[] =
    "usage: gslice run [--gpus LIST] --memory SIZE[,SIZE...] [--cap N%] [--share N%]\n"
    "                  [--class guaranteed|opportunistic] [--protect F] [--name NAME] [--no-daemon]\n"
    "                  [--idle-timeout T] [--sim] [-v] [--remote unix:PATH|tcp://HOST:PORT|tls://HOST:PORT]\n"
    "                  [--trace FILE] -- CMD [ARGS...]\n"
    "       gslice run --name NAME [--sim] [-v] [--trace FILE] -- CMD [ARGS...]\n"
    "\n"
    "Runs CMD with a memory limit on each GPU it uses. CMD needs no changes: CUDA programs,\n"
    "PyTorch, JAX and nvidia-smi inside the slice see a GPU of SIZE, and allocating past it\n"
    "fails with the program's own out-of-memory error. Child processes share the limit.\n"
    "\n"
    "The second form runs CMD in slice NAME that gsliced already has (gslice create): its GPUs,\n"
    "memory, compute and class come from gsliced, and later changes (gslice set) reach CMD\n"
    "while it runs. The slice must be yours (root may use any).\n"
    "\n"
    "options:\n"
    "  --gpus LIST     GPUs to use, by index or UUID, comma-separated (default: every visible GPU).\n"
    "                  Indices count the GPUs this shell can see (CUDA_VISIBLE_DEVICES applies).\n"
    "  --memory SIZES  memory limit per GPU: one size for all (\"20GiB\") or one per GPU of --gpus\n"
    "                  (\"40GiB,20GiB\"). Units B, KiB, MiB, GiB, TiB (binary); at least 64 MiB,\n"
    "                  at most the GPU's memory.\n"
    "  --cap N%        hard compute cap: at most N% of each GPU's time, over any 1 s window, even\n"
    "                  when the slice is alone on the GPU (measured GPU time; docs/compute.md).\n"
    "                  (--compute, its old name, still works in this release, with a warning.)\n"
    "  --share N%      guaranteed share under contention with slices of the same class; unused\n"
    "                  time goes to the others (work-conserving). Default: equal shares.\n"
    "  --class C       guaranteed (default; never waits for opportunistic work) or opportunistic\n"
    "                  (runs only in the GPU time guaranteed work leaves idle).\n"
    "  --protect F     guaranteed only: the fraction of its solo speed that opportunistic work\n"
    "                  on the same GPU must leave it, 0.5..1 (0.9 or 90%; default 0.97). Lower\n"
    "                  lets opportunistic work harvest more of the GPU (docs/compute.md).\n"
    "  --name NAME     slice name; processes started with the same name share one limit\n"
    "                  (default: run-<pid>, one slice per gslice run).\n"
    "  --no-daemon     run without gsliced's admission where gsliced is set up but stopped (a\n"
    "                  gsliced started later adopts the slice, as opportunistic if it does not\n"
    "                  fit). Refused while gsliced answers. Without it, a node set up for gsliced\n"
    "                  (GSLICE_SOCKET or GSLICE_DAEMON set, /run/gsliced/gsliced.sock or\n"
    "                  /etc/gslice/gsliced.toml there) registers the slice with gsliced, and a\n"
    "                  gsliced that does not answer stops the run.\n"
    "  --idle-timeout T  suspend the slice to host memory after T without GPU work (30m, 2h, 600s);\n"
    "                  its next CUDA call resumes it. Needs gsliced (its suspend service).\n"
    "  --remote-client TEXT  who the slice serves, shown by gslice ls (gslice-remoted sets it for\n"
    "                  the slices of its workers).\n"
    "  --project P     register the slice in gsliced's project P (default: gsliced's default\n"
    "                  project; gslice-remoted sets a tls:// tenant's).\n"
    "  --sim           run on gslice's simulated driver (build/lib/sim) instead of a real GPU.\n"
    "  --remote ADDR   run CMD here with no GPU or driver: its CUDA calls go to gslice-remoted at\n"
    "                  ADDR, which runs them in a slice of --memory/--cap/--class on its node\n"
    "                  (docs/remote.md). tls://: the token from GSLICE_REMOTE_TOKEN_FILE, the CA\n"
    "                  from GSLICE_REMOTE_CA.\n"
    "  --trace FILE    record a timeline of CMD and every process it starts (driver calls, GPU\n"
    "                  kernels and copies, NVTX ranges, compute gate waits, suspensions) and write\n"
    "                  it to FILE when CMD exits: Chrome trace JSON for ui.perfetto.dev or\n"
    "                  chrome://tracing (docs/trace.md). With --remote: the client's forwarded\n"
    "                  calls and its worker's timeline on the client's clock, linked call by call.\n"
    "  -v, --verbose   print the slice before running CMD.\n"
    "  -h, --help      this text.\n"
    "\n"
    "examples:\n"
    "  gslice run --memory 20GiB -- python train.py\n"
    "  gslice run --gpus 0,1 --memory 40GiB,20GiB -- python train.py\n"
    "  gslice run --sim --memory 2GiB -- gslice-example\n"
    "  gslice run --memory 10GiB -- nvidia-smi       # shows a 10 GiB GPU\n"
    "  gslice run --memory 20GiB --cap 30% --class opportunistic -- python train.py\n"
    "  gslice run --memory 20GiB --trace train.json -- python train.py\n"
    "  gslice run --memory 40GiB --protect 0.9 -- python serve.py\n"
    "  gslice create train --gpus 0 --memory 20GiB && gslice run --name train -- python train.py\n";

int Fail(const std::string& msg) {
  fprintf(stderr, "gslice run: %s\n", msg.c_str());
  return 2;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string Human(uint64_t bytes) {
  char buf[32];
  FormatSize(bytes, buf, sizeof buf);
  return buf;
}

// The installation prefix: the folder above the one holding this executable (build/).
std::string Prefix() {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return ".";
  exe[n] = '\0';
  std::string dir(exe);
  dir = dir.substr(0, dir.rfind('/'));  // .../bin
  return dir.substr(0, dir.rfind('/'));
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

bool IsNumber(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

std::string GpuLine(const GpuInfo& g) {
  return std::to_string(g.ordinal) + ": " + g.name + ", " + Human(g.total) + ", " + g.uuid;
}

enum class DaemonLink {
  kNone,        // no gsliced: the shims enforce the slice alone
  kJoined,      // gsliced already has a slice of this name (gslice create): join it
  kRegistered,  // gsliced admitted the slice for this run
};

// What to do when a gsliced this node is set up for does not answer.
std::string NotAnswering(const std::string& configured, const DaemonReply& reply) {
  std::string why;
  switch (reply.no_answer) {
    case NoAnswer::kNoSocket:
      why = "no socket there: gsliced is not running";
      break;
    case NoAnswer::kNotListening:
      why = "nothing listens on its socket: gsliced is stopped or crashed";
      break;
    case NoAnswer::kDenied:
      why = "its socket does not let you in (ask for the group that owns it)";
      break;
    case NoAnswer::kTimeout:
      why = "it does not answer in time: it hangs or its socket is held busy";
      break;
    case NoAnswer::kNone:
    case NoAnswer::kBroken:
      why = "it gave no valid answer";
      break;
  }
  return "gsliced is set up on this node (" + configured + ") but does not answer: " + why + " (" +
         reply.message + ").\n  The slice needs its admission, so nothing was run. Start gsliced (`systemctl start " +
         "gsliced`), point GSLICE_SOCKET at the socket it serves, or run without admission with `gslice run " +
         "--no-daemon ...` (a gsliced started later adopts the slice, as opportunistic if it does not fit).";
}

// Registers the slice with gsliced where this node is set up for one (DaemonConfiguredBecause).
// Returns false, with the reason in *error, when gsliced refuses it (admission, quota) or
// does not answer, or when --no-daemon is asked for while gsliced answers.
bool LinkWithDaemon(const std::string& name, const std::vector<GpuInfo>& gpus, const std::vector<uint64_t>& limits,
                    double compute, bool opportunistic, uint32_t protect_permille, int64_t idle_timeout_s,
                    const std::string& remote_client, const std::string& project, bool no_daemon, DaemonLink* link,
                    std::string* error) {
  *link = DaemonLink::kNone;
  DaemonAddress address = DaemonAddressFromEnvironment();
  const std::string configured = DaemonConfiguredBecause(address);
  if (configured.empty()) return true;  // no daemon here: the shims enforce the slice alone
  DaemonClient client(address);
  if (no_daemon) {
    // Where gsliced answers, running past it would only skip its admission for a moment.
    if (client.Call("GET", "/healthz", "", 1000).connected) {
      *error = "--no-daemon: gsliced answers at " + address.Describe() +
               "; slices here go through its admission: drop --no-daemon";
      return false;
    }
    return true;
  }
  DaemonReply existing = client.Call("GET", "/v1/slices/" + name, "", 5000);
  if (!existing.connected) {
    *error = NotAnswering(configured, existing);
    return false;
  }
  if (existing.ok()) {
    *link = DaemonLink::kJoined;
    return true;
  }
  SliceRegistration slice;
  slice.name = name;
  slice.opportunistic = opportunistic;
  slice.protect_permille = protect_permille;
  slice.idle_timeout_s = idle_timeout_s;
  slice.remote_client = remote_client;
  slice.project = project;
  for (size_t k = 0; k < gpus.size(); ++k) {
    slice.gpus.push_back({gpus[k].uuid, limits.size() == 1 ? limits[0] : limits[k], compute});
  }
  std::string message;
  DaemonReply reply;
  switch (RegisterSlice(slice, &message, &reply)) {
    case RegisterResult::kNoAnswer:
      *error = NotAnswering(configured, reply);
      return false;
    case RegisterResult::kRefused:
      *error = "gsliced refused slice " + name + ": " + message;
      return false;
    case RegisterResult::kRegistered:
      *link = DaemonLink::kRegistered;
      return true;
  }
  return true;
}

// "30%" for 0.3; "" for 0 (none).
std::string PercentArg(double fraction) {
  if (!(fraction > 0)) return "";
  char buf[32];
  snprintf(buf, sizeof buf, "%g%%", fraction * 100);
  return buf;
}

// The user name of uid, or "uid N".
std::string NameOfUid(uid_t uid) {
  if (passwd* pw = getpwuid(uid); pw != nullptr) return pw->pw_name;
  return "uid " + std::to_string(uid);
}

// For `gslice run --name NAME -- CMD` without --memory: slice NAME as gsliced has it, as the
// flags that would ask for it (GPUs by UUID, limits in bytes, compute, class). False, with
// what to do in *error, when no gsliced answers, it has no such slice, or the slice is
// another user's (its usage is writable only by its owner, so the shim could not charge it).
bool SliceFromDaemon(const std::string& name, std::string* gpus, std::string* memory, std::string* compute,
                     std::string* share, std::string* cls, std::string* error) {
  DaemonAddress address = DaemonAddressFromEnvironment();
  if (DaemonConfiguredBecause(address).empty()) {
    *error = "--name " + name + " without --memory takes the slice from gsliced, and no gsliced is set up here " +
             "(GSLICE_SOCKET or GSLICE_DAEMON unset, no " + address.socket + "): start gsliced, or give --memory";
    return false;
  }
  DaemonReply reply = DaemonClient(address).Call("GET", "/v1/slices/" + name, "", 5000);
  if (!reply.connected) {
    *error = "--name " + name + ": gsliced at " + address.Describe() + " does not answer (" + reply.message +
             "); start it, or give --memory to run without its slice";
    return false;
  }
  if (reply.status == 404) {
    *error = "--name " + name + ": gsliced has no slice named '" + name +
             "' (`gslice ls` lists them): create it first (gslice create " + name +
             " --gpus 0 --memory 8GiB), or give --memory to run a new one";
    return false;
  }
  if (!reply.ok()) {
    *error = "--name " + name + ": gsliced: " + reply.message;
    return false;
  }
  auto slice = nlohmann::json::parse(reply.body, nullptr, false);
  if (!slice.is_object() || !slice["gpus"].is_array() || slice["gpus"].empty()) {
    *error = "--name " + name + ": gsliced's answer has no GPUs for the slice";
    return false;
  }
  const uid_t me = getuid();
  const std::string owner = slice.value("user", std::string());
  const bool mine = slice["owner_uid"].is_number_integer() ? slice["owner_uid"].get<int64_t>() == static_cast<int64_t>(me)
                                                            : owner == NameOfUid(me);
  if (me != 0 && !mine) {
    std::string whose = owner;
    if (slice["owner_uid"].is_number_integer()) whose += " (uid " + std::to_string(slice["owner_uid"].get<int64_t>()) + ")";
    *error = "--name " + name + ": slice '" + name + "' belongs to " + whose + ", not to you (" + NameOfUid(me) +
             ", uid " + std::to_string(me) + "): run in a slice of your own (gslice create NAME ...)";
    return false;
  }
  gpus->clear();
  memory->clear();
  double share_fraction = 0, cap_fraction = 0;
  for (const auto& g : slice["gpus"]) {
    *gpus += (gpus->empty() ? "" : ",") + g.value("uuid", std::string());
    *memory += (memory->empty() ? "" : ",") + std::to_string(g.value("memory_limit_bytes", uint64_t{0}));
    share_fraction = std::max(share_fraction, g.value("compute_share", 0.0));
    cap_fraction = std::max(cap_fraction, g.value("compute_cap", 0.0));
  }
  // The environment holds one compute policy for every GPU of the process.
  *share = PercentArg(share_fraction);
  *compute = PercentArg(cap_fraction);
  *cls = slice.value("class", std::string("guaranteed"));
  return true;
}

// Puts the program on its GPU's MPS where gsliced says the slice shares it through MPS
// (docs/compute.md, "The substrate"): its pipe and log folders, the class's client priority
// and the cap as a thread percentage. Only for a program of the uid and class the GPU's MPS
// serves: one of another uid would wait at CUDA initialisation for that uid's programs to end,
// and one of the other class would share its faults (docs/compute.md, "Faults"). Without MPS
// nothing is set and the slice runs time-sliced. -v says which, and why.
void JoinMps(const std::string& name, bool opportunistic, const std::string& cap, bool verbose) {
  DaemonReply reply = DaemonClient(DaemonAddressFromEnvironment()).Call("GET", "/v1/slices/" + name, "", 5000);
  auto slice = reply.ok() ? nlohmann::json::parse(reply.body, nullptr, false) : nlohmann::json();
  if (!slice.is_object() || !slice["gpus"].is_array() || slice["gpus"].empty()) return;
  const auto& gpu = slice["gpus"][0];
  const auto& mps = gpu["mps"];
  std::string why = gpu.value("sharing_why", std::string());
  const int64_t me = static_cast<int64_t>(getuid());
  const std::string cls = slice.value("class", std::string(opportunistic ? "opportunistic" : "guaranteed"));
  const std::string serves = mps.is_object() ? mps.value("class", std::string("any")) : "";
  if (slice["gpus"].size() == 1 && mps.is_object() && mps["uid"].is_number_integer() && mps["uid"].get<int64_t>() == me &&
      (serves == "any" || serves == cls)) {
    MpsClientSetting setting{.pipe_directory = mps.value("pipe_directory", std::string()),
                             .log_directory = mps.value("log_directory", std::string()),
                             .opportunistic = opportunistic,
                             .compute_cap = cap.empty() ? 0 : ParsePercent(cap).fraction};
    for (const auto& [key, value] : MpsClientEnvironment(setting)) setenv(key.c_str(), value.c_str(), 1);
    if (verbose) fprintf(stderr, "  sharing: MPS (%s)\n", why.c_str());
    return;
  }
  if (mps.is_object() && mps.value("uid", int64_t{-1}) != me) {
    why = "its GPU's MPS serves uid " + std::to_string(mps.value("uid", int64_t{-1})) + " and this program runs as uid " +
          std::to_string(me);
  } else if (mps.is_object()) {
    why = "its GPU's MPS serves the " + serves + " slices of uid " + std::to_string(me) + " and this one is " + cls;
  }
  if (verbose) fprintf(stderr, "  sharing: time-sliced (%s)\n", why.c_str());
}

pid_t g_child = 0;
// A slice with no daemon is written by gslice run itself, as its writer: in the node ledger
// when this user owns it (root), else in the user's own ledger (<ledger>-u<uid>), which its
// processes then use. Returns that ledger's path; "" with *why when neither can hold it (the
// shims then keep the limits per process). protect_permille (0: not asked for) is the slice's
// protection level, also on a slice of that name that exists and that this user writes.
std::string PublishDaemonlessSlice(const std::string& name, const std::vector<GpuInfo>& chosen,
                                   const std::vector<uint64_t>& limits, bool opportunistic, uint32_t protect_permille,
                                   std::string* why) {
  Ledger ledger;
  int slice = -1;
  char note[640] = {};
  const SliceClass cls = opportunistic ? SliceClass::kOpportunistic : SliceClass::kGuaranteed;
  LedgerError e = OpenSliceLedger(&ledger, OptionValue(Option::Ledger), "", name.c_str(), cls, kSliceEphemeral,
                                  /*create_slice=*/true, &slice, note, sizeof note, protect_permille);
  if (e != LedgerError::kOk) {
    *why = note;
    return "";
  }
  const LedgerSlice& entry = ledger.limits()->slices[slice];
  if (protect_permille != 0 && ledger.writable() && entry.protect_permille != protect_permille) {
    e = ledger.UpdateSlice(slice, static_cast<SliceClass>(entry.slice_class), entry.flags, entry.owner_uid,
                           protect_permille);
    if (e != LedgerError::kOk) {
      fprintf(stderr, "gslice run: slice %s: cannot set its protection level: %s: %s\n", name.c_str(),
              LedgerErrorString(e), ledger.detail());
    }
  }
  for (size_t k = 0; k < chosen.size(); ++k) {
    uint8_t uuid[16];
    if (!ParseGpuUuid(chosen[k].uuid.c_str(), uuid)) continue;  // the shim keys it by what the driver says
    const int64_t limit = static_cast<int64_t>(limits.size() == 1 ? limits[0] : limits[k]);
    int gpu = -1;
    if (ledger.FindOrAddGpu(slice, uuid, limit, &gpu) == LedgerError::kOk && ledger.writable() &&
        ledger.Limit(slice, gpu) != limit) {
      ledger.SetLimit(slice, gpu, limit);
    }
  }
  return ledger.path();
}

void ForwardSignal(int sig) {
  if (g_child > 0) kill(g_child, sig);
}

// A timeline of the run (--trace FILE): the shims write one part per process into a private
// folder (GSLICE_TRACE), merged into FILE when the program exits.
struct TraceRun {
  std::string file;    // where the merged trace goes ("" for none)
  std::string folder;  // the parts' folder
};

// Makes the parts' folder (mode 0700, under $TMPDIR or /tmp) once FILE's folder is known to
// take the file. Returns "" or what is wrong.
std::string PrepareTrace(TraceRun* t) {
  const size_t slash = t->file.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : t->file.substr(0, slash);
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return "--trace " + t->file + ": cannot write in " + dir + ": " + strerror(errno);
  }
  struct stat st;
  if (stat(t->file.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return "--trace " + t->file + ": a folder; name a file";
  // What FinishTrace's AtomicFile would refuse (a folder anyone may write that is not sticky)
  // is said now, not after the program ran. The probe leaves nothing behind.
  {
    AtomicFile probe;
    std::string error;
    if (!probe.Open(t->file, 0666, &error)) return "--trace: " + error;
  }
  const char* tmp = getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && tmp[0] == '/' ? tmp : "/tmp") + "/gslice-trace-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    return "--trace: cannot make a folder for the parts (" + pattern + "): " + strerror(errno);
  }
  t->folder = buf.data();
  return "";
}

// Merges the parts into the file (written whole, never through a link planted in its folder:
// AtomicFile) and removes the parts' folder. Says what it wrote on stderr.
void FinishTrace(const TraceRun& t, const std::string& slice) {
  std::string error;
  AtomicFile file;
  TraceMergeResult r;
  bool ok = file.Open(t.file, 0666, &error);
  if (ok) {
    ok = MergeTracePartsInFolder(
        t.folder, slice, /*owner=*/-1, TraceMergeLimits{},
        [&](std::string_view piece) {
          if (file.Write(piece)) return true;
          error = "cannot write " + t.file + ": " + strerror(errno);
          return false;
        },
        &r, &error);
  }
  if (!ok || !file.Commit(&error)) {
    fprintf(stderr, "gslice run: --trace: %s (the parts stay in %s)\n", error.c_str(), t.folder.c_str());
    return;
  }
  if (DIR* d = opendir(t.folder.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.' || strlen(e->d_name) > 2) unlink((t.folder + "/" + e->d_name).c_str());
    }
    closedir(d);
  }
  rmdir(t.folder.c_str());
  fprintf(stderr, "gslice run: trace written to %s (%lld events from %d processes%s)\n", t.file.c_str(),
          static_cast<long long>(r.events), r.parts,
          r.dropped > 0 ? (", " + std::to_string(r.dropped) + " dropped: the ring was full").c_str() : "");
  if (r.parts == 0) {
    fprintf(stderr, "gslice run: no process of the program used the GPU through the shim; the trace is empty\n");
  }
  if (r.read_cut || r.parts_left_out > 0 || r.long_lines > 0) {
    fprintf(stderr,
            "gslice run: --trace: left out %d part(s) past the first %d or not regular files, %lld line(s) over %lld "
            "bytes%s\n",
            r.parts_left_out, kTraceMaxParts, static_cast<long long>(r.long_lines),
            static_cast<long long>(kTraceMaxLineBytes),
            r.read_cut ? (" and all past the first " + std::to_string(kTraceMaxPartsBytes >> 20) + " MiB of parts").c_str()
                       : "");
  }
}

// Runs the program as a child, forwarding termination signals; then removes the slice from
// gsliced (unregister) and writes the trace (trace.file set). Returns the program's exit
// status (128 + signal when killed).
int RunChild(char** command, const std::string& name, bool unregister, const TraceRun& trace) {
  pid_t child = fork();
  if (child < 0) return Fail(std::string("fork: ") + strerror(errno));
  if (child == 0) {
    execvp(command[0], command);
    fprintf(stderr, "gslice run: cannot run '%s': %s\n", command[0], strerror(errno));
    _exit(127);
  }
  g_child = child;
  struct sigaction forward = {};
  forward.sa_handler = ForwardSignal;
  sigemptyset(&forward.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaction(sig, &forward, nullptr);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (unregister && !UnregisterSlice(name)) {
    fprintf(stderr, "gslice run: could not remove slice %s from gsliced; it expires by itself once its processes are gone\n",
            name.c_str());
  }
  if (!trace.file.empty()) FinishTrace(trace, name);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

int RunCommand(int argc, char** argv) {
  std::string gpus_arg, memory_arg, name, compute_arg, share_arg, class_arg, protect_arg, remote_arg, idle_arg,
      remote_client, project;
  TraceRun trace;
  bool sim = false, verbose = false, have_gpus = false, no_daemon = false;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* opt, std::string* out) -> bool {
      size_t len = strlen(opt);
      if (a.size() > len && a.compare(0, len, opt) == 0 && a[len] == '=') {
        *out = a.substr(len + 1);
        return true;
      }
      if (a == opt) {
        if (i + 1 >= argc) return false;
        *out = argv[++i];
        return true;
      }
      return false;
    };
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      fputs(kRunHelp, stdout);
      return 0;
    }
    if (a == "--sim") {
      sim = true;
    } else if (a == "--no-daemon") {
      no_daemon = true;
    } else if (a == "-v" || a == "--verbose") {
      verbose = true;
    } else if (a.rfind("--gpus", 0) == 0) {
      if (!value("--gpus", &gpus_arg)) return Fail("--gpus needs a value, e.g. --gpus 0,1");
      have_gpus = true;
    } else if (a.rfind("--memory", 0) == 0) {
      if (!value("--memory", &memory_arg)) return Fail("--memory needs a value, e.g. --memory 20GiB");
    } else if (a == "--cap" || a.rfind("--cap=", 0) == 0) {
      if (!value("--cap", &compute_arg)) return Fail("--cap needs a value, e.g. --cap 30%");
    } else if (a == "--compute" || a.rfind("--compute=", 0) == 0) {
      // The old spelling of --cap, accepted for one release (docs/compute.md).
      if (!value("--compute", &compute_arg)) return Fail("--cap needs a value, e.g. --cap 30%");
      fprintf(stderr, "gslice run: --compute is now --cap (the hard compute cap); --compute goes in the next release\n");
    } else if (a.rfind("--share", 0) == 0) {
      if (!value("--share", &share_arg)) return Fail("--share needs a value, e.g. --share 30%");
    } else if (a.rfind("--class", 0) == 0) {
      if (!value("--class", &class_arg)) return Fail("--class needs a value: guaranteed or opportunistic");
    } else if (a.rfind("--protect", 0) == 0) {
      if (!value("--protect", &protect_arg)) return Fail("--protect needs a value, e.g. --protect 0.9");
    } else if (a.rfind("--idle-timeout", 0) == 0) {
      if (!value("--idle-timeout", &idle_arg)) return Fail("--idle-timeout needs a value, e.g. --idle-timeout 30m");
    } else if (a.rfind("--project", 0) == 0) {
      if (!value("--project", &project)) return Fail("--project needs a value: a project of gsliced");
    } else if (a.rfind("--remote-client", 0) == 0) {
      if (!value("--remote-client", &remote_client)) return Fail("--remote-client needs a value");
    } else if (a.rfind("--remote", 0) == 0) {
      if (!value("--remote", &remote_arg)) return Fail("--remote needs an address: unix:PATH, tcp://HOST:PORT or tls://HOST:PORT");
    } else if (a.rfind("--trace", 0) == 0) {
      if (!value("--trace", &trace.file) || trace.file.empty()) {
        return Fail("--trace needs a file, e.g. --trace train.json");
      }
    } else if (a.rfind("--name", 0) == 0) {
      if (!value("--name", &name)) return Fail("--name needs a value");
    } else if (!a.empty() && a[0] == '-') {
      return Fail("unknown option '" + a + "' (see gslice run --help)");
    } else {
      break;  // the command starts here
    }
  }
  if (i >= argc) return Fail("no command to run: gslice run --memory SIZE -- CMD [ARGS...] (see --help)");
  if (memory_arg.empty() && !name.empty()) {
    if (have_gpus || !compute_arg.empty() || !share_arg.empty() || !class_arg.empty()) {
      return Fail("--name " + name + " without --memory takes the slice's GPUs, compute and class from gsliced: " +
                  "drop --gpus, --cap, --share and --class (change the slice with gslice set)");
    }
    std::string error;
    if (!SliceFromDaemon(name, &gpus_arg, &memory_arg, &compute_arg, &share_arg, &class_arg, &error)) {
      return Fail(error);
    }
    have_gpus = true;
  }
  if (memory_arg.empty()) return Fail("--memory is required, e.g. --memory 20GiB (see --help)");
  // Compute policy (read by the shim's launch gate, interpose/compute).
  for (const auto& [flag, arg] : {std::pair<const char*, const std::string&>{"--cap", compute_arg},
                                  std::pair<const char*, const std::string&>{"--share", share_arg}}) {
    if (arg.empty()) continue;
    ParsedPercent pct = ParsePercent(arg);
    if (!pct.ok) return Fail(std::string(flag) + " " + arg + ": " + pct.error + " (e.g. " + flag + " 30%)");
    if (pct.fraction < 0.01) return Fail(std::string(flag) + " " + arg + ": must be at least 1%");
  }
  if (!class_arg.empty() && class_arg != "guaranteed" && class_arg != "opportunistic") {
    return Fail("--class " + class_arg + ": must be guaranteed or opportunistic");
  }
  uint32_t protect_permille = 0;
  if (!protect_arg.empty()) {
    if (class_arg == "opportunistic") {
      return Fail("--protect: only guaranteed slices have a protection level (the share of their solo speed kept "
                  "against opportunistic work); drop --protect or use --class guaranteed");
    }
    ParsedProtect level = ParseProtect(protect_arg);
    if (!level.ok) return Fail("--protect " + protect_arg + ": " + level.error);
    protect_permille = level.permille;
  }
  if (name.size() >= 64) return Fail("--name " + name + ": at most 63 characters");
  int64_t idle_timeout_s = 0;
  if (!idle_arg.empty() && (!ParseIdleTimeout(idle_arg, &idle_timeout_s) || idle_timeout_s <= 0)) {
    return Fail("--idle-timeout " + idle_arg + ": write e.g. 30m, 2h or 600s");
  }
  if (remote_client.size() > 200) return Fail("--remote-client: at most 200 characters");
  if (project.size() >= 64) return Fail("--project " + project + ": at most 63 characters");

  if (!remote_arg.empty()) {
    // The server's `gslice run` checks the sizes against its GPUs.
    const RemoteRun remote{.prefix = Prefix(), .address = remote_arg, .memory = memory_arg,
                           .compute = compute_arg, .share = share_arg, .slice_class = class_arg,
                           .idle_timeout = idle_arg, .sim = sim, .gpus = have_gpus, .verbose = verbose};
    if (trace.file.empty()) return RunRemote(remote, argv + i);
    // A timeline of both sides: the forwarding client writes its part and its worker's
    // (remote/client/client_trace.h) into the parts' folder, merged when CMD exits.
    if (const int refused = PrepareRemote(remote); refused != 0) return refused;
    if (std::string why = PrepareTrace(&trace); !why.empty()) return Fail(why);
    setenv(GetOptionInfo(Option::Trace).env, trace.folder.c_str(), 1);
    // The program's NVTX ranges reach the client's recorder through NVTX's injection, even
    // when its first NVTX call comes before its first CUDA call (unless another tool has it).
    setenv("NVTX_INJECTION64_PATH", (remote.prefix + "/lib/remote/libcuda.so.1").c_str(), /*overwrite=*/0);
    if (verbose) fprintf(stderr, "  recording a timeline of the client and its worker into %s\n", trace.file.c_str());
    return RunChild(argv + i, "", false, trace);
  }

  std::vector<uint64_t> limits;
  for (const std::string& item : Split(memory_arg)) {
    ParsedSize p = ParseSize(item);
    if (!p.ok) return Fail("--memory " + item + ": " + p.error);
    if (p.bytes < kMinLimit) return Fail("--memory " + item + ": must be at least 64 MiB");
    limits.push_back(p.bytes);
  }

  const std::string prefix = Prefix();
  const std::string shim_cuda = prefix + "/lib/gslice/libcuda.so.1";
  const std::string shim_nvml = prefix + "/lib/gslice/libnvidia-ml.so.1";
  if (!Exists(shim_cuda) || !Exists(shim_nvml)) {
    return Fail("the gslice shims are missing (" + shim_cuda + "); build them (scripts/build)");
  }
  std::string driver = "libcuda.so.1", nvml;
  if (sim) {
    driver = prefix + "/lib/sim/libcuda.so.1";
    nvml = prefix + "/lib/sim/libnvidia-ml.so.1";
    if (!Exists(driver)) return Fail("--sim: the simulated driver is not built (" + driver + ")");
  } else if (const char* real = getenv(GetOptionInfo(Option::RealDriver).env); real != nullptr && real[0] != '\0') {
    driver = real;
  }

  std::vector<GpuInfo> all;
  std::string loaded, error;
  if (!QueryGpus(driver, &all, &loaded, &error)) {
    if (!sim) error += "\n  no NVIDIA driver here? 'gslice run --sim ...' runs on the simulated driver";
    return Fail(error);
  }
  if (all.empty()) {
    const char* cvd = getenv("CUDA_VISIBLE_DEVICES");
    return Fail(std::string("no GPU visible") + (cvd != nullptr ? std::string(" (CUDA_VISIBLE_DEVICES=") + cvd + ")" : ""));
  }
  auto list_gpus = [&] {
    std::string s;
    for (const GpuInfo& g : all) s += "\n  " + GpuLine(g);
    return s;
  };

  std::vector<GpuInfo> chosen;
  if (have_gpus) {
    for (const std::string& item : Split(gpus_arg)) {
      const GpuInfo* match = nullptr;
      if (IsNumber(item)) {
        unsigned long idx = strtoul(item.c_str(), nullptr, 10);
        if (idx < all.size()) match = &all[idx];
      } else if (item.size() >= 8) {
        for (const GpuInfo& g : all)
          if (g.uuid.compare(0, item.size(), item) == 0) match = &g;
      }
      if (match == nullptr) {
        return Fail("--gpus " + item + ": no such GPU; this machine shows " + std::to_string(all.size()) + ":" +
                    list_gpus());
      }
      for (const GpuInfo& g : chosen)
        if (g.ordinal == match->ordinal) return Fail("--gpus " + gpus_arg + ": GPU " + item + " is listed twice");
      chosen.push_back(*match);
    }
  } else {
    chosen = all;
  }
  if (limits.size() != 1 && limits.size() != chosen.size()) {
    return Fail("--memory " + memory_arg + ": " + std::to_string(limits.size()) + " sizes for " +
                std::to_string(chosen.size()) + " GPUs (give one size for all, or one per GPU)");
  }
  for (size_t k = 0; k < chosen.size(); ++k) {
    uint64_t limit = limits.size() == 1 ? limits[0] : limits[k];
    if (limit > chosen[k].total) {
      return Fail("--memory " + Human(limit) + ": GPU " + std::to_string(chosen[k].ordinal) + " (" + chosen[k].name +
                  ") has only " + Human(chosen[k].total));
    }
  }

  // The environment the shims read.
  std::string visible, memory;
  std::vector<std::string> parent_visible;
  if (const char* cvd = getenv("CUDA_VISIBLE_DEVICES"); cvd != nullptr && cvd[0] != '\0') parent_visible = Split(cvd);
  for (size_t k = 0; k < chosen.size(); ++k) {
    if (k > 0) {
      visible += ",";
      memory += ",";
    }
    size_t ord = static_cast<size_t>(chosen[k].ordinal);
    visible += ord < parent_visible.size() ? parent_visible[ord] : std::to_string(ord);
    memory += std::to_string(limits.size() == 1 ? limits[0] : limits[k]);
  }
  if (name.empty()) name = "run-" + std::to_string(getpid());
  std::string preload = shim_cuda + " " + shim_nvml;
  if (const char* old = getenv("LD_PRELOAD"); old != nullptr && old[0] != '\0') {
    preload = std::string(old) + " " + preload;  // keep what was preloaded before (sanitizer runtimes first)
  }
  setenv("CUDA_VISIBLE_DEVICES", visible.c_str(), 1);
  setenv(GetOptionInfo(Option::Memory).env, memory.c_str(), 1);
  setenv(GetOptionInfo(Option::Slice).env, name.c_str(), 1);
  // Always set (empty = none), so a policy inherited from the calling shell never leaks in.
  setenv(GetOptionInfo(Option::Compute).env, compute_arg.c_str(), 1);
  setenv(GetOptionInfo(Option::Share).env, share_arg.c_str(), 1);
  setenv(GetOptionInfo(Option::Class).env, class_arg.empty() ? "guaranteed" : class_arg.c_str(), 1);
  setenv(GetOptionInfo(Option::Protect).env, protect_arg.c_str(), 1);
  setenv("LD_PRELOAD", preload.c_str(), 1);
  if (!loaded.empty() && loaded.find("/lib/gslice/") == std::string::npos) {
    setenv(GetOptionInfo(Option::RealDriver).env, loaded.c_str(), 1);
  }
  if (!nvml.empty()) setenv(GetOptionInfo(Option::RealNvml).env, nvml.c_str(), 1);

  if (verbose) {
    fprintf(stderr, "gslice run: slice %s%s\n", name.c_str(), sim ? " on the simulated driver" : "");
    for (size_t k = 0; k < chosen.size(); ++k) {
      fprintf(stderr, "  GPU %s: %s of %s\n", GpuLine(chosen[k]).c_str(),
              Human(limits.size() == 1 ? limits[0] : limits[k]).c_str(), Human(chosen[k].total).c_str());
    }
    fprintf(stderr, "  compute: class %s, cap %s, share %s", class_arg.empty() ? "guaranteed" : class_arg.c_str(),
            compute_arg.empty() ? "none" : compute_arg.c_str(), share_arg.empty() ? "equal" : share_arg.c_str());
    if (class_arg != "opportunistic") {
      fprintf(stderr, ", protect %g", EffectiveProtectPermille(protect_permille) / 1000.0);
    }
    fprintf(stderr, "\n");
  }
  double compute = 0;
  if (!share_arg.empty()) compute = ParsePercent(share_arg).fraction;
  else if (!compute_arg.empty()) compute = ParsePercent(compute_arg).fraction;
  DaemonLink link = DaemonLink::kNone;
  std::string refusal;
  if (!LinkWithDaemon(name, chosen, limits, compute, class_arg == "opportunistic", protect_permille, idle_timeout_s,
                      remote_client, project, no_daemon, &link, &refusal)) {
    return Fail(refusal);
  }
  if (link == DaemonLink::kNone && idle_timeout_s > 0) {
    fprintf(stderr, "gslice run: --idle-timeout %s: no gsliced here, so nothing suspends the slice when idle\n",
            idle_arg.c_str());
  }
  if (link == DaemonLink::kNone) {
    std::string why;
    const std::string ledger =
        PublishDaemonlessSlice(name, chosen, limits, class_arg == "opportunistic", protect_permille, &why);
    if (!ledger.empty()) {
      setenv(GetOptionInfo(Option::Ledger).env, ledger.c_str(), 1);
      if (verbose) fprintf(stderr, "  ledger %s (no gsliced)\n", ledger.c_str());
    } else {
      fprintf(stderr, "gslice run: %s; the limits hold per process\n", why.c_str());
    }
  }
  if (verbose && link == DaemonLink::kJoined) {
    fprintf(stderr, "  joining gsliced's slice %s (its limits and protection level apply)\n", name.c_str());
  } else if (verbose && link == DaemonLink::kRegistered) {
    fprintf(stderr, "  registered with gsliced\n");
  }
  if (link != DaemonLink::kNone) JoinMps(name, class_arg == "opportunistic", compute_arg, verbose);
  if (!trace.file.empty()) {
    if (std::string why = PrepareTrace(&trace); !why.empty()) return Fail(why);
    setenv(GetOptionInfo(Option::Trace).env, trace.folder.c_str(), 1);
    if (verbose) fprintf(stderr, "  recording a timeline into %s\n", trace.file.c_str());
  }
  fflush(nullptr);
  if (link == DaemonLink::kRegistered || !trace.file.empty()) {
    return RunChild(argv + i, name, link == DaemonLink::kRegistered, trace);
  }
  execvp(argv[i], argv + i);
  fprintf(stderr, "gslice run: cannot run '%s': %s\n", argv[i], strerror(errno));
  return 127;
}

}  // namespace gslice::cli
