// gslice's commands. Each lives in its own file (run_command.cc, ...) and is listed once in
// main.cc's table.
#pragma once

#include <string>

namespace gslice::cli {

// A command gets its arguments after the command name (argv[0] is the command name) and
// returns the process exit status. Errors are printed to stderr as "gslice <cmd>: ...".
using CommandFn = int (*)(int argc, char** argv);

int RunCommand(int argc, char** argv);
extern const char kRunSummary[];

// gslice run --remote (remote_run.cc): what RunCommand parsed and checked.
struct RemoteRun {
  std::string prefix;  // the installation prefix (build/)
  std::string address, memory, compute, share, slice_class, idle_timeout;
  bool sim = false, gpus = false, verbose = false;
};
// Sets the environment for the forwarding client; returns 0, or the exit status with the
// refusal printed.
int PrepareRemote(const RemoteRun& run);
// PrepareRemote, then runs the command in place of gslice (exec).
int RunRemote(const RemoteRun& run, char** command);

}  // namespace gslice::cli
