// gslice create: asks gsliced for a slice (admission control decides).
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "daemon_commands.h"
#include "gslice/slice_class.h"
#include "gslice/units.h"

namespace gslice::cli {

const char kCreateSummary[] = "create a slice through gsliced (admission control decides)";

namespace {

constexpr const char kCreateHelp[] = R"(usage: gslice create [NAME] --gpus LIST --memory SIZE[,SIZE...] [options]

Asks gsliced for a slice: memory (and optionally a compute share) on one or more GPUs,
owned by a user and a project. gsliced admits it only if it fits: guaranteed memory and
compute on a GPU never exceed the GPU, and a project's guaranteed work stays within its
quota. Work over quota may run as --class opportunistic. Run programs in it with
`gslice run --name NAME -- CMD` (its GPUs and limits come from gsliced); change it while
they run with `gslice set NAME ...`.

  NAME                 the slice's name (a-z, 0-9, '-', '_', '.'); default USER-N
  --gpus LIST          GPUs by index or UUID: 0 or 0,1 or GPU-8f3e...
  --memory SIZE[,...]  memory per GPU: one size for all, or one per GPU (8GiB, 512MiB)
  --share PCT[,...]    guaranteed compute share per GPU (30%); default none: the slice
                       shares what guaranteed work leaves. (--compute, its old name, still
                       works in this release, with a warning.) A hard cap: gslice set --cap
  --class CLASS        guaranteed (default: reserved, never suspended) or opportunistic
                       (not reserved; yields and may be suspended)
  --protect F          guaranteed only: the fraction of its solo speed that opportunistic
                       work on its GPUs must leave it, 0.5..1 (0.9 or 90%); default 0.97.
                       Lower lets opportunistic work harvest more of the GPU
  --idle-timeout T     suspend the slice after T with no GPU work (30m, 2h, 600s; for
                       notebooks); its next CUDA call resumes it. Default: never
  --project NAME       project to charge (default: gsliced's default project)
  --user NAME          owner (default: you, as the kernel tells gsliced; naming another
                       user is for admins)
  --json               print the created slice as JSON
  --socket PATH        gsliced's socket (default $GSLICE_SOCKET or /run/gsliced/gsliced.sock)

examples:
  gslice create train --gpus 0 --memory 20GiB --share 50%
  gslice create --gpus 0,1 --memory 40GiB,10GiB --project vision
  gslice create scratch --gpus 1 --memory 8GiB --class opportunistic
  gslice create serve --gpus 0 --memory 16GiB --share 50% --protect 0.9
  gslice create notebook --gpus 0 --memory 10GiB --idle-timeout 30m
)";

}  // namespace

int CreateCommand(int argc, char** argv) {
  CommonFlags flags;
  std::vector<std::string> rest;
  if (!ParseCommonFlags("create", argc, argv, &flags, &rest)) return 2;
  if (flags.help) {
    std::fputs(kCreateHelp, stdout);
    return 0;
  }
  std::string name, gpus, memory, compute, cls = "guaranteed", project, idle, user, protect;
  for (size_t i = 0; i < rest.size(); ++i) {
    const std::string& a = rest[i];
    std::string* target = nullptr;
    if (a == "--gpus") target = &gpus;
    else if (a == "--memory") target = &memory;
    else if (a == "--share") target = &compute;
    else if (a == "--compute") {  // the old spelling of --share, accepted for one release
      std::fprintf(stderr, "gslice create: --compute is now --share (the guaranteed compute share); --compute goes "
                           "in the next release\n");
      target = &compute;
    }
    else if (a == "--class") target = &cls;
    else if (a == "--project") target = &project;
    else if (a == "--user") target = &user;
    else if (a == "--idle-timeout") target = &idle;
    else if (a == "--protect") target = &protect;
    if (target != nullptr) {
      if (i + 1 >= rest.size()) {
        std::fprintf(stderr, "gslice create: %s needs a value; see gslice create --help\n", a.c_str());
        return 2;
      }
      *target = rest[++i];
    } else if (a.rfind("-", 0) == 0) {
      std::fprintf(stderr, "gslice create: unknown option '%s'; see gslice create --help\n", a.c_str());
      return 2;
    } else if (name.empty()) {
      name = a;
    } else {
      std::fprintf(stderr, "gslice create: one slice name at a time ('%s' and '%s')\n", name.c_str(), a.c_str());
      return 2;
    }
  }
  if (gpus.empty()) {
    std::fprintf(stderr, "gslice create: --gpus is required, e.g. --gpus 0 (see `gslice ls` for the GPUs)\n");
    return 2;
  }
  if (memory.empty()) {
    std::fprintf(stderr, "gslice create: --memory is required, e.g. --memory 8GiB\n");
    return 2;
  }
  if (!ParseSliceClass(cls)) {
    std::fprintf(stderr, "gslice create: --class %s: use guaranteed or opportunistic\n", cls.c_str());
    return 2;
  }
  nlohmann::json body;
  if (!protect.empty()) {
    if (cls != "guaranteed") {
      std::fprintf(stderr,
                   "gslice create: --protect: only guaranteed slices have a protection level (the share of their "
                   "solo speed kept against opportunistic work); drop --protect or use --class guaranteed\n");
      return 2;
    }
    ParsedProtect level = ParseProtect(protect);
    if (!level.ok) {
      std::fprintf(stderr, "gslice create: --protect %s: %s\n", protect.c_str(), level.error);
      return 2;
    }
    body["protect"] = level.permille / 1000.0;
  }
  std::vector<std::string> gpu_list = SplitComma(gpus), memories = SplitComma(memory);
  std::vector<std::string> computes = compute.empty() ? std::vector<std::string>{} : SplitComma(compute);
  if (memories.size() != 1 && memories.size() != gpu_list.size()) {
    std::fprintf(stderr, "gslice create: --memory has %zu sizes for %zu GPUs: give one, or one per GPU\n",
                 memories.size(), gpu_list.size());
    return 2;
  }
  if (computes.size() > 1 && computes.size() != gpu_list.size()) {
    std::fprintf(stderr, "gslice create: --share has %zu shares for %zu GPUs: give one, or one per GPU\n",
                 computes.size(), gpu_list.size());
    return 2;
  }
  if (!idle.empty()) {
    int64_t seconds = 0;
    if (!ParseIdleTimeout(idle, &seconds)) {
      std::fprintf(stderr, "gslice create: --idle-timeout %s: write e.g. 30m, 2h or 600s\n", idle.c_str());
      return 2;
    }
    body["idle_timeout_s"] = seconds;
  }
  if (!name.empty()) body["name"] = name;
  // gsliced knows who calls from the kernel; "user" only names another owner (admins).
  if (!user.empty()) body["user"] = user;
  if (!project.empty()) body["project"] = project;
  body["class"] = cls;
  body["gpus"] = nlohmann::json::array();
  for (size_t i = 0; i < gpu_list.size(); ++i) {
    if (gpu_list[i].empty()) {
      std::fprintf(stderr, "gslice create: --gpus %s has an empty entry\n", gpus.c_str());
      return 2;
    }
    const std::string& m = memories.size() == 1 ? memories[0] : memories[i];
    ParsedSize size = ParseSize(m);
    if (!size.ok || size.bytes == 0) {
      std::fprintf(stderr, "gslice create: --memory %s: %s; write e.g. 8GiB or 512MiB\n", m.c_str(),
                   size.ok ? "must be more than 0" : size.error);
      return 2;
    }
    nlohmann::json g = {{"gpu", gpu_list[i]}, {"memory", size.bytes}};
    if (!computes.empty()) {
      const std::string& c = computes.size() == 1 ? computes[0] : computes[i];
      ParsedPercent pct = ParsePercent(c);
      if (!pct.ok) {
        std::fprintf(stderr, "gslice create: --share %s: %s; write e.g. 30%%\n", c.c_str(), pct.error);
        return 2;
      }
      g["compute_share"] = pct.fraction;
    }
    body["gpus"].push_back(g);
  }
  DaemonReply reply;
  if (!CallDaemon("create", flags, "POST", "/v1/slices", body.dump(), &reply)) return 1;
  if (flags.json) {
    std::fputs(reply.body.c_str(), stdout);
    return 0;
  }
  auto created = nlohmann::json::parse(reply.body, nullptr, false);
  std::string created_name = created.is_object() ? created.value("name", name) : name;
  std::string what = cls;
  if (created.is_object() && created.contains("protect") && created["protect"].is_number()) {
    char level[32];
    std::snprintf(level, sizeof level, ", protect %g", created["protect"].get<double>());
    what += level;
  }
  std::printf("created slice %s (%s, user %s, project %s)\n", created_name.c_str(), what.c_str(),
              created.is_object() ? created.value("user", user).c_str() : user.c_str(),
              created.is_object() ? created.value("project", project).c_str() : project.c_str());
  std::printf("run programs in it: gslice run --name %s -- CMD ARGS\n", created_name.c_str());
  return 0;
}

}  // namespace gslice::cli
