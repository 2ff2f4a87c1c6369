// gslice run --remote ADDR: runs a program on this machine (no GPU, no driver needed) whose
// CUDA driver calls go to gslice-remoted at ADDR, where a worker runs them in a slice of the
// --memory/--cap/--class asked for here (docs/remote.md). This side only sets the
// environment: the forwarding libcuda.so.1 and libnvidia-ml.so.1 first on LD_LIBRARY_PATH,
// the address and the slice in GSLICE_* variables that the client sends in its handshake.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "commands.h"
#include "gslice/options.h"

namespace gslice::cli {

int PrepareRemote(const RemoteRun& run) {
  auto fail = [](const std::string& msg) {
    fprintf(stderr, "gslice run: %s\n", msg.c_str());
    return 2;
  };
  const bool tls = run.address.rfind("tls://", 0) == 0;
  if (run.address.rfind("unix:", 0) != 0 && run.address.rfind("tcp://", 0) != 0 && !tls) {
    return fail("--remote " + run.address + ": expected unix:PATH, tcp://HOST:PORT or tls://HOST:PORT");
  }
  // tls://: the token comes from a file named in the environment, never from the command line
  // (where other users see it); the CA, if set, too. Both reach the program with the rest of
  // the environment.
  if (tls) {
    const char* token = getenv(OptionEnv(Option::RemoteTokenFile));
    if (token == nullptr || token[0] == '\0') {
      return fail("--remote " + run.address + ": set " + OptionEnv(Option::RemoteTokenFile) +
                  " to the file holding the server's token");
    }
    if (access(token, R_OK) != 0) {
      return fail(std::string(OptionEnv(Option::RemoteTokenFile)) + "=" + token + ": " + strerror(errno));
    }
    const char* ca = getenv(OptionEnv(Option::RemoteCa));
    if (ca != nullptr && ca[0] != '\0' && access(ca, R_OK) != 0) {
      return fail(std::string(OptionEnv(Option::RemoteCa)) + "=" + ca + ": " + strerror(errno));
    }
  }
  if (run.sim) return fail("--remote with --sim: the server chooses the driver (gslice-remoted --sim)");
  if (run.gpus) {
    // The server's `gslice run` gives the worker the GPUs gslice-remoted sees; choosing among
    // them from here is not part of the protocol.
    return fail("--remote with --gpus: a remote slice spans the GPUs the server gives its workers (every GPU "
                "gslice-remoted sees; limit them with CUDA_VISIBLE_DEVICES where it starts), so --gpus is not "
                "taken here. Leave it out; --memory takes one size, or one per server GPU");
  }
  const std::string dir = run.prefix + "/lib/remote";
  struct stat st;
  for (const char* lib : {"/libcuda.so.1", "/libnvidia-ml.so.1"}) {
    if (stat((dir + lib).c_str(), &st) != 0) {
      return fail(std::string("the forwarding ") + (lib + 1) + " is missing (" + dir + lib + "); build it (scripts/build)");
    }
  }
  std::string path = dir;
  if (const char* old = getenv("LD_LIBRARY_PATH"); old != nullptr && old[0] != '\0') path += std::string(":") + old;
  setenv("LD_LIBRARY_PATH", path.c_str(), 1);
  setenv(OptionEnv(Option::Remote), run.address.c_str(), 1);
  // What the handshake asks the server's `gslice run` for; unset ones take its defaults.
  const std::pair<Option, const std::string*> slice[] = {{Option::Memory, &run.memory},
                                                         {Option::Compute, &run.compute},
                                                         {Option::Share, &run.share},
                                                         {Option::Class, &run.slice_class},
                                                         {Option::IdleTimeout, &run.idle_timeout}};
  for (const auto& [option, value] : slice) {
    if (value->empty()) unsetenv(OptionEnv(option));
    else setenv(OptionEnv(option), value->c_str(), 1);
  }
  if (run.verbose) {
    fprintf(stderr, "gslice run: remote slice at %s: memory %s, compute %s, class %s\n", run.address.c_str(),
            run.memory.c_str(), run.compute.empty() ? "no cap" : run.compute.c_str(),
            run.slice_class.empty() ? "guaranteed" : run.slice_class.c_str());
  }
  return 0;
}

int RunRemote(const RemoteRun& run, char** command) {
  if (const int refused = PrepareRemote(run); refused != 0) return refused;
  fflush(nullptr);
  execvp(command[0], command);
  fprintf(stderr, "gslice run: cannot run '%s': %s\n", command[0], strerror(errno));
  return 127;
}

}  // namespace gslice::cli
