// gslice delete: removes slices from gsliced.
#include "daemon_commands.h"

namespace gslice::cli {

const char kDeleteSummary[] = "delete slices (from gsliced)";

namespace {

constexpr const char kDeleteHelp[] = R"(usage: gslice delete NAME... [--json] [--socket PATH]

Deletes slices: their reservations are freed at once. Processes still running in a
deleted slice are not killed; they keep the limits they have until they exit.

  --json          print {"deleted": [...], "failed": [...]} for scripts
  --socket PATH   gsliced's socket (default $GSLICE_SOCKET or /run/gsliced/gsliced.sock)

examples:
  gslice delete train
  gslice delete $(gslice ls --json | jq -r '.slices[] | select(.user=="alice") | .name')
)";

}  // namespace

int DeleteCommand(int argc, char** argv) {
  CommonFlags flags;
  std::vector<std::string> names;
  if (!ParseCommonFlags("delete", argc, argv, &flags, &names)) return 2;
  if (flags.help) {
    std::fputs(kDeleteHelp, stdout);
    return 0;
  }
  if (names.empty()) {
    std::fprintf(stderr, "gslice delete: name the slices to delete (`gslice ls` lists them)\n");
    return 2;
  }
  for (const std::string& n : names) {
    if (n.rfind("-", 0) == 0) {
      std::fprintf(stderr, "gslice delete: unknown option '%s'; see gslice delete --help\n", n.c_str());
      return 2;
    }
  }
  std::string deleted, failed;
  int status = 0;
  for (const std::string& n : names) {
    DaemonReply reply;
    if (n.find('/') != std::string::npos || n.find('?') != std::string::npos || n.find('%') != std::string::npos) {
      std::fprintf(stderr, "gslice delete: '%s' is not a slice name\n", n.c_str());
      failed += std::string(failed.empty() ? "" : ",") + "\"" + n + "\"";
      status = 1;
      continue;
    }
    if (!CallDaemon("delete", flags, "DELETE", "/v1/slices/" + n, "", &reply)) {
      if (!reply.connected) return 1;
      failed += std::string(failed.empty() ? "" : ",") + "\"" + n + "\"";
      status = 1;
      continue;
    }
    deleted += std::string(deleted.empty() ? "" : ",") + "\"" + n + "\"";
    if (!flags.json) std::printf("deleted slice %s\n", n.c_str());
  }
  if (flags.json) std::printf("{\"deleted\":[%s],\"failed\":[%s]}\n", deleted.c_str(), failed.c_str());
  return status;
}

}  // namespace gslice::cli
