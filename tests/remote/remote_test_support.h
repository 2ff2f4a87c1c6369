// What the remote tests on the simulated driver share: the programs run directly on the
// simulated driver and through the client, the worker's pid from the client's log, whether a
// process is gone, the environment of a test suite's world (its /dev/shm prefix), the
// simulated device's memory in use, stopping a suite's server, and the files of a tls:// server.
// The including test defines GSLICE_TEST_BIN (the build's bin folder).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "node.h"
#include "sim_world.h"
#include "test_support.h"
#include "tls_files.h"

namespace gslice::remote::shared {

struct Result {
  int code = -1;
  std::string out;
};

inline Result RunProgram(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
                         int timeout_ms = 60000) {
  gslice::test::Child c(argv, env);
  Result r;
  r.code = c.Wait(&r.out, timeout_ms);
  return r;
}

// cmd under gslice run on the simulated driver.
inline std::vector<std::string> Direct(const std::string& memory, std::vector<std::string> cmd) {
  std::vector<std::string> argv = {std::string(GSLICE_TEST_BIN) + "/gslice", "run", "--sim", "--memory", memory, "--"};
  argv.insert(argv.end(), cmd.begin(), cmd.end());
  return argv;
}

// cmd through the client, to the server at address.
inline std::vector<std::string> Remote(const std::string& address, const std::string& memory,
                                       std::vector<std::string> cmd) {
  std::vector<std::string> argv = {std::string(GSLICE_TEST_BIN) + "/gslice", "run", "--remote", address, "--memory",
                                   memory, "--"};
  argv.insert(argv.end(), cmd.begin(), cmd.end());
  return argv;
}

// The worker's pid from the client's info log line ("... worker pid N").
inline pid_t WorkerPid(const std::string& line) {
  const size_t at = line.find("worker pid ");
  return at == std::string::npos ? -1 : static_cast<pid_t>(std::stol(line.substr(at + 11)));
}

// Gone or a zombie. read(2), not a stream: reading the file of a process that just ended
// fails with ESRCH, which a stream reports as an empty file.
inline bool Gone(pid_t pid) {
  const int fd = open(("/proc/" + std::to_string(pid) + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  char buf[512];
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return true;
  const std::string text(buf, static_cast<size_t>(n));
  const size_t paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
}

inline bool GoneWithin(pid_t pid, int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!Gone(pid) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Gone(pid);
}

// A suite's world and its removal (tests/support/sim_world.h).
using gslice::test::RemoveSimWorld;
using gslice::test::SetUpSimWorld;

// The simulated device 0's memory in use (~0 when the node cannot be opened).
inline uint64_t SimUsed() {
  gslice::sim::Node node;
  std::string error;
  if (!gslice::sim::Node::Open(&node, &error)) return ~0ull;
  return node.Used(0);
}

// The processes whose parent chain reaches `ancestor` (itself included) and whose command line
// holds `word`.
inline int CountDescendants(pid_t ancestor, const std::string& word) {
  int n = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = entry.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmd(entry.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
    if (cmdline.find(word) == std::string::npos) continue;
    for (pid_t p = std::stoi(pid); p > 1;) {
      if (p == ancestor) {
        ++n;
        break;
      }
      std::ifstream stat("/proc/" + std::to_string(p) + "/stat");
      std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
      const size_t paren = text.rfind(')');
      if (paren == std::string::npos) break;
      int ppid = 0;
      char state = 0;
      if (sscanf(text.c_str() + paren + 1, " %c %d", &state, &ppid) != 2) break;
      p = ppid;
    }
  }
  return n;
}

// Starts a suite's gslice-remoted on the simulated driver, serving socket_path (root clients
// get workers); before it, asan_runtime (the sanitize build's, else empty) is preloaded for
// every program the suite starts, ahead of the shim gslice run preloads. The caller waits for
// "gslice-remoted: listening on" and stops it with StopServer.
inline gslice::test::Child* StartSimServer(const std::string& socket_path, const std::string& asan_runtime) {
  if (!asan_runtime.empty()) setenv("LD_PRELOAD", asan_runtime.c_str(), 1);
  unlink(socket_path.c_str());
  return new gslice::test::Child({std::string(GSLICE_TEST_BIN) + "/gslice-remoted", "--listen", "unix:" + socket_path,
                                  "--sim", "--allow-root-tenant"});
}

// Stops a suite's gslice-remoted (SIGTERM, then waits for it) and removes its unix socket.
inline void StopServer(gslice::test::Child** server, const std::string& socket_path) {
  if (*server != nullptr) {
    (*server)->Kill(SIGTERM);
    (*server)->Wait(nullptr, 10000);
    delete *server;
    *server = nullptr;
  }
  unlink(socket_path.c_str());
}

// A CA, a server certificate for 127.0.0.1 signed by it and its key, a certificate of
// another CA, a token and a wrong one (tests/support/tls_files.h).
using TlsFiles = gslice::test::TlsFiles;


}  // namespace gslice::remote::shared
