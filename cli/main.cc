// gslice: the command-line tool. Commands come from one table; adding one is one line here
// plus its own file.
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "gslice/shrink_guard.h"
#include "daemon_commands.h"
#include "move_command.h"

namespace gslice::cli {
namespace {

struct Command {
  const char* name;
  const char* summary;
  CommandFn run;
};

const Command kCommands[] = {
    {"run", kRunSummary, RunCommand},
    {"ls", kLsSummary, LsCommand},
    {"top", kTopSummary, TopCommand},
    {"create", kCreateSummary, CreateCommand},
    {"delete", kDeleteSummary, DeleteCommand},
    {"suspend", kSuspendSummary, SuspendCommand},
    {"resume", kResumeSummary, ResumeCommand},
    {"set", kSetSummary, SetCommand},
    {"move", kMoveSummary, MoveCommand},
    {"trace", kTraceSummary, TraceCommand},
};

void Usage(FILE* out) {
  fprintf(out,
          "gslice: share NVIDIA GPUs between programs with memory slices.\n"
          "\n"
          "usage: gslice COMMAND [ARGS...]\n"
          "\n"
          "commands:\n");
  for (const Command& c : kCommands) fprintf(out, "  %-10s %s\n", c.name, c.summary);
  fprintf(out,
          "\n"
          "Run 'gslice COMMAND --help' for a command's options and examples.\n");
}

}  // namespace
}  // namespace gslice::cli

int main(int argc, char** argv) {
  using namespace gslice::cli;
  // Usage files belong to the slices' users, who may shrink them under a mapping (shrink_guard.h).
  gslice::InstallShrinkGuard();
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
    Usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const Command& c : kCommands) {
    if (strcmp(argv[1], c.name) == 0) return c.run(argc - 1, argv + 1);
  }
  fprintf(stderr, "gslice: unknown command '%s'\n\n", argv[1]);
  Usage(stderr);
  return 2;
}
