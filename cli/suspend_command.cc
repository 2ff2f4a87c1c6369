// gslice suspend / gslice resume: ask gsliced to move a slice's GPU state to host memory
// and back.
#include <nlohmann/json.hpp>

#include "daemon_commands.h"

namespace gslice::cli {

const char kSuspendSummary[] = "suspend a slice: its GPU memory moves to host RAM (gsliced)";
const char kResumeSummary[] = "resume a suspended slice (gsliced)";

namespace {

constexpr const char kSuspendHelp[] = R"(usage: gslice suspend NAME [--json] [--socket PATH]

Suspends every process of the slice: gsliced checkpoints their GPU state into host memory
through the driver, freeing the GPU memory they held. The programs keep running on the
CPU side and continue where they were after `gslice resume NAME`.

gsliced answers when the slice is suspended, or says why it could not be (then the slice
keeps running). States show in `gslice ls`: suspending, suspended, resuming, failed.

  --json          print the slice as JSON
  --socket PATH   gsliced's socket (default $GSLICE_SOCKET or /run/gsliced/gsliced.sock)
)";

constexpr const char kResumeHelp[] = R"(usage: gslice resume NAME [--json] [--socket PATH]

Resumes a suspended slice: its processes' GPU state is restored and they continue.

  --json          print the slice as JSON
  --socket PATH   gsliced's socket (default $GSLICE_SOCKET or /run/gsliced/gsliced.sock)
)";

int Transition(const char* command, const char* help, int argc, char** argv) {
  CommonFlags flags;
  std::vector<std::string> rest;
  if (!ParseCommonFlags(command, argc, argv, &flags, &rest)) return 2;
  if (flags.help) {
    std::fputs(help, stdout);
    return 0;
  }
  if (rest.size() != 1 || rest[0].rfind("-", 0) == 0) {
    std::fprintf(stderr, "gslice %s: name one slice, e.g. gslice %s train (`gslice ls` lists them)\n", command,
                 command);
    return 2;
  }
  const std::string& name = rest[0];
  if (name.find_first_of("/?%#") != std::string::npos) {
    std::fprintf(stderr, "gslice %s: '%s' is not a slice name\n", command, name.c_str());
    return 2;
  }
  DaemonReply reply;
  if (!CallDaemon(command, flags, "POST", "/v1/slices/" + name + "/" + command, "", &reply)) return 1;
  if (flags.json) {
    std::fputs(reply.body.c_str(), stdout);
    return 0;
  }
  auto slice = nlohmann::json::parse(reply.body, nullptr, false);
  std::printf("slice %s is %s\n", name.c_str(),
              slice.is_object() ? slice.value("state", std::string("?")).c_str() : "?");
  return 0;
}

}  // namespace

int SuspendCommand(int argc, char** argv) { return Transition("suspend", kSuspendHelp, argc, argv); }
int ResumeCommand(int argc, char** argv) { return Transition("resume", kResumeHelp, argc, argv); }

}  // namespace gslice::cli
